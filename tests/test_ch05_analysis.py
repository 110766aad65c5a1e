"""Chapter 05's tables and figures (megalab.book.chapters.ch05_analysis), on small fixtures: the
comparison group beside the bubble formula, schedules measured and ideal under one colour key,
memory per stage, per-stage work of a profiled step, and the evidence page's run table."""

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from megalab import theory
from megalab.book.chapters import ch05_analysis as ch05
from megalab.runs import presets

PP2 = presets.get("gpt-1.2b").replace(gpus=2, pp=2, mbs=4, gbs=32, cuda_graphs="te")


def group(ms=(340.0, 313.0, 308.6)):
    cfgs = [PP2.replace(vpp=v) for v in (1, 2, 4)]
    g = pd.DataFrame(
        {
            "cfg": cfgs,
            "median_ms": ms,
            "lo_ms": [x - 1 for x in ms],
            "hi_ms": [x + 1 for x in ms],
            "mfu": [0.37, 0.40, 0.41],
        },
        index=[c.label for c in cfgs],
    )
    g.attrs.update(gpu_busy=0.915, host="h")
    return g


def test_vpp_vs_1f1b_sets_each_schedule_beside_the_bubble_formula():
    t = ch05.vpp_vs_1f1b(group())
    assert list(t["layout"]) == ["1F1B, PP 2", "PP 2 × VPP 2", "PP 2 × VPP 4"]
    assert t["ratio"].tolist() == pytest.approx([1.0, 313.0 / 340.0, 308.6 / 340.0])
    # m = 8, p = 2: (1 + 1/16) / (1 + 1/8) and (1 + 1/32) / (1 + 1/8)
    assert t["predicted"].tolist() == pytest.approx([1.0, 1.0625 / 1.125, 1.03125 / 1.125])
    assert t["bubble"].tolist() == pytest.approx([1 / 8, 1 / 16, 1 / 32])
    assert t.attrs["gpu_busy"] == 0.915


def profile(durations: dict, p=2, m=2, v=1) -> dict:
    """A profile whose stages ran theory's schedule, stage s's passes stretched by durations[s]."""
    stages = {}
    for t in theory.schedule(p, m, v):
        k = durations.get(t["stage"], 1.0)
        stages.setdefault(str(t["stage"]), []).append(
            {
                "chunk": t["chunk"],
                "microbatch": t["microbatch"],
                "kind": t["kind"],
                "start_s": t["start"],
                "end_s": t["start"] + k * (t["end"] - t["start"]),
            }
        )
    return {"schedule": {"step": 3, "stages": stages}}


def test_measured_and_ideal_schedules_match_theory_on_equal_stages():
    prof = profile({}, p=2, m=4, v=2)
    measured = ch05.measured_schedule(prof)
    assert len(measured) == 2 * 2 * 4 * 2 and {t["stage"] for t in measured} == {0, 1}
    ideal = ch05.ideal_schedule(prof)
    # the mean forward is 1 and the mean backward 2: theory's default passes, the same step
    assert max(t["end"] for t in ideal) == pytest.approx(
        max(t["end"] for t in theory.schedule(2, 4, 2))
    )
    assert set(ch05.measured_and_ideal(prof)) == {
        "measured",
        "ideal: equal stages, free sends, the measured mean passes",
    }
    assert ch05.measured_schedule({}) == [] and ch05.ideal_schedule({}) == []


def _colours(fig) -> dict:
    return {t.name: t.marker.color for t in fig.data}


def test_every_schedule_figure_shares_one_colour_key():
    interleaved = ch05.schedule_figure(
        ch05.measured_and_ideal(profile({}, p=2, m=4, v=2)), "interleaved"
    )
    theory_fig = ch05.schedule_figure(
        {"1F1B": theory.schedule(4, 8), "VPP": theory.schedule(4, 8, v=2)}, "t", seconds=False
    )
    one_f_one_b = ch05.schedule_figure(ch05.measured_and_ideal(profile({})), "1F1B")
    key = _colours(interleaved)
    assert list(key) == [
        "forward, chunk 0",
        "backward, chunk 0",
        "forward, chunk 1",
        "backward, chunk 1",
    ]
    assert _colours(theory_fig) == key
    assert list(_colours(one_f_one_b).values()) == [
        key["forward, chunk 0"],
        key["backward, chunk 0"],
    ]
    assert theory_fig.layout.xaxis2.title.text.startswith("time (")


