"""Chapter 05's runs: the ones it reads are the plan's own at every GPU count; the queued ones are
legal, fit, and are the chapter's plan less what it reads (tests/test_chapters.py: the store answers
what it reads)."""

from pathlib import Path

import pytest

import megalab
from megalab import theory
from megalab.book import chapters, specs
from megalab.book.chapters import ch05_pipeline_parallel as ch05
from megalab.runs.config import RunConfig


def _cfg(item) -> RunConfig:
    return item if isinstance(item, RunConfig) else item.cfg


def _keys(found) -> set:
    return {(type(i).__name__, _cfg(i).key) for i in specs.items(found)}


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_runs_are_the_same_at_every_gpu_count(gpus):
    """The notebook reads the recorded pipelines whatever `gpus` is: more GPUs predict, they read
    nothing new."""
    assert _keys(chapters.runs("ch05", gpus)) == _keys(chapters.runs("ch05", 2))
    assert chapters.resolve("pipeline_parallel") == chapters.resolve("05") == "ch05"


def test_recorded_pp2_runs_are_the_plans_own():
    found, two = chapters.runs("ch05", 2), ch05.pending(2, recorded=True)
    assert found["bubble"][2] == two["bubble"][2] and found["profile"][2] == two["profile"][2]
    assert [c.num_microbatches for c in found["bubble"][2]] == [1, 2, 4, 8]
    assert [(c.num_microbatches, c.vpp) for c in found["vpp"][2][2]] == [
        (2, 2),
        (2, 3),
        (2, 4),
        (2, 6),
    ]
    assert [(c.num_microbatches, c.vpp) for c in found["vpp"][2][8]] == [
        (8, 2),
        (8, 3),
        (8, 4),
        (8, 6),
    ]
    assert found["vpp"][2] == two["vpp"][2]
    assert [(p.cfg.vpp, p.cfg.num_microbatches) for p in found["profile"][2]] == [(1, 4), (2, 4)]
    assert [(c.tp, c.pp, c.sp, c.vpp) for c in found["layouts"][2]] == [
        (1, 2, False, 1),
        (2, 1, True, 1),
        (1, 2, False, 2),
    ]
    assert (
        found["layouts"][2] == two["layouts"][2] and found["layouts"][2][2] == found["vpp"][2][8][0]
    )
    assert [(p.cfg.gpus, p.cfg.pp, p.cfg.vpp) for p in found["parity_pp2"]] == [
        (2, 2, 1),
        (2, 2, 2),
    ]


def test_recorded_pp4_runs_are_the_plans_own():
    """PP 4 (4× H200): the stage alone and the sweep at every m, both profiled steps, v = 2, 3, 6 at
    m = 4 and 16, and every layout."""
    found, four = chapters.runs("ch05", 4), ch05.pending(4, recorded=True)
    assert (
        found["one_stage"][4] == four["one_stage"][4] and found["profile"][4] == four["profile"][4]
    )
    assert [(c.layers, c.num_microbatches) for c in found["one_stage"][4]] == [
        (18, m) for m in (1, 2, 4, 8, 16)
    ]
    assert found["bubble"][4] == four["bubble"][4] and [
        c.num_microbatches for c in found["bubble"][4]
    ] == [1, 2, 4, 8, 16]
    assert [(p.cfg.vpp, p.cfg.num_microbatches, p.cfg.mbs) for p in found["profile"][4]] == [
        (1, 8, 2),
        (2, 8, 2),
    ]
    assert found["vpp"][4] == four["vpp"][4]
    assert {m: [(c.vpp, c.mbs) for c in cs] for m, cs in found["vpp"][4].items()} == {
        4: [(2, 4), (3, 4), (6, 4)],
        16: [(2, 1), (3, 1), (6, 1)],
    }
    assert [(c.tp, c.pp, c.sp, c.vpp, c.mbs) for c in found["layouts"][4]] == [
        (1, 4, False, 1, 1),
        (2, 2, True, 1, 1),
        (4, 1, True, 1, 1),
        (1, 4, False, 2, 1),
        (2, 2, True, 2, 1),
    ]
    assert found["layouts"][4] == four["layouts"][4]
    assert (
        found["layouts"][4][0] == found["bubble"][4][-1]
        and found["layouts"][4][3] == found["vpp"][4][16][0]
    )


