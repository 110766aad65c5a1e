"""Chapter 02: the paper's numbers it cites, the tables it builds from the comparison group ch02.tp
(the committed records, and small frames made here), and its diagram's text inside the picture."""

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from megalab.charts.timeline import KERNEL_WORDS
from megalab.book import chapters
from megalab.book.chapters import ch02_analysis as ch02
from megalab.book.chapters import ch02_tensor_parallel as paper
from megalab.book.chapters import ch02_against_dp as against
from megalab.records import timings
from megalab.runs import presets

ROOT = Path(__file__).resolve().parents[1]


def test_the_papers_numbers():
    """Shoeybi et al. 2019 (arXiv 1909.08053): Table 8's speed-ups of the 1.2B model at batch 8,
    Fig. 5's model-parallel weak-scaling bars (the text quotes 77% at 8-way), the 39 TFLOP/s one-GPU
    baseline."""
    assert paper.PAPER_STRONG_SPEEDUP == {1: 1.0, 2: 1.64, 4: 2.34, 8: 2.98}
    assert paper.PAPER_WEAK_EFFICIENCY == {1: 1.0, 2: 0.95, 4: 0.82, 8: 0.77}
    assert paper.PAPER_TFLOPS_PER_GPU == 39.0 and paper.PAPER.endswith("1909.08053")
    assert set(paper.PAPER_STRONG_SPEEDUP) == set(paper.WEAK_TP_MODELS)


def test_layout_in_words():
    base = presets.get("gpt-1.2b").replace(mbs=8, gbs=32)
    assert ch02.layout(base.replace(gpus=1)) == "1 GPU"
    assert ch02.layout(base.replace(gpus=4, tp=4)) == "TP 4"
    assert (
        ch02.layout(base.replace(gpus=4, tp=2, dist_opt=True))
        == "TP 2 × DP 2 + distributed optimizer"
    )


# -- the comparison group, as committed
# ------------------------------------------------------------------
@pytest.fixture(scope="module")
def group():
    return timings.group(None, "ch02.tp", "H200")


def test_strong_and_weak_scaling_read_the_graphed_runs(group):
    st = ch02.strong_scaling(group)
    assert list(st["tp"]) == [1, 2, 4] and st["speedup"].iloc[0] == 1.0
    assert list(st["paper_speedup"]) == [1.0, 1.64, 2.34]
    assert st["median_ms"].is_monotonic_decreasing
    wk = ch02.weak_scaling(group)
    assert (
        list(wk["model"]) == ["gpt-1.2b", "gpt-2.5b", "gpt-4.2b"]
        and wk["efficiency"].iloc[0] == 1.0
    )
    assert wk["mfu"].iloc[0] == pytest.approx(st["mfu"].iloc[0])
    # efficiency is TFLOP/s per GPU over the one-GPU run's: the MFU ratio on one GPU model
    assert wk["efficiency"].iloc[1] == pytest.approx(wk["mfu"].iloc[1] / wk["mfu"].iloc[0])


def test_beside_paper_pairs_each_row(group):
    bars = ch02.beside_paper(ch02.strong_scaling(group), "speedup", "paper_speedup")
    assert list(bars["who"].unique()) == [ch02.MEASURED, ch02.PAPER_NAME]
    assert list(bars.loc[bars["who"] == ch02.PAPER_NAME, "speedup"]) == [1.0, 1.64, 2.34]


def test_eager_beside_its_graphed_twin(group):
    ev = ch02.eager_vs_graphs(group)
    assert list(ev["launch"]) == ["eager", "CUDA graphs"] and set(ev["layout"]) == {"TP 2"}
    assert ev.attrs["slower"] == pytest.approx(ev["median_ms"].iloc[0] / ev["median_ms"].iloc[1])
    assert ev.attrs["busy_at_most"] == pytest.approx(1 / ev.attrs["slower"])
    assert (ev["run_spread"] >= 0).all()


def test_eager_vs_graphs_needs_a_pair(group):
    graphed = group[[c.cuda_graphs != "none" for c in group["cfg"]]]
    with pytest.raises(LookupError, match="without CUDA graphs"):
        ch02.eager_vs_graphs(graphed)


def test_step_parts_add_up_to_the_median(group):
    _, record = timings.group_runs(None, "ch02.tp", "H200")
    parts = ch02.step_parts(group, record["profile"], busbw_gbs=250.0)
    ms = parts.set_index("part")["measured_ms"]
    label = group.attrs["profiled"]
    assert ms["step (median)"] == pytest.approx(group.loc[label, "median_ms"])
    assert ms["compute kernels"] + ms["all-reduce transfers"] + ms[
        "waiting and gaps"
    ] == pytest.approx(ms["step (median)"])
    cfg = group.loc[label, "cfg"]
    assert parts.attrs["allreduces"] == 4 * cfg.layers * cfg.num_microbatches == 160
    assert 0 < parts.attrs["typical_ms"] < parts.attrs["nccl_ms"]