def test_canonical_orders_kinds_by_chunk_then_forward_first():
    tasks = [
        dict(stage=0, chunk=c, kind=k, start=s)
        for c, k, s in [(1, "B", 0), (0, "B", 1), (1, "F", 2), (0, "F", 3)]
    ]
    assert [(t["chunk"], t["kind"]) for t in ch05.canonical(tasks)] == [
        (0, "F"),
        (0, "B"),
        (1, "F"),
        (1, "B"),
    ]


def test_rank_work_shows_a_stage_whose_passes_outlast_its_kernels():
    prof = profile({1: 2.0}, p=2, m=2)
    prof["ranks"] = {
        str(r): {"gemm": 2.0, "attention": 0.5, "other": 0.5, "nccl": 1.0 + r} for r in (0, 1)
    }
    w = ch05.rank_work(prof).set_index("stage")
    assert w.loc[1, "passes"] == pytest.approx(2 * w.loc[0, "passes"])
    assert w["compute"].tolist() == [3.0, 3.0] and w["nccl"].tolist() == [1.0, 2.0]
    assert w["beyond"].tolist() == pytest.approx((w["passes"] - 3.0).tolist())


def test_schedule_numbers_adds_theorys_idle_share():
    cfg = PP2.replace(gbs=8, mbs=4)  # m = 2
    rec = {"config": cfg.to_dict(), "profile": profile({}, p=2, m=2)}
    s = ch05.schedule_numbers(rec)
    assert s["idle_predicted"] == pytest.approx(1 / 3) and s["in_order"]
    assert s["idle_share"] == pytest.approx(1 / 3)


def test_implied_idle_keeps_the_busy_time_and_lengthens_the_span():
    numbers = {"busy_s": 0.9, "span_s": 1.0}  # idled 10%
    assert ch05.implied_idle(numbers, 1000.0, 1000.0) == pytest.approx(0.1)
    assert ch05.implied_idle(numbers, 1200.0, 1000.0) == pytest.approx(1 - 0.9 / 1.2)


def result(cfg, per_rank, source="cached", **summary):
    return SimpleNamespace(
        config=cfg,
        source=source,
        summary={
            "mem_allocated_peak_gib_per_rank": per_rank,
            "step_time_s": 0.5,
            "mfu": 0.3,
            **summary,
        },
        record={
            "env": {"hostname": "vm", "cpu_count": 64},
            "recorded_at": "2026-01-02T03:04Z",
            "git_commit": "a",
        },
    )


def test_stage_memory_reads_each_stages_first_rank_and_names_the_run():
    big = presets.get("gpt-8.3b").replace(gpus=2, pp=2, mbs=4, gbs=8)
    mem = ch05.stage_memory([result(big, [90.0, 80.0]), result(big, [91.0, 81.0], "live")])
    assert set(mem["run"]) == {"PP 2, m = 2"} and len(mem) == 4
    ref = mem[mem["source"] == "reference"].set_index("stage")
    assert ref["measured"].tolist() == [90.0, 80.0]
    assert ref["predicted"].tolist() == pytest.approx(
        [s["total"] for s in theory.memory_per_stage(big)]
    )
    bars = ch05.memory_bars(mem)
    assert (bars["series"] == "stage 0, measured (yours)").sum() == 1
    assert (bars["series"].str.endswith("predicted")).sum() == 2  # each prediction once


def test_a_run_measured_here_brings_the_books_record_as_the_reference(tmp_path, monkeypatch):
    """A live reproduction reads back only the reader's run: the page's checks read the book's."""
    from megalab.jobs import running

    big = presets.get("gpt-8.3b").replace(gpus=2, pp=2, mbs=4, gbs=8)
    book = result(big, [90.0, 80.0])
    monkeypatch.setattr(running, "run", lambda cfg, mode, **kw: book)
    mem = ch05.stage_memory([result(big, [91.0, 81.0], "live")])
    ref = mem[mem["source"] == "reference"].set_index("stage")
    assert ref["measured"].tolist() == [90.0, 80.0] and len(mem) == 4


