"""megalab.book.chapters, megalab.book.specs, megalab.book.recording: each chapter's runs, and the
GPU plan printed from them."""

from pathlib import Path

import pytest

from megalab.book import chapters, recording, specs
from megalab.runs.config import RunConfig
from megalab.jobs.running import Store


def test_degrees():
    assert specs.degrees(1) == [1]
    assert specs.degrees(4) == [1, 2, 4]
    assert specs.degrees(6) == [1, 2, 4]
    assert specs.degrees(8) == [1, 2, 4, 8]
    with pytest.raises(ValueError):
        specs.degrees(0)


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_chapters_scale_with_the_gpu_count(gpus):
    """Every configuration is valid for its own GPU count, and the series reach `gpus`."""
    for build in (chapters.data_parallel, chapters.tensor_parallel):
        found = build(gpus)
        items = list(specs.items(found))
        for item in items:
            cfg = item if isinstance(item, RunConfig) else item.cfg
            cfg.validate()
            assert cfg.gpus <= gpus
    assert chapters.data_parallel(gpus)["weak"][-1].gpus == specs.degrees(gpus)[-1]
    assert [c.tp for c in chapters.tensor_parallel(gpus)["strong"]] == specs.degrees(gpus)


def test_fit_window_brackets_the_prediction():
    """gpt2-xl on one GPU: theory's largest micro-batch sits inside the probe window, on both
    cards."""
    base = chapters.data_parallel()["one_gpu"]
    for gpu, (lo_max, hi_min) in (("H200", (42, 42)), ("H100", (19, 19))):
        fit = specs.Fit(base, "mbs", gpu)
        lo, hi = fit.window
        assert lo < fit.predicted < hi
        assert abs(fit.predicted - lo_max) <= 3
    layers = specs.Fit(base, "layers", "H200", step=8, width=0.05)
    assert layers.window[0] % 8 == 0 and layers.window[1] % 8 == 0


def test_plan_orders_baselines_first_and_parity_after_its_references(tmp_path):
    lines = recording.plan("ch02", gpus=4, store=Store(tmp_path))
    # the comparison groups first, each whole
    for group in chapters.tensor_parallel(4)["groups"].values():
        assert lines[: len(group.plan_lines())] == group.plan_lines()
        lines = lines[len(group.plan_lines()) :]
    # a timing baseline, alone
    assert lines[0].startswith("ch02! ") and "--tp 1 " in lines[0]
    wait = lines.index("wait")
    assert all(" parity " in f" {line} " for line in lines[wait + 1 :])
    refs = [line for line in lines if line.startswith("ch02-ref ")]
    # two repeats: the spread
    assert len(refs) == 2 and refs[0] == refs[1]
    assert any(line.endswith("--profile") for line in lines)
    # only the reference repeats
    assert len(lines) - lines.count("wait") - 1 == len(set(lines) - {"wait"})


GPU_COUNTS = (1, 2, 4, 8)


def _gpu_models(found) -> list:
    """The GPU models a chapter's runs are planned on (a fit sized for an H100 belongs to H100
    hosts)."""
    return sorted(
        {getattr(i, "gpu", None) or "H200" for i in [*specs.items(found), *specs.groups(found)]}
    )


def _keys(found) -> set:
    """(kind, key): a fit, a parity pair or a profiled run shares its configuration's key, not its
    records."""
    return {
        (type(i).__name__, (i if isinstance(i, RunConfig) else i.cfg).key)
        for i in specs.items(found)
    }


def _notebook_gpus(chapter: str) -> int:
    """The GPU count a chapter's notebook reads its runs at (`gpus` in its parameters cell)."""
    import re

    (folder,) = (Path(__file__).parents[1] / "book").glob(f"{chapter[2:]}_*/")
    # book/NN_<topic>/<topic>.ipynb, the chapter's page
    notebook = folder / f"{folder.name[3:]}.ipynb"
    return int(re.search(r"gpus: int = (\d+)", notebook.read_text()).group(1))


def _read_at() -> list:
    """(chapter, gpus): every GPU count where a chapter splits its runs into read and queued
    (`pending`); otherwise the count its notebook reads (a chapter without `pending` plans more GPUs
    than it has records)."""
    return [
        (key, gpus)
        for key, module in chapters.CHAPTERS.items()
        for gpus in (GPU_COUNTS if hasattr(module, "pending") else (_notebook_gpus(key),))
    ]


