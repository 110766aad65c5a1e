"""sweep.py: bisection for the largest size that fits, and loss parity against one GPU."""

import pytest

from megalab.jobs import running as results, sweep
from megalab.runs.config import RunConfig
from megalab.jobs.running import Result

CFG = RunConfig(
    name="gpt-test", layers=4, hidden=256, heads=4, gpus=4, tp=2, mbs=2, gbs=16, impl="local"
)


def _result(cfg, status="ok", losses=None, source="live", rid=None):
    steps = list(range(len(losses or [])))
    return Result(
        {
            "id": rid or f"{cfg.key}-{status}",
            "label": cfg.label,
            "key": cfg.key,
            "status": status,
            "config": cfg.to_dict(),
            "summary": {"step_time_s": 0.1 * cfg.mbs},
            "series": {"step": steps, "loss": list(losses or [])},
            "env": {},
        },
        source,
    )


@pytest.fixture
def fake_run(monkeypatch):
    calls = []

    def install(answer):
        def run(cfg, mode="auto", tags=(), store=None, exclude=(), **kw):
            calls.append((cfg, mode, list(tags), list(exclude)))
            return answer(cfg, len(calls))

        monkeypatch.setattr(results, "run", run)
        return calls

    return install


def test_with_value_keeps_microbatches():
    c = sweep.with_value(CFG, "mbs", 8)
    assert (c.mbs, c.gbs, c.num_microbatches) == (8, 64, CFG.num_microbatches)
    assert sweep.with_value(CFG, "seq", 4096).seq == 4096
    with pytest.raises(ValueError):
        sweep.with_value(CFG, "hidden", 1)


@pytest.mark.parametrize("limit, expected", [(6, 6), (1, 1), (0, None), (64, 64), (33, 33)])
def test_fit_bisects(fake_run, limit, expected):
    calls = fake_run(lambda cfg, n: _result(cfg, "ok" if cfg.mbs <= limit else "oom"))
    out = sweep.fit(CFG, "mbs", 1, 64, mode="live")
    assert out.largest == expected
    assert len(calls) <= 8  # log2(64) + 2
    assert all(tags[0] == "fit" for _, _, tags, _ in calls)
    table = out.table
    assert list(table["mbs"]) == sorted(table["mbs"]) and set(table["fits"]) <= {True, False}
    if expected:
        assert table.loc[table["mbs"] == expected, "status"].item() == "ok"


def _recorded_then_live(fake_run, recorded: dict, limit: int):
    """A store that holds `recorded` ({mbs: status}); anything else runs live and fits up to
    `limit`."""

    def answer(cfg, n):
        mode = calls[-1][1]
        if mode == "cached":
            if cfg.mbs not in recorded:
                raise results.NotRecorded(f"no record of mbs {cfg.mbs}")
            return _result(cfg, recorded[cfg.mbs], source="cached")
        return _result(cfg, "ok" if cfg.mbs <= limit else "oom")

    calls = fake_run(answer)
    return calls


def test_fit_starts_from_the_recorded_probes(fake_run):
    calls = _recorded_then_live(
        fake_run, {20: "ok", 24: "ok", 30: "oom", 28: "nccl_error"}, limit=26
    )
    out = sweep.fit(CFG, "mbs", 20, 34, mode="auto")
    assert out.largest == 26
    ran = [c.mbs for c, mode, *_ in calls if mode != "cached"]
    # only between 24 (fits) and 30 (does not); 28's unsettled record answers nothing
    assert ran == [27, 25, 26]
    # the recorded probes are in the table
    assert {20, 24, 30} <= set(out.table["mbs"])


