"""Chapter 03's runs: the ones it reads follow its RECORDED_* tables, the queued ones are legal,
scale with the GPU count and are not among them (tests/test_chapters.py: the store answers the
first, not the second)."""

import pytest

from megalab.book import chapters, recording, specs
from megalab.book.chapters import ch03_sequence_parallel as ch03
from megalab.runs.config import RunConfig
from megalab.jobs.sweep import with_value


def _cfg(item) -> RunConfig:
    return item if isinstance(item, RunConfig) else item.cfg


def _keys(found) -> set:
    """(key, profiled): a profiled run shares its configuration's key with the timed run, not its
    record."""
    return {(_cfg(i).key, isinstance(i, specs.Profiled)) for i in specs.items(found)}


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_runs_do_not_change_with_the_gpu_count_and_pending_is_apart(gpus):
    """One-GPU runs and the recorded TP runs are read: 8 GPUs read the same ones as 4, 2 GPUs TP
    2's, 1 GPU only the one-GPU ones; what 8 GPUs add beyond the records (TP 8) is queued, legal and
    apart."""
    found = chapters.runs("ch03", gpus)
    if gpus == 1:
        assert all(_cfg(i).gpus == 1 for i in specs.items(found))
    else:
        recorded = {t for t in ch03.RECORDED_TP if t <= gpus}
        assert set(found["per_layer_tp"]) == set(found["recompute_tp"]) == recorded
        assert {t: set(fits) for t, fits in found["fit_mbs"].items()} == {
            t: set(names) for t, names in ch03.RECORDED_FITS.items() if t <= gpus
        }
        assert {p.cfg.tp for p in found["profile_tp"]} == recorded
        assert {p.cfg.tp for p in [*found["parity"], *found["parity_selective"]]} == recorded
        assert set(found["profile_recompute_tp"]) == {
            t for t in ch03.RECORDED_PROFILE_RECOMPUTE_TP if t <= gpus
        }
    if gpus == 8:
        assert _keys(found) == _keys(chapters.runs("ch03", 4))
    queued = chapters.pending("ch03", gpus)
    # a layout's fit is read or queued, never both
    for t, fits in queued.get("fit_mbs", {}).items():
        assert fits and not set(fits) & set(ch03.RECORDED_FITS.get(t, ()))
    for item in specs.items(queued):
        cfg = _cfg(item)
        cfg.validate()
        assert cfg.gpus <= gpus
        # at a recorded degree only the fits and the profiled recompute steps
        if cfg.tp in ch03.RECORDED_TP:
            # can be queued
            assert (isinstance(item, specs.Fit) and cfg.name == ch03.BIG_WIDE) or (
                isinstance(item, specs.Profiled)
                and cfg.tp not in ch03.RECORDED_PROFILE_RECOMPUTE_TP
            )
    assert not _keys(queued) & _keys(found)


def test_moving_runs_out_of_pending_kept_their_keys():
    """What 8 GPUs read and queue is the same set of runs as one definition at every TP degree."""
    both = _keys(chapters.runs("ch03", 8)) | _keys(chapters.pending("ch03", 8))
    fits = {t: ch03.LAYOUTS for t in (2, 4, 8)}
    every = _keys(ch03._tp([2, 4, 8], ch03.ITERS, "H200", fits)) | _keys(
        ch03._profile_recompute([2, 4, 8], ch03.ITERS)
    )
    assert every <= both
    assert {
        (p.cfg.key, False)
        for t in (2, 4, 8)
        for p in (ch03._stable(t), ch03._stable(t, recompute="selective"))
    } <= both