def _subsequence(part: list, whole: list) -> bool:
    rest = iter(whole)
    return all(line in rest for line in part)


@pytest.mark.parametrize("chapter, gpus", _read_at())
def test_the_store_answers_every_run_the_chapter_reads(chapter, gpus):
    """What a notebook reads (`chapters.runs`) is recorded: the plan printed with --missing is the
    chapter's plan less what the store answers, and that leaves only the comparison groups and
    lessons whose records are not imported yet (each whole, or not at all), on every GPU model the
    chapter plans for."""
    found = chapters.runs(chapter, gpus)
    for gpu in _gpu_models(found):
        missing = recording.plan(chapter, gpus, gpu, missing_only=True)
        assert _subsequence(missing, recording.plan(chapter, gpus, gpu))
        waiting = [
            line
            for g in [*specs.groups(found), *specs.lessons(found)]
            if (getattr(g, "gpu", None) or "H200") == gpu and not recording.is_recorded(g)
            for line in g.plan_lines()
        ]
        assert missing == waiting, (chapter, gpus, gpu)


@pytest.mark.parametrize("gpus", GPU_COUNTS)
@pytest.mark.parametrize("chapter", list(chapters.CHAPTERS))
def test_pending_is_the_plan_less_what_is_recorded(chapter, gpus):
    """What a chapter queues (`chapters.pending`) is what the store does not answer yet: none of it
    is read by the notebook, and none of it is recorded (a run whose records are imported moves into
    `runs`)."""
    queued = chapters.pending(chapter, gpus)
    assert not _keys(queued) & _keys(chapters.runs(chapter, gpus))
    answered = [
        i for i in [*specs.items(queued), *specs.groups(queued)] if recording.is_recorded(i)
    ]
    assert answered == [], (chapter, gpus)


def test_the_80gb_fit_belongs_to_the_h100_plan():
    """The H100 fit is planned for H100 hosts only."""
    h100 = recording.plan("ch01", gpu="H100")
    assert h100 and all(" fit " in f" {line} " for line in h100)
    assert "--lo 19 --hi 23" in h100[0]  # a window around theory's 21 on 80 GB
    assert not any(line in recording.plan("ch01") for line in h100)


def test_unknown_chapter():
    with pytest.raises(KeyError, match="ch01"):
        recording.plan("ch99")


def test_searches_are_sized_for_the_gpu_that_runs_them(monkeypatch):
    """Cached: the reference GPU. Live on an 80 GB H100: the H100's window, not the H200's."""
    import megalab.machine.env

    assert specs.sizing_gpu("cached") == "H200"
    monkeypatch.setattr(megalab.machine.env, "local_gpus", lambda: ("NVIDIA H100 80GB HBM3", 8))
    assert specs.sizing_gpu("auto") == "H100"
    assert chapters.data_parallel(gpu="H100")["fit_mbs"].window[1] < 30
    monkeypatch.setattr(megalab.machine.env, "local_gpus", lambda: ("Some Future GPU", 1))
    assert specs.sizing_gpu("live") == "H200"


def test_a_run_in_two_series_is_planned_once_and_alone(tmp_path):
    """gpt2-xl DP=1 mbs 4 gbs 16 is both the weak-scaling baseline and an accumulation point."""
    lines = recording.plan("ch01", store=Store(tmp_path))
    runs = [line.split(" ", 1)[1] for line in lines if line.startswith(("ch01 --", "ch01! --"))]
    assert len(runs) == len(set(runs))
    baseline = [
        line
        for line in lines
        if "--gpus 1 " in line
        and "--mbs 4 --gbs 16 " in line
        and " parity" not in line
        and "--iters 20 " in line
    ]
    assert baseline and all(line.startswith("ch01! ") for line in baseline)


def test_a_failed_record_is_not_recorded(tmp_path):
    cfg = chapters.data_parallel()["one_gpu"]
    store = Store(tmp_path)
    store.append({"key": cfg.key, "status": "failed", "config": cfg.to_dict(), "env": {}})
    assert not recording.is_recorded(cfg, store)
    store.append({"key": cfg.key, "status": "oom", "config": cfg.to_dict(), "env": {}})
    assert recording.is_recorded(cfg, store)