def test_runs_table_numbers_recordings_by_host_and_build():
    big = presets.get("gpt-8.3b").replace(gpus=2, pp=2, mbs=4, gbs=8)
    a, b = result(big, [1, 1]), result(big.replace(vpp=2), [1, 1])
    b.record = dict(b.record, git_commit="b", recorded_at="2026-01-03")
    t = ch05.runs_table([b, a])
    assert t["configuration"].tolist() == ["gpt-8.3b, PP 2, m = 2", "gpt-8.3b, PP 2 × VPP 2, m = 2"]
    assert t["recording"].tolist() == [1, 2] and t["host"].iloc[0] == "64 CPUs"


def test_bubble_table_keeps_only_what_the_interleaved_schedule_allows():
    t = ch05.bubble_table()
    assert ((t["v"] == 1) | (t["m"] % t["p"] == 0)).all()
    row = t[(t["p"] == 4) & (t["v"] == 1) & (t["m"] == 4)].iloc[0]
    assert row["bubble"] == pytest.approx(0.75) and row["idle"] == pytest.approx(3 / 7)


def test_probe_busy_is_kernel_time_over_wall_time(tmp_path, monkeypatch):
    (tmp_path / "p.json").write_text(json.dumps({"kernel_busy_ms": 25.0, "wall_ms": 100.0}))
    monkeypatch.setattr("megalab.machine.env.repo_root", lambda: tmp_path)
    assert ch05.probe_busy("p.json") == 0.25


def test_bubble_figure_marks_coincident_lines_and_reads_ticks_in_percent():
    fig = ch05.bubble_figure(ch05.bubble_table(), "Predicted")
    names = [t.name for t in fig.data]
    assert "p = 4, v = 3 (same line as p = 2, v = 1)" in names
    on = next(t for t in fig.data if t.name.startswith("p = 4, v = 3"))
    assert "markers" in on.mode
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.ticktext[0] == "0.5%"


def test_table_words_booleans_and_pads_cells():
    df = pd.DataFrame({"layout": ["PP 2", "PP 2 × VPP 2"], "wide": [True, False], "x": [1.0, 0.9]})
    df = pd.concat([df, df])  # a repeated index, as pd.concat of per-run tables makes
    html = ch05.table(df, {"layout": "Schedule", "wide": "Wide", "x": "Ratio"}).to_html()
    assert "yes" in html and "no" in html and "True" not in html and "padding" in html


def test_parity_curves_leave_the_layer_spec_to_the_title(monkeypatch):
    from megalab.book.chapters import ch02_analysis

    monkeypatch.setattr(
        ch02_analysis, "parity_curves", lambda p: {"PP 4, plain (non-TE) layers": [1.0]}
    )
    assert list(ch05.parity_curves([])) == ["PP 4"]


def test_m_sweep_sets_time_per_micro_batch_beside_the_bubble_formula():
    """ch05.m-sweep: 1F1B on 2 stages at m = 2 ... 16; time per micro-batch against the largest m's,
    beside (1 + (p−1)/m) / (1 + (p−1)/16)."""
    ms = (100.0, 170.0, 320.0, 620.0)
    cfgs = [PP2.replace(gbs=4 * m) for m in (16, 2, 4, 8)]  # any order in, ascending out
    g = pd.DataFrame(
        {"cfg": cfgs, "median_ms": (620.0, *ms[:3]), "lo_ms": 0.0, "hi_ms": 0.0, "mfu": 0.3},
        index=[c.label for c in cfgs],
    )
    g.attrs.update(gpu_busy=0.9)
    t = ch05.m_sweep(g)
    assert t["m"].tolist() == [2, 4, 8, 16] and t.attrs["p"] == 2 and t.attrs["gpu_busy"] == 0.9
    assert t["per_mb"].tolist() == pytest.approx([50.0, 42.5, 40.0, 38.75])
    assert t["ratio"].iloc[-1] == 1.0 and t["ratio"].iloc[0] == pytest.approx(50 / 38.75)
    assert t["predicted"].tolist() == pytest.approx(
        [1.5 / 1.0625, 1.25 / 1.0625, 1.125 / 1.0625, 1]
    )
    with pytest.raises(ValueError, match="1F1B runs of one pipeline depth"):
        ch05.m_sweep(g.assign(cfg=[c.replace(vpp=2) for c in cfgs]))