def test_runs_table_names_every_configuration_in_words(group):
    rows = ch02.runs_table(group)
    assert len(rows) == len(group) and (rows["runs"] >= 2).all()
    assert "gpt-1.2b, TP 2, eager" in set(rows["configuration"])
    assert not rows["configuration"].str.contains("_tp").any()
    assert rows["run_medians"].str.count(";").eq(rows["runs"] - 1).all()


# -- step_parts on a made-up profile
# ----------------------------------------------------------------------
def _group_of(one_ms: float, tp_ms: float):
    """A two-row group frame: gpt-1.2b on one GPU and on TP 2 (profiled), medians given."""
    base = presets.get("gpt-1.2b").replace(mbs=8, gbs=8, cuda_graphs="te")
    cfgs = [base.replace(gpus=1), base.replace(gpus=2, tp=2)]
    df = pd.DataFrame(
        {
            "cfg": cfgs,
            "median_ms": [one_ms, tp_ms],
            "lo_ms": [one_ms, tp_ms],
            "hi_ms": [one_ms, tp_ms],
            "mfu": [0.4, 0.3],
            "run_ms": [[one_ms], [tp_ms]],
        },
        index=["one", "tp2"],
    )
    df.attrs.update(name="test", profiled="tp2")
    return df


def test_step_parts_on_a_made_up_step():
    """Two overlapping compute kernels (union 3 ms), 160 all-reduces of 0.1 ms and one of 2 ms (a
    wait)."""
    kernels = [["gemm", 0.0, 2.0, 7], ["other", 1.0, 2.0, 8]]
    kernels += [["nccl", 3.0 + 0.1 * i, 0.1, 9] for i in range(160)] + [["nccl", 20.0, 2.0, 9]]
    profile = {
        "timeline": {
            "columns": ["category", "start_ms", "duration_ms", "stream"],
            "kernels": kernels,
        }
    }
    g = _group_of(one_ms=4.0, tp_ms=30.0)
    parts = ch02.step_parts(g, profile, busbw_gbs=250.0).set_index("part")
    assert parts.loc["compute kernels", "measured_ms"] == pytest.approx(3.0)
    assert parts.loc["compute kernels", "expected_ms"] == pytest.approx(
        2.0
    )  # one GPU's 4 ms over TP 2
    assert parts.loc["all-reduce transfers", "measured_ms"] == pytest.approx(16.0)
    assert parts.loc["waiting and gaps", "measured_ms"] == pytest.approx(11.0)
    cfg = g.loc["tp2", "cfg"]
    from megalab import theory

    assert parts.loc["all-reduce transfers", "expected_ms"] == pytest.approx(
        theory.comm_bytes_per_step(cfg)["tp"] / 250e9 * 1e3
    )


def test_step_parts_needs_a_profiled_run():
    g = _group_of(4.0, 3.0)
    g.attrs["profiled"] = None
    with pytest.raises(LookupError, match="no profiled run"):
        ch02.step_parts(g, {}, 250.0)


def test_predicted_uses_the_given_bandwidth():
    cfgs = [
        c for c in chapters.tensor_parallel(4)["groups"]["tp"].configs if c.cuda_graphs != "none"
    ]
    pred = ch02.predicted(cfgs, busbw={2: 200.0, 4: 250.0})
    assert list(pred["layout"]) == ["1 GPU", "TP 2", "TP 4", "TP 2", "TP 4"]
    assert pred["tp_ms"].iloc[0] == 0.0
    assert pred["tp_ms"].iloc[2] == pytest.approx(pred["tp_gb"].iloc[2] / 250.0 * 1e3)
    assert ch02.message_bytes(cfgs[0]) == 1024 * 8 * 1536 * 2


def test_memory_rows():
    class R:  # a Result's two attributes memory reads
        def __init__(self, cfg, gib):
            self.config, self.summary = cfg, {"mem_reserved_peak_gib": gib}

    base = presets.get("gpt-1.2b").replace(mbs=8, gbs=8)
    rows = ch02.memory([R(base.replace(gpus=1), 37.6), R(base.replace(gpus=4, tp=4), 12.4)], "H200")
    assert list(rows["layout"]) == ["1 GPU", "TP 4"] and list(rows["measured_gib"]) == [37.6, 12.4]
    assert (
        rows["predicted_gib"].is_monotonic_decreasing
        and rows["largest_mbs"].is_monotonic_increasing
    )
    pairs = ch02.memory(
        [(base.replace(gpus=1), {"summary": {"mem_reserved_peak_gib": 37.6}})], "H200"
    )
    assert pairs.equals(rows.iloc[:1])


