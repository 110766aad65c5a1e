"""Chapter 04's tables (megalab.book.chapters.ch04_analysis) and its evidence page's
(ch04_eager): over the committed records, and over small frames made here for the comparison
group."""

import math

import pandas as pd
import pytest

import megalab
from megalab.book import chapters
from megalab.book.chapters import ch04_analysis as ch04
from megalab.book.chapters import ch04_eager as eager
from megalab.runs import presets

ONE = presets.get("gpt-1.2b").replace(mbs=1, gbs=1, seq=2048)


@pytest.fixture(scope="module")
def book():
    return chapters.context_parallel(2, gpu="H200"), chapters.context_parallel(4, gpu="H200")


def _runs(cfgs):
    return [megalab.run(c, "cached", quiet=True) for c in cfgs]


def test_layouts_in_words():
    assert ch04.layout(ONE) == "1 GPU"
    assert ch04.layout(ONE.replace(gpus=2, cp=2)) == "CP 2 (ring)"
    assert ch04.layout(ONE.replace(gpus=2, cp=2, cp_comm="all_gather")) == "CP 2 (all-gather)"
    assert ch04.layout(ONE.replace(gpus=4, cp=4, cp_comm="a2a+p2p")) == "CP 4 (all-to-all + P2P)"
    assert ch04.layout(ONE.replace(gpus=2, cp=2, cuda_graphs="te")) == "CP 2 (ring)"


def test_lengths_grow_linearly_in_memory_and_attention_takes_over():
    t = ch04.lengths(ONE, "H200", [2048, 4096, 8192])
    step = t["gib"].diff().dropna()
    # activations: a straight line in s (the learned positions add a little per token)
    assert step.iloc[1] == pytest.approx(2 * step.iloc[0], rel=0.02)
    assert t["share"].is_monotonic_increasing and 0 < t["share"].iloc[0] < 0.2
    half = ch04.lengths(ONE, "H200", [8192], cp=2)
    assert half["act_gib"].iloc[0] == pytest.approx(t["act_gib"].iloc[2] / 2, rel=0.01)


def test_memory_rows_pair_each_run_with_theory(book):
    b2, _ = book
    sweep = _runs(b2["seq_1gpu"])
    rows = ch04.memory_rows(sweep, _runs(b2["comm"]["p2p"]), "H200")
    assert set(rows["series"]) == {
        "1 GPU, measured",
        "1 GPU, predicted",
        "CP 2, measured",
        "CP 2, predicted",
    }
    measured = rows[rows["series"] == "1 GPU, measured"]
    # the out-of-memory run has no peak to draw: it is the first OOM instead
    assert list(measured["seq"]) == [2048, 4096, 8192, 16384, 32768]
    assert ch04.first_oom(sweep) == 65536 and ch04.first_oom(sweep[:2]) is None


def test_longest_sets_measured_beside_predicted(book):
    b2, b4 = book
    fits = {1: b2["fit_seq"][1].run("cached", quiet=True)}
    fits[4] = b4["fit_seq"][4].run("cached", quiet=True)
    t = ch04.longest(ONE, fits, "H200").set_index("cp")
    assert list(t.index) == [1, 2, 4, 8] and t["predicted"].is_monotonic_increasing
    assert t.at[1, "ratio"] == 1.0 and 3 < t.at[4, "ratio"] < 4
    assert math.isnan(t.at[2, "measured"]) and math.isnan(t.at[8, "ratio"])


def test_traffic_by_type():
    t = ch04.traffic(ONE, 2, [32768]).set_index("traffic")["GB"]
    assert t["CP 2 (ring)"] == t["CP 2 (all-gather)"]
    # a2a moves 2 (cp-1)/cp of Q, K, V, O against the ring's 3 (cp-1) K/V chunks: 2/3 at CP 2
    assert t["CP 2 (all-to-all)"] / t["CP 2 (ring)"] == pytest.approx(2 / 3, rel=0.01)
    assert t["TP 2 + SP"] > t["CP 2 (ring)"] > t["CP gradient all-reduce"] > 0


def _group(ms: dict):
    """A frame shaped as timings.group returns it: {cfg: median ms}."""
    cfgs = list(ms)
    g = pd.DataFrame(
        {
            "cfg": cfgs,
            "median_ms": list(ms.values()),
            "lo_ms": [v * 0.99 for v in ms.values()],
            "hi_ms": [v * 1.01 for v in ms.values()],
            "mfu": [0.3] * len(cfgs),
            "runs": [2] * len(cfgs),
            "run_ms": [[v, v + 1] for v in ms.values()],
            "half": [0.01] * len(cfgs),
            "wide": [False] * len(cfgs),
        },
        index=[c.label for c in cfgs],
    )
    g.attrs["name"] = "ch04.cp"
    return g