def test_a_moved_window_still_finds_its_answer_in_the_records(fake_run):
    """Theory's prediction improved, so the window moved: the recorded bracket (59392 fits, 61440
    does not) lies inside the new window, and cached mode answers without a record at either new
    edge."""
    cfg = CFG.replace(gpus=1, tp=1, mbs=1, gbs=1, seq=2048)
    recorded = {59392: "ok", 61440: "oom", 57344: "ok"}

    def answer(c, n):
        if c.seq not in recorded:
            raise results.NotRecorded(f"no record of seq {c.seq}")
        return _result(c, recorded[c.seq], source="cached")

    fake_run(answer)
    out = sweep.fit(cfg, "seq", 53248, 65536, mode="cached", step=2048)
    assert out.largest == 59392 and list(out.table["seq"]) == [57344, 59392, 61440]


def test_live_fit_measures_again(fake_run):
    calls = _recorded_then_live(fake_run, {24: "ok", 30: "oom"}, limit=26)
    assert sweep.fit(CFG, "mbs", 20, 34, mode="live").largest == 26
    assert not any(mode == "cached" for _, mode, *_ in calls)


def test_fit_layers_respects_pipeline(fake_run):
    cfg = CFG.replace(gpus=4, tp=1, pp=4, layers=8)
    calls = fake_run(lambda c, n: _result(c, "ok" if c.layers <= 30 else "oom"))
    out = sweep.fit(cfg, "layers", 4, 64)
    assert out.largest == 28 and all(c.layers % 4 == 0 for c, *_ in calls)


def test_reference_of():
    ref = sweep.reference_of(CFG.replace(sp=True, dist_opt=True, pp=2, gpus=8, vpp=2, layers=8))
    assert (ref.gpus, ref.tp, ref.pp, ref.vpp, ref.cp, ref.dp, ref.sp, ref.dist_opt) == (
        1,
        1,
        1,
        1,
        1,
        1,
        False,
        False,
    )
    assert (ref.mbs, ref.gbs, ref.num_microbatches) == (2, 16, 8) and ref.seed == CFG.seed


def _parity_answer(ref_noise, layout_shift):
    base = [10.0, 9.0, 8.2, 7.7, 7.5]

    def answer(cfg, n):
        if cfg.gpus == 1:
            return _result(cfg, losses=[x + ref_noise * (n - 1) for x in base], rid=f"ref{n}")
        return _result(cfg, losses=[x + layout_shift * i for i, x in enumerate(base)], rid="layout")

    return answer


def test_parity_passes_within_band(fake_run):
    calls = fake_run(_parity_answer(ref_noise=0.01, layout_shift=0.005))
    out = sweep.parity(CFG, mode="cached")
    assert out.passes and out.spread == pytest.approx(0.01)
    assert out.band == pytest.approx(max(3 * 0.01, sweep.PARITY_FLOOR))
    assert out.max_abs_diff == pytest.approx(0.02)
    assert list(out.series.columns) == ["step", "reference", "reference_2", "layout", "abs_diff"]
    assert [c.gpus for c, *_ in calls] == [1, 1, 4] and calls[1][3] == ["ref1"]  # distinct repeats
    assert all("parity" in tags for _, _, tags, _ in calls)


def test_parity_fails_on_drift(fake_run):
    fake_run(_parity_answer(ref_noise=0.0, layout_shift=0.1))
    out = sweep.parity(CFG)
    assert (
        not out.passes and out.band == sweep.PARITY_FLOOR and out.max_abs_diff == pytest.approx(0.4)
    )
    assert "FAILS" in repr(out)


def test_parity_names_reference_spikes(fake_run):
    """A one-step spike in the reference (step 2 here), repeated by the layout 0.03 higher: the
    strict verdict fails, the diagnostic off the spike steps sees only the small differences
    elsewhere."""
    ref = [10.0, 9.0, 12.5, 8.0, 7.9]

    def answer(cfg, n):
        if cfg.gpus == 1:
            return _result(cfg, losses=ref, rid=f"ref{n}")
        return _result(
            cfg, losses=[x + (0.03 if i == 2 else 0.001) for i, x in enumerate(ref)], rid="layout"
        )

    fake_run(answer)
    out = sweep.parity(CFG)
    assert not out.passes and out.spikes == [2] and out.layout_spikes == [2]
    assert out.max_abs_diff == pytest.approx(0.03) and out.max_abs_diff_off_spikes == pytest.approx(
        0.001
    )