def test_parity_curves_are_named_by_layout():
    pars = [p.run("cached", quiet=True) for p in chapters.tensor_parallel(4)["parity"]]
    curves = ch02.parity_curves(pars)
    assert list(curves) == ["1 GPU", "TP 2", "TP 4"]
    assert all(set(c) >= {"step", "loss"} for c in curves.values())


# -- the diagram
# ----------------------------------------------------------------------------------------
def test_diagram_text_fits_the_picture():
    """Every line of the SVG's text fits its viewBox, at a generous 0.6 em per character (0.65
    bold): the caption is not clipped at any page width."""
    svg = ET.parse(ROOT / "book/02_tensor_parallel/tensor_parallel.svg").getroot()
    _, _, width, height = map(float, svg.get("viewBox").split())
    base = float(svg.get("font-size", 13))
    for t in svg.iter("{http://www.w3.org/2000/svg}text"):
        size = float(t.get("font-size", base))
        w = len(t.text or "") * size * (0.65 if t.get("font-weight") == "bold" else 0.6)
        x, y = float(t.get("x")), float(t.get("y"))
        left = {"middle": x - w / 2, "end": x - w}.get(t.get("text-anchor"), x)
        assert 0 <= left and left + w <= width and y <= height, (t.text, left, left + w, width)
    assert re.search(
        r"2 all-reduces forward and 2 backward",
        (ROOT / "book/02_tensor_parallel/tensor_parallel.svg").read_text(),
    )


def test_timeline_marks_the_long_nccl_kernels_and_spans_the_profiled_step():
    from megalab.records import timings

    prof = timings.group_runs(None, "ch02.tp", "H200")[1]
    fig = ch02.timeline(prof["profile"], "t")
    assert fig.layout.meta["span_ms"] > fig.layout.meta["waits_ms"] > 0
    assert fig.data[-1].name == KERNEL_WORDS["gemm"]  # drawn last, on top
    assert {d.name for d in fig.data} <= set(KERNEL_WORDS.values())  # the legend in words
    assert len(fig.layout.shapes) >= 2


def test_profiled_step_measures_idle_time_and_nccl_beside_compute():
    # main stream 7: gemm 0-2, NCCL 2-3, idle 3-5, gemm 5-6; stream 9: NCCL 5.5-6.5, half beside
    profile = {
        "timeline": {
            "columns": ["category", "start_ms", "duration_ms", "stream"],
            "kernels": [
                ["gemm", 10.0, 2.0, 7],
                ["nccl", 12.0, 1.0, 7],
                ["gemm", 15.0, 1.0, 7],
                ["nccl", 15.5, 1.0, 9],
            ],
        }
    }
    p = ch02.profiled_step(profile)
    assert p["span_ms"] == pytest.approx(6.5) and p["busy_ms"] == pytest.approx(4.5)
    assert p["idle_ms"] == pytest.approx(2.0)
    assert p["nccl_ms"] == pytest.approx(2.0) and p["side_nccl_ms"] == pytest.approx(1.0)
    assert p["overlap_ms"] == pytest.approx(0.5) and p["overlap_share"] == pytest.approx(0.25)


def test_the_tp4_profile_is_exposed_and_its_gaps_are_the_profilers():
    from megalab.records import timings

    g = timings.group(None, "ch02.tp", "H200")
    p = ch02.profiled_step(timings.group_runs(None, "ch02.tp", "H200")[1]["profile"])
    median = g.loc[g.attrs["profiled"], "median_ms"]
    assert p["overlap_share"] < 0.05 and p["side_nccl_ms"] > 0
    assert p["busy_ms"] / median == pytest.approx(g.attrs["gpu_busy"])
    assert 0.8 < (p["span_ms"] - median) / p["idle_ms"] < 1.2


# -- TP against DP at equal memory use (ch02_against_dp)
# ----------------------------------------------------------
@pytest.fixture(scope="module")
def against_dp():
    return timings.group(None, "ch02.tp-vs-dp", "H200")


def test_the_against_dp_group_runs_what_the_chapter_declares(against_dp):
    """Each recorded configuration is one of the group the chapter declares: DP 4 + distributed
    optimizer at micro-batch 8, TP 2 × DP 2 at 12 and TP 4 at 24, global batch 96, CUDA graphs."""
    declared = chapters.tensor_parallel(4)["groups"]["tp_vs_dp"].configs
    assert [c.key for c in against_dp["cfg"]] == [c.key for c in declared]
    assert [(c.tp, c.mbs, c.gbs, c.cuda_graphs) for c in declared] == [
        (1, 8, 96, "te"),
        (2, 12, 96, "te"),
        (4, 24, 96, "te"),
    ]