def test_speedup_divides_each_length_by_its_one_gpu_run():
    base = ONE.replace(cuda_graphs="te")
    cfgs = {
        base.replace(seq=8192): 100.0,
        base.replace(seq=16384): 240.0,
        base.replace(gpus=2, cp=2, seq=8192): 80.0,
        base.replace(gpus=2, cp=2, seq=16384): 150.0,
        base.replace(gpus=2, cp=2, seq=8192, cp_comm="all_gather"): 90.0,
    }
    s = ch04.speedup(_group(cfgs))
    assert list(s["layout"]) == [
        "1 GPU",
        "CP 2 (ring)",
        "CP 2 (all-gather)",
        "1 GPU",
        "CP 2 (ring)",
    ]
    assert list(s["speedup"]) == pytest.approx([1.0, 100 / 80, 100 / 90, 1.0, 240 / 150])
    table = ch04.runs_table(_group(cfgs))
    assert table["configuration"].iloc[-1] == "8k tokens, CP 2 (all-gather)"
    assert table["run_medians"].iloc[0] == "100.0; 101.0" and list(table["runs"]) == [2] * 5
    assert set(table["wide"]) == {"no"}
    # the group's medians make the same line as runs do: no fixed part when the GPU paces the step
    line = eager.fixed_cost([(c, ms / 1e3) for c, ms in cfgs.items() if c.cp == 1])
    assert line["layout"].tolist() == ["1 GPU"] and line["runs"].iloc[0] == 2
    with pytest.raises(LookupError, match="no one-GPU run at \\[16384\\]"):
        ch04.speedup(_group({k: v for k, v in cfgs.items() if k.seq == 8192 or k.cp > 1}))


def test_ring_profile_and_rank_work_read_the_profiled_steps(book):
    b2, b4 = book
    ring = b2["profile"][0].run("cached", quiet=True)
    p = ch04.ring_profile(ring.config, ring.record["profile"], 270.0)
    # the eager ring: one stream of send/recv, a third of it behind attention
    assert 0.25 < p["hidden"] < 0.4 and 0 < p["exposed_ms"] <= p["cp_ms"] * (1 - p["hidden"])
    assert 0 < p["busy"] <= 1 and p["compute_ms"] > p["attention_ms"] > p["cp_ms"]
    assert 10 < p["grad_ms"] < p["grad_pred_ms"]  # the all-reduce, once per step
    prof4 = [x.run("cached", quiet=True) for x in b4["profile"]]
    w = ch04.rank_work([(r.config, r.record["profile"]) for r in prof4])
    assert len(w) == 12 and set(w["rank"]) == {0, 1, 2, 3}
    for _, one in w.groupby("layout"):  # theory shares the measured total
        assert one["zigzag_s"].sum() == pytest.approx(one["measured_s"].sum())
        assert one["contiguous_s"].max() / one["contiguous_s"].min() == pytest.approx(7.0, rel=1e-3)


def test_parity_curves_are_named_by_layout_and_length(book):
    b2, _ = book
    pars = [p.run("cached", quiet=True) for p in [*b2["parity"], *b2["parity_long"]]]
    names = list(ch04.parity_curves(pars))
    assert names == [
        "1 GPU, 4k tokens",
        "CP 4 (ring), 4k tokens",
        "CP 4 (all-gather), 4k tokens",
        "CP 4 (all-to-all), 4k tokens",
        "1 GPU, 16k tokens",
        "CP 2 (ring), 16k tokens",
    ]


# -- the evidence page: the eager runs
# -------------------------------------------------------------------
def test_fixed_cost_is_the_line_at_zero_flops():
    class R:
        status = "ok"

        def __init__(self, seq, step):
            self.config = ONE.replace(seq=seq)
            self.summary = {"step_time_s": step}

    from megalab import theory

    runs = [R(s, 0.2 + theory.model_flops(ONE.replace(seq=s)) / 1e12 / 500) for s in (2048, 8192)]
    row = eager.fixed_cost(runs).iloc[0]
    assert row["layout"] == "1 GPU" and row["runs"] == 2
    assert row["fixed_s"] == pytest.approx(0.2) and row["rate"] == pytest.approx(500)


def test_ring_kernels_set_waiting_beside_bytes(book):
    _, b4 = book
    r = b4["profile"][0].run("cached", quiet=True)
    k = eager.ring_kernels(r.config, r.record["profile"], 325.0)
    # one hop: K and V of s/cp tokens in bf16
    assert k["hop_ms"] == pytest.approx(2 * 4096 * 1536 * 2 / 325e9 * 1e3)
    assert k["fast_ms"] <= k["median_ms"] <= k["slow_ms"]
    assert k["bytes_ms"] == pytest.approx(k["hop_ms"] * k["kernels"])