@pytest.mark.parametrize(
    "name", ["ch01", "01", "1", "01_data_parallel", "data_parallel", "book/01_data_parallel/"]
)
def test_a_chapter_has_one_key_under_every_name_a_reader_uses(name):
    assert chapters.resolve(name) == "ch01"


def test_an_unknown_chapter_names_the_valid_ones():
    with pytest.raises(chapters.UnknownChapter, match="ch02 .02_tensor_parallel."):
        chapters.resolve("ch99")


def test_runs_by_name_are_the_chapter_modules_runs():
    assert chapters.runs("02", 2) == chapters.tensor_parallel(2)
    assert chapters.pending("ch01") == {}  # a chapter module without `pending` queues nothing


def test_every_chapter_module_is_small_and_defines_runs_only():
    for key, module in chapters.CHAPTERS.items():
        public = {
            n
            for n in vars(module)
            if not n.startswith("_")
            and callable(getattr(module, n))
            and getattr(getattr(module, n), "__module__", None) == module.__name__
        }
        assert public <= {"runs", "pending", "defining"}, (key, public)


# -- comparison groups
# --------------------------------------------------------------------------------- the first
# comparison groups' plan (4x H200)
AXIS_PLAN = Path(__file__).parent / "data" / "axis_plan.txt"


def test_chapter_groups_print_the_recorded_plan():
    """ch02's, ch05's and ch01's groups print the plan their records come from, line for line: each
    configuration alone, alternated A B C A B C, tagged group.<chapter>.<lesson>, then the profiled
    run; a warm-up run (the group's widest configuration) before each group."""
    recorded = ("ch02.tp", "ch05.vpp", "ch01.dp-weak")  # the plan's; the later groups aside
    lines = [
        line
        for chapter in ("ch02", "ch05", "ch01")
        for g in specs.groups(chapters.runs(chapter, 4))
        if g.name in recorded
        for line in g.plan_lines()
    ]
    want = [line for line in AXIS_PLAN.read_text().splitlines() if line.startswith("group.")]
    assert [line for line in lines if line.startswith("group.")] == want
    starts = [i for i, line in enumerate(lines) if line.startswith("warmup! ")]
    assert len(starts) == 3 and starts[0] == 0
    for i in starts:
        tag = lines[i + 1].split(" ", 1)[0]
        block = lines[i + 1 : next((j for j in starts if j > i), len(lines))]
        assert all(line.split(" ", 1)[0] == tag for line in block) and block[-1].endswith(
            " --profile"
        )
        assert "--iters 20 " in lines[i] and all("--iters 40 " in line for line in block)


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_groups_are_named_by_chapter_and_stay_out_of_items(gpus):
    for chapter in ("ch01", "ch02", "ch05"):
        found = chapters.runs(chapter, gpus)
        groups = list(specs.groups(found))
        assert groups and all(g.name.startswith(chapter + ".") for g in groups)
        assert not any(isinstance(i, specs.Group) for i in specs.items(found))
        for g in groups:
            assert g.rounds >= 2 and g.tag == f"group.{g.name}"
            for cfg in g.configs:
                cfg.validate()
                assert cfg.iters == specs.GROUP_ITERS
    assert chapters.runs("ch01", 4)["groups"]["dp_weak"].name == "ch01.dp-weak"


def test_a_group_needs_distinct_configurations_two_rounds_and_a_member_profiled():
    cfg = chapters.tensor_parallel(2)["strong"][0]
    for bad in ({"configs": []}, {"configs": [cfg, cfg]}, {"rounds": 1}, {"profiled": 1}):
        with pytest.raises(ValueError, match="group ch02.x"):
            specs.Group(**{"name": "ch02.x", "configs": [cfg], **bad})