def test_sweep_fit_finds_the_fixed_cost_the_bubble_formula_leaves_out():
    """step = 30 ms × m + (30 + 5) ms on 2 stages: 30 ms per micro-batch, the formula's constant
    (p − 1) × 30 ms, and 5 ms a step pays once; the bars say measured and formula by m."""
    cfgs = [PP2.replace(gbs=4 * m) for m in (2, 4, 8, 16)]
    steps = [30.0 * m + 35.0 for m in (2, 4, 8, 16)]
    g = pd.DataFrame(
        {"cfg": cfgs, "median_ms": steps, "lo_ms": 0.0, "hi_ms": 0.0, "mfu": 0.3},
        index=[c.label for c in cfgs],
    )
    t = ch05.m_sweep(g)
    fit = ch05.sweep_fit(t)
    assert fit["per_mb_ms"] == pytest.approx(30.0) and fit["c_ms"] == pytest.approx(35.0)
    assert fit["fixed_ms"] == pytest.approx(5.0) and fit["worst_ms"] == pytest.approx(0, abs=1e-9)
    assert fit["over"] == pytest.approx((t["ratio"] / t["predicted"]).max() - 1) and fit["over"] > 0
    bars = ch05.sweep_bars(t)
    assert bars.attrs["y"] == "time per micro-batch / m = 16's"
    assert bars["kind"].tolist() == ["measured"] * 4 + ["bubble formula"] * 4
    assert bars["micro-batches m"].tolist()[:4] == ["2", "4", "8", "16"]


def test_the_series_sweep_reads_as_1f1b_slots_that_stop_shrinking():
    """megatron-tutorials' PP 8 sweep (R1-R6, copied): m + p - 1 slots a step; a slot's GPU work
    at the H100's peak halves with the micro-batch; from m = 16 to 32 the slot does not shorten,
    leaving about 5 ms per layer beyond the GPU's work (the eager host cost of chapter 0)."""
    t = ch05.series_pp().set_index("m")
    assert list(t.index) == [1, 2, 4, 8, 16, 32] and list(t["mbs"]) == [32, 16, 8, 4, 2, 1]
    assert t.loc[8, "step_ms"] == 875 and t.loc[32, "slots"] == 39
    assert t.loc[32, "slot_ms"] == pytest.approx(2050 / 39)
    assert t.loc[16, "gpu_ms"] == pytest.approx(2 * t.loc[32, "gpu_ms"])
    one = presets.get("gpt-8.3b").replace(gpus=8, pp=8, mbs=32, gbs=32)
    assert t.loc[1, "gpu_ms"] == pytest.approx(1e3 * theory.flops_per_step(one) / 8 / 989e12)
    assert t.loc[32, "slot_ms"] > t.loc[16, "slot_ms"] and 4 < t.loc[32, "beyond_layer_ms"] < 6


def test_the_series_eager_floor_is_its_fastest_wide_tp_step_per_layer():
    """The series' TP 4 and TP 8 steps of gpt-1.2b (40 layers) never went below 200 ms, at batch 8
    or 20: 5 ms per layer and micro-batch."""
    assert ch05.series_floor_per_layer() == pytest.approx(200 / 40)


def test_the_series_interleaving_rows_are_its_table():
    """megatron-tutorials' PP 8 and TP 2 + SP × PP 4 rows (copied): 1F1B (a stage's whole layers),
    chunks of three layers faster, chunks of one no faster."""
    v = ch05.SERIES_VPP_STEP_MS
    assert (v["PP 8", 9], v["PP 8", 3], v["PP 8", 1]) == (875, 715, 880)
    assert [v["TP 2 + SP, PP 4", n] for n in (18, 9, 6, 3, 2, 1)] == [887, 745, 680, 665, 710, 895]
