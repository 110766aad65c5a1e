"""jobs.reuse and run_many(reuse=True), the launcher mocked: runs are grouped by world size (and
what a process reads once), one launch per group, one record per configuration, marked as reused."""

import pytest

from megalab import metrics
from megalab.jobs import launch, reuse
from megalab.jobs.running import run_many
from megalab.records import is_reused
from megalab.records.store import Store
from megalab.runs.config import RunConfig

CFG = RunConfig(name="tiny", layers=2, hidden=64, heads=4, vocab=1024, seq=32, impl="local", gbs=4)
ONE, TWO, FOUR = CFG.replace(gpus=1), CFG.replace(gpus=2, pp=2), CFG.replace(gpus=4, pp=2)


def test_groups_by_world_size_and_what_a_process_reads_once():
    cfgs = [ONE, TWO, ONE.replace(seq=64), FOUR, TWO.replace(layers=4), TWO.replace(tp=2, pp=1)]
    # tp > 1 sets CUDA_DEVICE_MAX_CONNECTIONS before CUDA starts: a process of its own
    assert reuse.groups(cfgs) == [[0, 2], [1, 4], [3], [5]]
    assert reuse.groups([ONE, ONE.replace(cuda_graphs="local"), ONE]) == [[0, 2], [1]]


@pytest.fixture
def launches(monkeypatch):
    """launch.launch and reuse.launch_batch replaced: each call is counted, every run is ok."""
    calls = []

    def outcome(cfg, run_dir=None, reused=None):
        steps = [{"kind": "step", "step": s, "loss": 7.0, "step_time_s": 0.1} for s in range(3)]
        summary = {"kind": "summary", "steps": 3, "startup_marks_s": {"first_step": 2.0}}
        return launch.RunOutcome(
            "ok", None, metrics.Parsed(None, steps, summary), run_dir, 0, reused
        )

    def single(cfg, *a, **k):
        calls.append([cfg])
        return outcome(cfg)

    def batch(cfgs, dirs, *a, **k):
        calls.append(list(cfgs))
        return [
            outcome(c, d, {"position": i, "runs": len(cfgs)})
            for i, (c, d) in enumerate(zip(cfgs, dirs))
        ]

    monkeypatch.setattr(launch, "launch", single)
    monkeypatch.setattr(launch, "check", lambda cfg, nproc=None: None)
    monkeypatch.setattr(reuse, "launch_batch", batch)
    return calls


def test_run_many_launches_each_group_once_and_records_each_run(tmp_path, launches):
    store = Store(tmp_path / "results")
    cfgs = [ONE, TWO, ONE.replace(seq=64), TWO.replace(layers=4), FOUR]
    results = run_many(cfgs, mode="live", reuse=True, store=store, quiet=True)
    assert [len(c) for c in launches] == [2, 2, 1]  # 1 GPU, 2 GPUs, the 4-GPU run alone
    assert [r.record["key"] for r in results] == [c.key for c in cfgs]
    assert len(store.load()) == 5
    assert [is_reused(r.record) for r in results] == [True, True, True, True, False]
    assert results[2].record["env"]["reused_process"] == "run 2 of 2"
    assert "reused_process" not in results[4].record["env"]  # a fresh run's env as before


def test_reuse_is_off_by_default_and_comparison_groups_launch_fresh(tmp_path, launches):
    store = Store(tmp_path / "results")
    run_many([ONE, ONE.replace(seq=64)], mode="live", store=store, quiet=True)
    run_many([ONE, ONE.replace(seq=64)], mode="live", reuse=True, store=store, quiet=True,
             tags=["group.ch09.demo"])  # fmt: skip
    assert [len(c) for c in launches] == [1, 1, 1, 1]
    assert not any(is_reused(r) for r in store.load())