def test_eight_gpus_queue_the_seed_tutorials_gpt22b_rows():
    """Issue 24: the seed's GPT-22B table at TP 8, global batch 4 (dp 1, one micro-batch of 4), row
    by row: timed without SP, with SP and with full recompute, the last two profiled too; legal on
    eight GPUs, in the plan, and queued nowhere below TP 8."""
    queued = chapters.pending("ch03", 8)
    rows = queued["seed_tp"][8]
    assert set(queued["seed_tp"]) == set(queued["profile_seed_tp"]) == {ch03.SEED_TP}
    assert {name: (c.sp, c.recompute) for name, c in rows.items()} == {
        "tp": (False, "none"),
        "tp_sp": (True, "none"),
        "tp_full": (False, "full"),
    }
    for cfg in rows.values():
        assert (cfg.name, cfg.layers, cfg.hidden, cfg.heads, cfg.seq) == (
            "gpt-22b",
            48,
            6144,
            64,
            2048,
        )
        assert (cfg.gpus, cfg.tp, cfg.dp, cfg.gbs, cfg.mbs, cfg.num_microbatches) == (
            8,
            8,
            1,
            4,
            4,
            1,
        )
        assert cfg.problems(gpus_available=8) == [] and cfg.validate(gpus_available=8) is cfg
    profiled = queued["profile_seed_tp"][8]
    assert all(isinstance(p, specs.Profiled) for p in profiled)
    # the profiled steps are the timed ones
    assert [p.cfg for p in profiled] == [rows["tp_sp"], rows["tp_full"]]
    plan = recording.plan("ch03", gpus=8, pending=True)
    assert sum(" --name gpt-22b " in line and " --mbs 4 --gbs 4 " in line for line in plan) == 5
    assert sum(line.endswith(" --profile") and " --name gpt-22b " in line for line in plan) == 2
    for gpus in (2, 4):
        assert not [
            v for k, v in chapters.pending("ch03", gpus).items() if k.endswith("seed_tp") and v
        ]


def test_the_fit_without_recompute_is_settled_inside_its_window():
    """The module's search and the recorded probes agree: the largest probe that fits lies inside
    the window theory's prediction sets, and the next micro-batch is recorded out of memory."""
    fit = chapters.runs("ch03", 2)["fit_mbs_1gpu"]["none"]
    result = fit.run("cached", quiet=True)
    lo, hi = fit.window
    assert result.largest is not None and lo <= result.largest < hi
    probes = dict(result.probes)
    assert probes[result.largest].ok and probes[result.largest + 1].status == "oom"
    assert all(lo <= v <= hi for v in probes)
    assert probes[result.largest].config == with_value(fit.cfg, "mbs", result.largest)


@pytest.mark.parametrize(
    "t,layout", [(t, name) for t, names in ch03.RECORDED_FITS.items() for name in names]
)
def test_the_recorded_fits_are_settled_inside_their_windows(t, layout):
    """gpt-8.3b on two GPUs, gpt-22b on four: every recorded layout's largest micro-batch lies
    inside its window, the next one is recorded out of memory, and TP alone fails at a micro-batch
    TP + SP fits (the chapter's claim)."""
    fits = chapters.runs("ch03", 4)["fit_mbs"][t]
    fit = fits[layout]
    result = fit.run("cached", quiet=True)
    lo, hi = fit.window
    assert result.largest is not None and lo <= result.largest < hi
    probes = dict(result.probes)
    assert probes[result.largest].ok and probes[result.largest + 1].status == "oom"
    assert probes[result.largest].config == with_value(fit.cfg, "mbs", result.largest)
    tp, sp = (fits[k].run("cached", quiet=True).largest for k in ("tp", "tp_sp"))
    assert tp < sp


def test_a_queued_fit_is_not_settled_by_the_store():
    """gpt-22b's full-recompute search at TP 4 (29 ran, 32 ran out of memory, 30 and 31 unprobed)
    and every TP 8 search: read from the store alone, each still needs a probe, which is why it is
    queued and not read."""
    from megalab.jobs.running import NotRecorded

    for fits in chapters.pending("ch03", 8)["fit_mbs"].values():
        for fit in fits.values():
            with pytest.raises(NotRecorded):
                fit.run("cached", quiet=True)


def test_the_profiled_steps_keep_kernels_by_kind():
    found = chapters.runs("ch03", 4)
    for item in found["profile_recompute_1gpu"]:
        profile = item.run("cached", quiet=True).record["profile"]
        assert set(profile["kernel_s_per_step"]) >= {"gemm", "attention", "other"}
        assert profile["timeline"]["kernels"]
    # TP 2 and TP 4, with and without SP: the NCCL kernels are there
    for item in found["profile_tp"]:
        profile = item.run("cached", quiet=True).record["profile"]
        assert set(profile["kernel_s_per_step"]) >= {"gemm", "attention", "other", "nccl"}