def test_the_layout_stopped_at_exit_trained_every_step():
    """TP 2 + SP × PP 2 × VPP 2 is kept: a timeout after all its steps and the trainer's summary,
    which `trained` counts and `ok` does not; every other gpt-8.3b layout on four GPUs is ok."""
    runs = [megalab.run(c, "cached", quiet=True) for c in chapters.runs("ch05", 4)["layouts"][4]]
    assert all(r.trained for r in runs) and [r.ok for r in runs] == [True] * 4 + [False]
    last = runs[-1]
    assert last.status == "timeout" and last.summary["steps"] == last.config.iters == 20


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_pending_is_the_plan_less_the_recorded(gpus):
    queued, recorded = _keys(chapters.pending("ch05", gpus)), _keys(chapters.runs("ch05", gpus))
    assert queued == _keys(ch05.pending(gpus, recorded=True)) - recorded and not queued & recorded


def test_eight_gpus_queue_the_seed_tutorials_table():
    """The seed tutorial's 8× H100 rows of gpt-8.3b (72 layers, global batch 32), each queued at 8
    GPUs and legal: PP 8 at m = 1 ... 32, PP 8 × VPP 3 at m = 8, TP+SP 2 × PP 4 × VPP 3, 6, 9, 18 at
    m = 4 (as chunks per stage and as layers per chunk: v = 1, 2, 3, 6, 9, 18), TP+SP 8."""
    row = lambda tp, pp, vpp, m: (tp, pp, tp > 1, vpp, m)  # noqa: E731
    seed = (
        [row(1, 8, 1, m) for m in (1, 2, 4, 8, 16, 32)]
        + [row(1, 8, 3, 8)]
        + [row(2, 4, v, 4) for v in ch05.SEED_VPP]
        + [row(8, 1, 1, 32)]
    )
    queued = {
        row(c.tp, c.pp, c.vpp, c.num_microbatches): c
        for c in map(_cfg, specs.items(chapters.pending("ch05", 8)))
        if c.name == "gpt-8.3b" and c.gpus == 8
    }
    assert set(seed) <= set(queued)
    for key in seed:
        c = queued[key]
        assert (
            (c.layers, c.gbs, c.dp) == (72, 32, 1)
            and c.problems() == []
            and c.problems(te_available=True) == []
        )
    chunked = chapters.pending("ch05", 8)["seed_vpp"][8][4]
    assert [(c.vpp, c.mbs, c.layers // (c.pp * c.vpp)) for c in chunked] == [
        (1, 8, 18),
        (2, 8, 9),
        (3, 8, 6),
        (6, 8, 3),
        (9, 8, 2),
        (18, 8, 1),
    ]
    # 2- and 4-GPU plans unchanged
    assert all("seed_vpp" not in ch05.pending(g, recorded=True) for g in (1, 2, 4))


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_pending_is_legal_scaled_and_fits(gpus):
    queued, every = chapters.pending("ch05", gpus), ch05.pending(gpus, recorded=True)
    found = [_cfg(i) for i in specs.items(queued)]
    read = {_cfg(i).key for i in specs.items(chapters.runs("ch05", gpus))}
    for cfg in found:
        cfg.validate()
        assert cfg.gpus <= gpus and theory.memory(cfg, "H200")["fits"]
        # vpp: chunks that divide a stage's layers
        assert (cfg.layers // cfg.pp) % cfg.vpp == 0
        assert cfg.key not in read
    pipes = [p for p in specs.degrees(gpus) if p > 1]
    assert sorted(every["bubble"]) == pipes
    recorded_pipes = set(chapters.runs("ch05", gpus)["bubble"])
    # a sweep whole
    assert sorted(queued.get("bubble", {})) == [p for p in pipes if p not in recorded_pipes]
    # the model needs the pipeline: one GPU is predicted out of memory, every PP p run fits
    for p in pipes:
        big = every["bubble"][p][-1]
        assert not theory.memory(big.replace(gpus=1, pp=1), "H200")["fits"]
        assert (
            all(c.gbs == big.gbs for c in every["bubble"][p])
            and every["bubble"][p][0].num_microbatches == 1
        )


def test_schedule_stages_reads_idle_share_and_order():
    from megalab.records import profiles

    t = lambda s, m, k, a, b: {"chunk": 0, "microbatch": m, "kind": k, "start_s": a, "end_s": b}  # noqa: E731
    sched = {
        "0": [t(0, 0, "F", 0.0, 1.0), t(0, 0, "B", 3.0, 5.0)],
        "1": [t(1, 0, "F", 1.0, 2.0), t(1, 0, "B", 2.0, 3.0)],
    }
    stages = profiles.schedule_stages({"schedule": {"step": 3, "stages": sched}})
    assert list(stages.index) == [0, 1] and stages.at[0, "order"] == [("F", 0, 0), ("B", 0, 0)]
    assert stages.at[0, "idle_share"] == pytest.approx(0.4) and stages.at[
        1, "idle_share"
    ] == pytest.approx(0.6)
    assert stages.at[0, "backward_s"] == pytest.approx(2.0) and profiles.schedule_stages({}).empty
    summary = profiles.schedule_summary({"schedule": {"step": 3, "stages": sched}})
    assert (summary["busiest"], summary["busy_s"], summary["rest_busy_hi"], summary["span_s"]) == (
        0,
        3.0,
        2.0,
        5.0,
    )
    assert summary["idle_share"] == pytest.approx(0.4) and summary["rest_idle_lo"] == pytest.approx(
        0.6
    )
    assert summary["in_order"] is True and profiles.schedule_summary({}) == {}


@pytest.mark.parametrize(
    "p, which",
    [(2, 0), (2, 1), (4, 0), (4, 1)],
    ids=["PP 2 1F1B", "PP 2 VPP 2", "PP 4 1F1B", "PP 4 VPP 2"],
)
def test_the_measured_schedules_run_megatrons_order(p, which):
    """The profiled steps of gpt-8.3b (PP 2 at m = 4, PP 4 at m = 8): every pass of every
    micro-batch on every stage, in the order theory.stage_order lists for Megatron Core, each
    backward after its forward; the ideal schedule built from their mean passes has the formula's
    bubble."""
    from megalab.records import profiles

    item = chapters.runs("ch05", 2)["profile"][p][which]
    cfg, prof = item.cfg, item.run("cached", quiet=True).record["profile"]
    stages = profiles.schedule_stages(prof)
    assert list(stages.index) == list(range(p))
    for s in stages.index:
        assert stages.at[s, "order"] == theory.stage_order(cfg.pp, cfg.num_microbatches, cfg.vpp, s)
        assert 0 < stages.at[s, "idle_share"] < 1
    assert profiles.schedule_summary(prof)["in_order"]
    for tasks in prof["schedule"]["stages"].values():
        start = {(t["kind"], t["microbatch"], t["chunk"]): t["start_s"] for t in tasks}
        assert all(t["end_s"] > t["start_s"] for t in tasks)
        assert all(start[("B", mb, c)] > start[("F", mb, c)] for _, mb, c in start)
    ideal = [
        dict(stage=int(t["row"].split()[1]), start=t["start_s"], end=t["end_s"])
        for t in profiles.schedule_ideal(prof)
    ]
    assert len(ideal) == 2 * cfg.pp * cfg.num_microbatches * cfg.vpp
    assert theory.schedule_bubble(ideal) == pytest.approx(
        theory.bubble_over_ideal(cfg.pp, cfg.num_microbatches, cfg.vpp)
    )


# -- the micro-batch-count sweep as a comparison group
# --------------------------------------------------------------------------------------------------
PLAN = Path(__file__).parents[1] / "tools" / "gpu" / "plans" / "archive" / "ch05-msweep.txt"


def _m_sweep(gpus: int = 4) -> specs.Group:
    return chapters.runs("ch05", gpus)["groups"]["m_sweep"]


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_the_m_sweep_is_ch05_vpp_1f1b_row_at_each_micro_batch_count(gpus):
    """ch05.m-sweep: gpt-1.2b PP 2 with CUDA graphs at micro-batch 4, m = 2, 4, 8, 16 (global batch
    m × 4), valid on a 4x H200 host with TE and fitting an H200; each differs from ch05.vpp's 1F1B
    row in the global batch only, and m = 8 is that row. m = 2, the largest bubble, is profiled."""
    g = _m_sweep(gpus)
    one_f1b = chapters.runs("ch05", gpus)["groups"]["vpp"].configs[0]
    assert g.name == "ch05.m-sweep" and g.tag == "group.ch05.m-sweep"
    assert [c.num_microbatches for c in g.configs] == list(ch05.SWEEP_M) == [2, 4, 8, 16]
    assert [c.gbs for c in g.configs] == [8, 16, 32, 64]
    for cfg in g.configs:
        cfg.validate(gpus_available=4, te_available=True, gpu_name="H200")
        assert theory.plan(cfg)["memory_gib"]["fits"], cfg.label
        assert cfg.replace(gbs=one_f1b.gbs) == one_f1b, cfg.label
        assert (cfg.pp, cfg.vpp, cfg.dp, cfg.mbs, cfg.cuda_graphs) == (2, 1, 1, 4, "te")
    assert g.configs[2].key == one_f1b.key
    assert g.configs[g.profiled].num_microbatches == 2


def test_the_m_sweep_alternates_three_rounds_as_theory_asks():
    """Time per sample ∝ 1 + (p−1)/m (Narayanan et al. 2021 §2.2.1): 1.5, 1.25, 1.125, 1.0625 at p =
    2; neighbours differ by 20%, 11% and 5.9%, and a difference under 10% takes 3 rounds."""
    per_sample = [1 + theory.bubble_over_ideal(2, m) for m in ch05.SWEEP_M]
    assert per_sample == [1.5, 1.25, 1.125, 1.0625]
    gaps = [round(a / b - 1, 3) for a, b in zip(per_sample, per_sample[1:])]
    assert gaps == [0.2, 0.111, 0.059]
    assert _m_sweep().rounds == 3
    assert ch05._rounds(2, (2, 4)) == 2  # 20% apart: two rounds do


@pytest.mark.parametrize("gpus", [2, 4])
def test_the_m_sweep_is_planned_as_one_block_after_ch05_vpp(gpus, tmp_path):
    """On an empty store the plan holds ch05.vpp's block, then ch05.m-sweep's: the warm-up, m = 2,
    4, 8, 16 alternated three times, the profiled m = 2 run; every line alone on the host."""
    from megalab.book import recording
    from megalab.jobs.running import Store

    found = chapters.runs("ch05", gpus)["groups"]
    vpp, sweep = found["vpp"].plan_lines(), found["m_sweep"].plan_lines()
    lines = recording.plan("ch05", gpus, missing_only=True, store=Store(tmp_path), host_gpus=gpus)
    assert lines[: len(vpp) + len(sweep)] == vpp + sweep
    timed = sweep[1:-1]
    assert sweep[0].startswith("warmup! ") and len(timed) == 3 * 4
    assert timed[:4] == timed[4:8] == timed[8:] and len(set(timed[:4])) == 4
    assert all(line.startswith("group.ch05.m-sweep! ") for line in timed)
    assert sweep[-1] == timed[0] + " --profile"


def test_the_m_sweep_is_recorded_by_its_own_tag_only(tmp_path):
    """ch05.vpp's records of the shared m = 8 run do not count for ch05.m-sweep: it is recorded when
    its own tag holds three rounds of every m and the profiled m = 2 run, and then leaves the
    plan."""
    from run_records import record

    from megalab.book import recording
    from megalab.jobs.running import Store

    sweep, store = _m_sweep(), Store(tmp_path)
    at = iter(f"2030-01-01T{h:02d}:{m:02d}:00Z" for h in range(3) for m in range(60))
    add = lambda c, *tags: store.append(record(c, tags=list(tags), at=next(at)))  # noqa: E731
    for _ in range(3):
        for c in sweep.configs:
            add(c, *(["group.ch05.vpp"] if c.num_microbatches == 8 else [sweep.tag]))
    add(sweep.configs[0], sweep.tag, "profile")
    assert not recording.is_recorded(sweep, store)  # m = 8 timed in ch05.vpp only
    for _ in range(3):
        add(sweep.configs[2], sweep.tag)
    assert recording.is_recorded(sweep, store)
    assert not any(
        line.startswith(sweep.tag)
        for line in recording.plan("ch05", missing_only=True, store=store)
    )


def test_the_m_sweep_plan_file_is_the_printed_plan():
    """tools/gpu/plans/archive/ch05-msweep.txt (recorded) holds the group's lines as `megalab
    experiments ch05 --gpus 4 --host-gpus 4 --missing` prints them, under its # header."""
    text = PLAN.read_text().splitlines()
    assert text[0].startswith("# ") and "plan_cost.py" in "".join(text)
    assert [line for line in text if not line.startswith("#")] == _m_sweep().plan_lines()