def test_a_group_is_recorded_when_every_configuration_ran_each_round_and_its_profile(tmp_path):
    from run_records import record

    group = chapters.pipeline_parallel(2)["groups"]["vpp"]
    store = Store(tmp_path)
    assert not recording.is_recorded(group, store)
    assert (
        recording.plan("ch05", missing_only=True, store=store)[: len(group.plan_lines())]
        == group.plan_lines()
    )
    runs = [
        record(c, tags=[group.tag], at=f"2030-01-01T00:0{i}:00Z")
        for i, c in enumerate(group.configs * 2)
    ]
    for r in runs[:-1]:
        store.append(r)
    assert not recording.is_recorded(group, store)  # one round short
    store.append(runs[-1])
    assert not recording.is_recorded(group, store)  # no profiled run
    store.append(record(group.configs[1], tags=[group.tag, "profile"], at="2030-01-01T00:09:00Z"))
    assert recording.is_recorded(group, store)
    assert not any(
        line.startswith(group.tag)
        for line in recording.plan("ch05", missing_only=True, store=store)
    )


ROUNDS = {"ch03.recompute": 3}
# the next comparison groups (issue 44 item 4): lesson name -> configurations, on two GPUs
NEXT_GROUPS = {
    "ch03": {"sp_vs_full": 2, "recompute": 4},
    "ch04": {"cp": 6},
    "ch06": {"ep": 4, "ep_aux": 6},
}


def _recorded_fits(t: int = 2) -> dict:
    """ch03's recorded fits at TP t (gpt-8.3b at 2, gpt-22b at 4): layout -> the largest
    micro-batch that ran."""
    fits = chapters.runs("ch03", t)["fit_mbs"][t]
    return {
        name: fits[name].run(mode="cached", quiet=True).largest for name in ("tp_sp", "tp_full")
    }


@pytest.mark.parametrize("chapter", list(NEXT_GROUPS))
def test_the_next_groups_validate_and_fit_an_h200(chapter):
    """Each group of ch03, ch04 and ch06 is on two GPUs from `gpus` 2 on (none on one), every
    configuration starts on a 4x H200 host with TE and fits an H200 by theory's memory model, or,
    for ch03's full recomputation at its recorded largest micro-batch, by its record (theory is
    pessimistic there). Graphed, as every recorded group, but where layout_rules forbid it
    (recompute full)."""
    from megalab import theory

    assert not list(specs.groups(chapters.runs(chapter, 1)))
    found = chapters.runs(chapter, 2)["groups"]
    assert {k: len(g.configs) for k, g in found.items()} == NEXT_GROUPS[chapter]
    for g in found.values():
        # 3 rounds where the difference claimed is under 10% (selective recompute: about 4%)
        assert g.name.startswith(chapter + ".") and g.rounds == ROUNDS.get(g.name, 2)
        eager = any(c.recompute == "full" for c in g.configs)
        for cfg in g.configs:
            cfg.validate(gpus_available=4, te_available=True, gpu_name="H200")
            assert (cfg.gpus, cfg.iters) in ((1, specs.GROUP_ITERS), (2, specs.GROUP_ITERS))
            assert cfg.cuda_graphs == ("none" if eager else "te"), cfg.label
            fits = theory.plan(cfg)["memory_gib"]["fits"]
            assert fits or (chapter, cfg.recompute, cfg.mbs) == ("ch03", "full", 63), cfg.label
    # from 4 GPUs on, the same groups (and ch03's gpt-22b pair on 4 GPUs beside them)
    at4 = [g for g in specs.groups(chapters.runs(chapter, 4)) if g.warmup.gpus <= 2]
    assert at4 == list(found.values())


def test_ch03_groups_read_the_recorded_fits():
    """sp_vs_full sets TP + SP and full recomputation each at the largest micro-batch recorded."""
    from megalab.book.chapters import ch03_sequence_parallel as ch03

    assert ch03.GROUP_FITS == _recorded_fits()
    sp, full = chapters.runs("ch03", 2)["groups"]["sp_vs_full"].configs
    assert (sp.sp, sp.mbs, full.recompute, full.mbs) == (True, 8, "full", 63)