def test_parity_failed_run(fake_run):
    fake_run(
        lambda cfg, n: (
            _result(cfg, "oom") if cfg.gpus > 1 else _result(cfg, losses=[1.0], rid=str(n))
        )
    )
    out = sweep.parity(CFG)
    assert not out.passes and "oom" in out.reason


def test_reference_of_uses_the_default_dispatcher():
    """With ep=1 the token dispatcher is irrelevant: every dispatcher's layout shares one
    reference."""
    from megalab.runs import presets
    from megalab.jobs.sweep import reference_of

    cfg = presets.get("moe-small").replace(gpus=4, ep=4, mbs=2, gbs=16)
    assert reference_of(cfg.replace(moe_dispatcher="allgather")).key == reference_of(cfg).key


def test_fit_best_names_the_probes_when_nothing_fits():
    from megalab.jobs.sweep import FitResult
    from megalab.jobs.running import Result

    ok, oom = Result({"status": "ok"}, "cached"), Result({"status": "oom"}, "cached")
    assert FitResult("mbs", 4, [(4, ok), (8, oom)]).best is ok
    with pytest.raises(LookupError, match="8: oom"):
        FitResult("mbs", None, [(8, oom)]).best


def test_a_probe_that_crashed_answers_nothing(tmp_path):
    """A timed-out probe is neither fits nor does-not-fit: fit raises ProbeFailed naming it."""
    from megalab.runs import presets
    from megalab.jobs.running import Store
    from megalab.jobs.sweep import ProbeFailed, fit, with_value

    cfg = presets.get("gpt-tiny").replace(impl="local", mbs=1, gbs=1)
    store = Store(tmp_path)
    store.append(
        {
            "key": with_value(cfg, "mbs", 1).key,
            "status": "ok",
            "config": with_value(cfg, "mbs", 1).to_dict(),
            "env": {},
        }
    )
    store.append(
        {
            "key": with_value(cfg, "mbs", 4).key,
            "status": "timeout",
            "config": with_value(cfg, "mbs", 4).to_dict(),
            "env": {},
        }
    )
    with pytest.raises(ProbeFailed, match="mbs=4.*timeout"):
        fit(cfg, "mbs", lo=1, hi=4, mode="cached", store=store, quiet=True)


def test_spike_steps():
    assert sweep.spike_steps([0, 1, 2, 3], [10.0, 9.0, 10.5, 9.0]) == [2]  # +1.5 nats
    # +0.9 each: a rise, not a spike
    assert sweep.spike_steps([5, 6, 7], [8.0, 8.9, 9.8]) == []


def test_parity_curves_name_a_readers_own_runs(fake_run):
    """Live runs (measured here now) come back as "... (yours)" curves that charts.loss_parity draws
    apart; recorded ones keep their plain labels, so a recorded and a live parity can share one
    chart."""
    answer = _parity_answer(ref_noise=0.0, layout_shift=0.0)
    fake_run(answer)
    live = sweep.parity(CFG).curves()
    fake_run(lambda cfg, n: results.Result(answer(cfg, n).record, "cached"))
    book = sweep.parity(CFG).curves()
    assert [k.removesuffix(" (yours)") for k in live] == list(book) and len({*live, *book}) == 4
    assert all(c["source"] == "yours" for c in live.values()) and all(
        "source" not in c for c in book.values()
    )
    assert book[CFG.label]["loss"] == live[f"{CFG.label} (yours)"]["loss"]


def test_an_expert_count_fit_steps_by_whole_experts_per_ep_rank():
    from megalab.runs import presets

    moe = presets.get("olmoe-like").replace(gpus=2, ep=2, mbs=1, gbs=8)
    assert sweep.with_value(moe, "experts", 320).experts == 320
    assert sweep._step(moe, "experts") == 16 and sweep._step(moe.replace(ep=1), "experts") == 8