def test_against_dp_table_reads_the_group(against_dp):
    class R:  # a Result's two attributes the table reads
        def __init__(self, cfg, gib):
            self.config, self.summary = cfg, {"mem_reserved_peak_gib": gib}

    runs = [R(c, 20.0 + c.tp) for c in against_dp["cfg"]]
    t = against.table(against_dp, runs, busbw={2: 200.0, 4: 250.0})
    assert list(t["layout"]) == [
        "DP 4 + distributed optimizer, micro-batch 8",
        "TP 2 × DP 2 + distributed optimizer, micro-batch 12",
        "TP 4, micro-batch 24",
    ]
    assert list(t["measured_gib"]) == [21.0, 22.0, 24.0]
    assert t["tokens_s"].iloc[0] == pytest.approx(96 * 1024 / (t["median_ms"].iloc[0] / 1e3))
    assert t.attrs["budget_gib"] == t["gib"].iloc[0] and (t["gib"] <= t.attrs["budget_gib"]).all()
    assert t["tp_gb"].iloc[0] == 0 and t["dp_gb"].iloc[-1] == 0  # DP 4 no TP; TP 4 no DP
    assert t["tp_ms"].iloc[-1] == pytest.approx(t["tp_gb"].iloc[-1] / 250.0 * 1e3)
    assert (t["sent_gb"] == t["tp_gb"] + t["dp_gb"]).all()
    assert t.attrs["profiled"] == against_dp.index[-1] and t.attrs["gpu_busy"] > 0.7
    own = against.table(against_dp, busbw={2: 200.0, 4: 250.0})["measured_gib"]  # the group's
    assert list(own) == list(against_dp["peak_gib"]) and own.notna().all()


def test_split_counts_overlapping_compute_once():
    kernels = [["gemm", 0.0, 2.0, 7], ["other", 1.0, 2.0, 8], ["nccl", 3.0, 0.5, 9]]
    kernels.append(["nccl", 4.0, 1.5, 9])
    profile = {
        "timeline": {
            "columns": ["category", "start_ms", "duration_ms", "stream"],
            "kernels": kernels,
        }
    }
    assert against.split(profile) == pytest.approx({"compute_ms": 3.0, "nccl_ms": 2.0})


def test_a_large_model_fits_only_with_tp():
    big = against.fits(against.TOO_BIG, 4, "H200")
    assert list(big["layout"]) == ["DP 4 + distributed optimizer", "TP 4"]
    assert list(big["fits"]) == [False, True] and big["gib"].iloc[0] > big["gib"].iloc[1]
    assert against.fits("gpt-1.2b", 4, "H200")["fits"].all()


def test_defining_is_what_the_figures_read():
    """A quick reproduction re-measures the groups as recorded (Group.run: CUDA graphs, the one
    eager run, the groups' iterations), the memory runs and the widest loss parity."""
    from megalab.book.specs import Group, keys_of

    r = chapters.tensor_parallel(4)
    got = paper.defining(4)
    assert [g for g in got if isinstance(g, Group)] == list(r["groups"].values())
    keys = {k for item in got for k in keys_of(item)}
    timed = {
        c.key for g in ("ch02.tp", "ch02.tp-vs-dp") for c in timings.group(None, g, "H200")["cfg"]
    }
    assert timed <= keys  # exactly the recorded configurations
    assert {c.key for c in r["strong"]} <= keys and got[-1] == r["parity"][-1]
    assert sum(c.cuda_graphs == "none" for c in r["groups"]["tp"].configs) == 1  # TP 2 eager
    assert not set(keys_of(r["tp_vs_dp"][-1])) & keys
    assert paper.defining(1) and not any(
        c.tp > 1 for item in paper.defining(1) for c in getattr(item, "configs", [item])
    )


def test_the_series_eager_tp_steps_sit_on_a_floor():
    """megatron-tutorials' strong-scaling rows (copied): TP 2 1.05× at batch 8; the TP 4 and TP 8
    steps 200-207 ms at batch 8 and 20 alike."""
    from megalab.book.chapters import ch02_analysis

    got = ch02_analysis.series_tp_strong()
    assert got["tp2_x"] == pytest.approx(210 / 200)
    assert got["floor_ms"] == 207 and got["floor_spread"] == pytest.approx(207 / 200 - 1)