def test_ch03_tp4_group_reads_gpt_22b_fits_and_starts_on_four_h200s():
    """From 4 GPUs on, sp_vs_full_tp4 sets gpt-22b's TP 4 + SP and TP 4 full recomputation each at
    its recorded largest micro-batch, eager, on 4 GPUs; none below 4."""
    from megalab.book.chapters import ch03_sequence_parallel as ch03

    assert "sp_vs_full_tp4" not in chapters.runs("ch03", 2)["groups"]
    assert ch03.GROUP_FITS_TP4 == _recorded_fits(4)
    g = chapters.runs("ch03", 4)["groups"]["sp_vs_full_tp4"]
    sp, full = g.configs
    assert (sp.name, sp.tp, sp.sp, sp.mbs, full.recompute, full.mbs) == (
        "gpt-22b",
        4,
        True,
        8,
        "full",
        30,
    )
    for cfg in g.configs:
        cfg.validate(gpus_available=4, te_available=True, gpu_name="H200")
        assert cfg.cuda_graphs == "none" and cfg.stop_when_tight and cfg.gpus == 4


@pytest.mark.parametrize("chapter", list(NEXT_GROUPS))
def test_the_next_groups_print_alternated(chapter, tmp_path):
    """`megalab experiments chNN --gpus 2 --host-gpus 4 --missing` on an empty store prints each
    group first, as one block: the warm-up, the configurations A B C A B C, the profiled run."""
    lines = recording.plan(chapter, 2, missing_only=True, store=Store(tmp_path), host_gpus=4)
    at = 0
    for g in specs.groups(chapters.runs(chapter, 2)):
        block = g.plan_lines()
        assert lines[at : at + len(block)] == block
        n = len(g.configs)
        timed = block[1:-1]
        assert len(timed) == g.rounds * n and timed == timed[:n] * g.rounds
        assert len(set(timed[:n])) == n and all(line.startswith(g.tag + "! ") for line in timed)
        assert block[0].startswith("warmup! ") and block[-1] == timed[g.profiled] + " --profile"
        at += len(block)


# the groups of issue 44's 4-GPU plan (axis-4.txt): lesson -> its name and configurations at 4 GPUs
AXIS4_GROUPS = {
    "ch01": {"dp_weak": 3, "dp_strong": 3, "overlap": 2},
    "ch02": {"tp": 6, "tp_vs_dp": 3},
}


@pytest.mark.parametrize("chapter", list(AXIS4_GROUPS))
def test_the_four_gpu_groups_validate_are_graphed_and_alternate(chapter):
    """ch01's strong scaling (one global batch) and overlap (3 rounds: the claim is under 10%), and
    ch02's TP against DP: valid on a 4x H200 host with TE, CUDA graphs, fitting an H200."""
    from megalab import theory

    found = chapters.runs(chapter, 4)["groups"]
    assert {k: len(g.configs) for k, g in found.items()} == AXIS4_GROUPS[chapter]
    for g in found.values():
        for cfg in g.configs:
            cfg.validate(gpus_available=4, te_available=True, gpu_name="H200")
            assert theory.plan(cfg)["memory_gib"]["fits"], cfg.label
            # ch02.tp's TP 2 eager point shows what graphs save
            assert cfg.cuda_graphs == "te" or g.name == "ch02.tp", cfg.label
    if chapter == "ch01":
        strong, overlap = found["dp_strong"], found["overlap"]
        assert {c.gbs for c in strong.configs} == {16} and [c.gpus for c in strong.configs] == [
            1,
            2,
            4,
        ]
        assert overlap.rounds == 3 and [c.overlap for c in overlap.configs] == [False, True]
        assert "overlap" not in chapters.runs("ch01", 1)["groups"]


