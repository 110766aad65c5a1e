"""profiles: GPU-busy time of a profiled step (the union of kernel intervals), records before a
trainer change."""

import pytest

from megalab.runs import presets
from megalab.records import profiles
from megalab.jobs.running import NotRecorded
from megalab.records.store import Store

COLUMNS = ["category", "start_ms", "duration_ms", "stream"]


def _profile(kernels):
    return {"steps": [5, 6, 7], "timeline": {"step": 7, "columns": COLUMNS, "kernels": kernels}}


def test_union_counts_overlaps_once():
    assert profiles.union_seconds([]) == 0.0
    assert profiles.union_seconds([(0.0, 2.0), (1.0, 2.0)]) == pytest.approx(3e-3)  # [0, 3] ms
    # gap 1-5 ms idle
    assert profiles.union_seconds([(5.0, 1.0), (0.0, 1.0), (0.5, 0.1)]) == pytest.approx(2e-3)
    # touching: one run
    assert profiles.union_seconds([(0.0, 1.0), (1.0, 1.0)]) == pytest.approx(2e-3)


def test_gpu_busy_of_a_step_on_two_streams():
    # a GEMM on stream 7 overlaps an NCCL kernel on stream 23; then the GPU idles 6 ms waiting on
    # the host
    busy = profiles.gpu_busy(
        _profile([["gemm", 0.0, 3.0, 7], ["nccl", 1.0, 3.0, 23], ["other", 10.0, 1.0, 7]])
    )
    assert busy["kernels"] == 3 and busy["step"] == 7
    assert busy["kernel_s"] == pytest.approx(7e-3)  # durations summed: overlap counted twice
    assert busy["busy_s"] == pytest.approx(5e-3)  # [0, 4] and [10, 11] ms
    assert busy["span_s"] == pytest.approx(11e-3)


def _record(cfg, when, step_s, profiled=False, commit="abc1234def"):
    rec = {
        "key": cfg.key,
        "config": cfg.to_dict(),
        "status": "ok",
        "recorded_at": when,
        "git_commit": commit,
        "tags": ["ch06", "profile"] if profiled else ["ch06"],
        "summary": {"step_time_s": step_s},
    }
    if profiled:
        rec["profile"] = _profile([["gemm", 0.0, 40.0, 7], ["other", 100.0, 10.0, 7]])
    return rec


def test_made_before_and_compare(tmp_path):
    store = Store(tmp_path)
    cfg = presets.get("olmoe-like").replace(mbs=1, gbs=4, iters=20)
    for when, s, commit in (
        ("2026-11-24T10:00:00Z", 2.0, "old0000"),
        ("2026-11-24T12:00:00Z", 1.9, "old1111"),
        ("2026-11-25T05:00:00Z", 1.2, "new2222"),
    ):
        store.append(_record(cfg, when, s, commit=commit))
    store.append(_record(cfg, "2026-11-24T13:00:00Z", 2.5, profiled=True, commit="old1111"))
    at = "2026-11-25T04:00:00Z"
    before = profiles.made_before(cfg, at, store=store)
    # the newest before, not the newest of all
    assert before["git_commit"] == "old1111"
    assert (
        profiles.made_before(cfg, at, profiled=True, store=store)["summary"]["step_time_s"] == 2.5
    )
    with pytest.raises(NotRecorded):
        profiles.made_before(cfg, "2026-01-01T00:00:00Z", store=store)
    prof = profiles.made_before(cfg, at, profiled=True, store=store)
    df = profiles.compare({("MoE", "before"): (before, prof)})
    row = df.loc[("MoE", "before")]
    assert row["wall_s"] == 1.9 and row["kernels"] == 2 and row["busy_s"] == pytest.approx(0.05)
    assert row["busy_frac"] == pytest.approx(0.05 / 1.9) and row["idle_s"] == pytest.approx(1.85)
    assert row["commit"] == "old1111"