def test_compute_share_and_end_loss(book):
    _, b4 = book
    r = b4["profile"][0].run("cached", quiet=True)
    rows = eager.compute_share(r.config, r.record["profile"], 0.5)
    assert [x["rank"] for x in rows] == [0, 1, 2, 3]
    assert all(x["share"] == pytest.approx(x["compute_s"] / 0.5) for x in rows)
    timed = _runs([c for c in b4["comm"]["p2p"] if c.seq == 16384])
    assert eager.median_steps(timed) == {("p2p", 16384): timed[0].summary["step_time_s"]}
    ends = eager.end_loss([r, *timed])
    assert list(ends["steps"]) == [10, 20] and list(ends["lr_warmup"]) == [1, 2]
    assert list(ends["profiled"]) == [True, False]
    assert ends["at_10"].iloc[0] == ends["last"].iloc[0]


def test_step_table_is_seq_by_layout(book):
    b2, _ = book
    t = eager.step_table(_runs(b2["seq_1gpu"][:2] + b2["comm"]["p2p"][:1]))
    assert list(t.columns) == ["1 GPU", "CP 2 (ring)"] and set(t.index) == {2048, 4096, 8192}


# -- the comparison group, as committed
# ------------------------------------------------------------------
@pytest.fixture(scope="module")
def group():
    from megalab.records import timings

    return timings.group(None, "ch04.cp", "H200"), timings.group_runs(None, "ch04.cp", "H200")[1]


def test_the_group_compares_one_gpu_and_cp2_per_type_at_two_lengths(group):
    g, _ = group
    s = ch04.speedup(g)
    assert list(s["seq"]) == [8192] * 3 + [16384] * 3
    assert set(s["layout"]) == {"1 GPU", "CP 2 (ring)", "CP 2 (all-gather)"}
    assert (s.loc[s["cp"] == 1, "speedup"] == 1.0).all() and (s["speedup"] < 2).all()
    assert not g["wide"].any() and g.attrs["gpu_busy"] >= 0.7


def test_the_graphed_ring_step_hides_its_sends(group):
    g, prof = group
    cfg = g.loc[g.attrs["profiled"], "cfg"]
    assert cfg.cp == 2 and cfg.cp_comm == "p2p" and cfg.cuda_graphs != "none"
    ring = ch04.ring_profile(cfg, prof["profile"], 270.0)
    assert ring["hidden"] > 0.9 and ring["exposed_ms"] < ring["send_ms"]
    parts = ch04.step_parts(ring, float(g.loc[g.attrs["profiled"], "median_ms"]))
    assert parts["ms"].sum() == pytest.approx(g.loc[g.attrs["profiled"], "median_ms"])
    assert parts["part"].iloc[0] == "compute kernels" and (parts["ms"] > 0).all()


def test_oom_rows_mark_each_run_out_of_memory(book):
    b2, _ = book
    rows = ch04.oom_rows(_runs(b2["seq_1gpu"]), [])
    assert rows.to_dict("records") == [{"seq": 65536, "series": "1 GPU, out of memory"}]
    assert ch04.oom_rows([], []).empty


def test_refusal_names_megatrons_flag_and_wraps():
    try:
        ONE.replace(gpus=32, cp=32, seq=65536, cp_comm="a2a").validate()
    except megalab.InvalidLayout as e:
        text = ch04.refusal(e, width=60)
    assert "--cp-comm-type a2a" in text and "cp_comm" not in text
    assert max(len(line) for line in text.splitlines()) <= 60


def test_parity_figure_draws_each_layout_against_its_length_inside_its_band(book):
    b2, _ = book
    pars = [p.run("cached", quiet=True) for p in [*b2["parity"], *b2["parity_long"]]]
    fig = ch04.parity_figure(pars, "parity")
    bands = [t for t in fig.data if t.name.startswith("allowed band")]
    lines = fig.data[len(bands) :]
    assert 1 <= len(bands) <= 2 and all(len(t.name.split()[2]) <= 6 for t in bands)  # "±0.027"
    assert {t.name for t in lines} == {n for n in ch04.parity_curves(pars) if "1 GPU" not in n}
    widest = max(max(t.y) for t in bands)
    assert all(abs(v) <= widest for t in lines for v in t.y)  # every layout passes
    assert fig.layout.yaxis.title.text == "loss difference from one GPU (nats)"


def test_host_words():
    g = pd.DataFrame({"cfg": [ONE, ONE.replace(gpus=2, cp=2)]})
    g.attrs["host"] = "vm (32 CPUs, NVIDIA H200)"
    assert ch04.host_words(g) == "2×H200 virtual machine (32 CPUs)"


def test_the_series_ring_loses_at_4k_and_wins_at_16k_on_cp8():
    """megatron-tutorials' CP 8 rows (copied): ring over all_gather 450/342 at 4k tokens (512 a
    GPU), 1300/1440 at 16k (2,048 a GPU)."""
    from megalab.book.chapters import ch04_analysis

    got = ch04_analysis.series_ring_vs_all_gather()
    assert got[4096] == {"ratio": pytest.approx(450 / 342), "tokens": 512, "fastest": "a2a"}
    assert got[16384] == {"ratio": pytest.approx(1300 / 1440), "tokens": 2048, "fastest": "a2a"}