def test_tp_against_dp_runs_the_micro_batch_its_freed_memory_allows():
    """ch02.tp-vs-dp: DP 4 + distributed optimizer at micro-batch 8; each TP at the largest
    micro-batch dividing its share of the same global batch whose predicted memory stays within
    DP's (specs.largest_mbs_within), and the next one up would not."""
    from megalab import theory

    dp, *tps = chapters.runs("ch02", 4)["groups"]["tp_vs_dp"].configs
    budget = theory.memory(dp, "H200")["total"]
    assert (dp.tp, dp.mbs, dp.dist_opt) == (1, 8, True)
    assert [(c.tp, c.mbs) for c in tps] == [(2, 12), (4, 24)]
    for c in tps:
        assert c.gbs == dp.gbs and theory.memory(c, "H200")["total"] <= budget
        bigger = [m for m in range(c.mbs + 1, c.gbs // c.dp + 1) if (c.gbs // c.dp) % m == 0]
        assert theory.memory(c.replace(mbs=bigger[0]), "H200")["total"] > budget
    assert specs.largest_mbs_within(dp, 0.0) == 1
    assert "tp_vs_dp" not in chapters.runs("ch02", 1)["groups"]


def test_the_routing_lesson_is_planned_once_each_and_recorded_by_its_tag(tmp_path):
    """ch06.routing: the auxiliary loss at 0.01, 0.1 and none, fp32 router, 300 steps with a
    100-step warm-up, each run once alone after the chapter's groups; recorded when each has an ok
    record tagged ch06.routing."""
    from run_records import record

    lesson = chapters.runs("ch06", 2)["lessons"]["routing"]
    assert not chapters.runs("ch06", 1)["lessons"]
    assert not any(isinstance(i, specs.Lesson) for i in specs.items(chapters.runs("ch06", 2)))
    assert [(c.moe_balance, c.moe_aux_coeff) for c in lesson.configs] == [
        ("aux_loss", 0.01),
        ("aux_loss", 0.1),
        ("none", 0.01),
    ]
    for c in lesson.configs:
        c.validate(gpus_available=2, te_available=True, gpu_name="H200")
        assert (c.iters, c.lr_warmup, c.moe_router_fp32, c.ep) == (300, 100, True, 2)
    store = Store(tmp_path)
    lines = recording.plan("ch06", 2, missing_only=True, store=store, host_gpus=2)
    at = sum(len(g.plan_lines()) for g in chapters.runs("ch06", 2)["groups"].values())
    assert lines[at : at + 3] == lesson.plan_lines()
    assert all(line.startswith("ch06.routing! ") for line in lesson.plan_lines())
    for c in lesson.configs[:2]:
        store.append(record(c, tags=[lesson.tag]))
    assert not recording.is_recorded(lesson, store)
    store.append(record(lesson.configs[2], tags=[lesson.tag]))
    assert recording.is_recorded(lesson, store)
    after = recording.plan("ch06", 2, missing_only=True, store=store, host_gpus=2)
    assert after == lines[:at] + lines[at + 3 :]


def test_the_fair_peer_pair_is_one_group_of_equal_settings():
    """perf.peer (`megalab experiments performance`): the trainer and the peer at the same settings,
    wgrad fusion off on both, eager and graphed, three rounds; from 2 GPUs."""
    g = chapters.runs("performance", 2)["groups"]["peer"]
    assert chapters.key_of("performance") == "performance" and chapters.key_of("1") == "ch01"
    with pytest.raises(chapters.UnknownChapter):  # a page is no chapter: reproduce relies on it
        chapters.resolve("performance")
    assert not chapters.runs("performance", 1)["groups"]
    assert g.name == "perf.peer" and g.rounds == 3
    assert [(c.runner, c.cuda_graphs) for c in g.configs] == [
        ("megalab", "none"),
        ("megatron-lm", "none"),
        ("megalab", "te"),
        ("megatron-lm", "te"),
    ]
    assert {c.grad_accum_fusion for c in g.configs} == {"off"}
    ours, peer = g.configs[:2]
    assert peer.replace(runner="megalab", init="layout_invariant") == ours


@pytest.mark.parametrize("name", ["ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07"])
def test_a_chapter_on_one_gpu_keeps_every_comparison_group_and_its_defining_points(name):
    """A reproduction on fewer GPUs than the book's (`--gpus 1`) asks for the same groups by name
    (ch01's overlap needs DP 2: the book's, read from the records); defining() plans for it."""
    alias = {
        "ch01": chapters.data_parallel,
        "ch02": chapters.tensor_parallel,
        "ch03": chapters.sequence_parallel,
        "ch04": chapters.context_parallel,
        "ch05": chapters.pipeline_parallel,
        "ch06": chapters.expert_parallel,
        "ch07": chapters.choosing_a_layout,
    }[name]
    book = set(alias(chapters.BOOK_GPUS).get("groups", {}))
    assert set(alias(1).get("groups", {})) == book
    assert all(x.gpus == 1 for x in chapters.defining(name, 1) if hasattr(x, "gpus"))