@pytest.mark.parametrize("t", [2, 4])
def test_the_tp_runs_are_read_from_the_store(t):
    """Per-layer pairs, the MLP's recompute and the recompute runs at TP 2 and TP 4 have records
    with act_gib and a step time; the parities pass."""
    import megalab

    found = chapters.runs("ch03", 4)
    for pair in [*found["per_layer_tp"][t].values(), found["per_layer_modules"][t]]:
        assert all(megalab.run(c, "cached", quiet=True).summary["act_gib"] > 0 for c in pair)
    for c in [*found["recompute_tp"][t], found["recompute_modules_tp"][t]]:
        assert megalab.run(c, "cached", quiet=True).summary["step_time_s"] > 0
    for p in [*found["parity"], *found["parity_selective"]]:
        if p.cfg.tp == t:
            assert p.run("cached", quiet=True).passes


def test_sp_saves_more_of_a_layer_at_tp4_than_at_tp2():
    """Korthikanti et al. 2022 (Table 2): SP divides the 10 units TP leaves whole by t, so its share
    of a layer grows with t: 1 - 17/22 at TP 2, 1 - 8.5/16 at TP 4 (TE's attention); the records
    follow."""
    import megalab

    found = chapters.runs("ch03", 4)

    def per_layer(pair):
        lo, hi = (megalab.run(c, "cached", quiet=True).summary["act_gib"] for c in pair)
        return (hi - lo) / (pair[1].layers - pair[0].layers)

    saved = {
        t: 1
        - per_layer(found["per_layer_tp"][t]["tp_sp"]) / per_layer(found["per_layer_tp"][t]["tp"])
        for t in (2, 4)
    }
    assert saved[2] == pytest.approx(1 - 17 / 22, abs=0.03) and saved[4] == pytest.approx(
        1 - 8.5 / 16, abs=0.03
    )
    assert saved[4] > saved[2]


@pytest.mark.parametrize("t", [2, 4])
def test_sp_runs_more_and_shorter_nccl_kernels_than_tp(t):
    """profiles.nccl_kernels on the two profiled steps at TP t: SP has at least twice TP's
    collectives in the layers, and its typical kernel is shorter than TP's all-reduce (half the
    bytes each)."""
    from megalab.records import profiles

    steps = [p for p in chapters.runs("ch03", 4)["profile_tp"] if p.cfg.tp == t]
    got = {
        p.cfg.sp: profiles.nccl_kernels(p.run("cached", quiet=True).record["profile"])
        for p in steps
    }
    layers = steps[0].cfg.layers
    assert len(got[False]) >= 4 * layers and len(got[True]) >= 8 * layers
    assert (got[True] > 0).all() and got[True].quantile(0.25) < got[False].quantile(0.25)


def test_each_profiled_recompute_step_is_read_from_its_own_gpu_model():
    """The same three configurations are profiled on an H200 (kernels by kind) and an H100 (with the
    forward and backward clock): each series reads its own card's records, never the newer one of
    the other card."""
    found = chapters.runs("ch03", 2)
    for name, card, schedule in (
        ("profile_recompute_1gpu", "H200", False),
        ("profile_recompute_h100", "H100", True),
    ):
        for item in found[name]:
            record = item.run("cached", quiet=True).record
            assert card in record["env"]["gpu_name"]
            assert ("schedule" in record["profile"]) == schedule


def test_the_profiled_recompute_steps_are_the_timed_ones_and_show_the_recomputed_attention():
    """At TP 4 + SP the profiled pair has the configuration of the timed recompute_tp runs (none,
    selective), and selective recompute adds attention kernel time (the core attention re-run), GEMM
    time about unchanged."""
    found = chapters.runs("ch03", 4)
    pair = found["profile_recompute_tp"][4]
    assert [p.cfg for p in pair] == found["recompute_tp"][4][:2]
    got = {
        p.cfg.recompute: p.run("cached", quiet=True).record["profile"]["kernel_s_per_step"]
        for p in pair
    }
    assert set(got["none"]) >= {"gemm", "attention", "other", "nccl"}
    assert got["selective"]["attention"] > got["none"]["attention"] * 1.2
    assert got["selective"]["gemm"] == pytest.approx(got["none"]["gemm"], rel=0.05)
