"""A small, realistic run record for the store and results tests (shared by test_store and
test_results)."""

from megalab import metrics
from megalab.runs.config import RunConfig
from megalab.jobs.launch import RunOutcome
from megalab.records.schema import make_record

CFG = RunConfig(
    name="gpt-test", layers=4, hidden=256, heads=4, gpus=2, tp=2, mbs=2, gbs=8, impl="local"
)


def record(cfg=CFG, status="ok", gpu="NVIDIA H200", at="2025-11-21T10:00:00Z", **kw):
    steps = [
        {
            "kind": "step",
            "step": i,
            "loss": 10.0 - i,
            "step_time_s": 0.5,
            "tflops_per_gpu": 100.0,
            "mfu": 0.1,
        }
        for i in range(6)
    ]
    outcome = RunOutcome(
        status,
        None if status == "ok" else {"message": status, "rank": 0, "detail": ""},
        metrics.Parsed(None, steps if status == "ok" else [], None),
        None,
        0,
    )
    rec = make_record(
        cfg,
        outcome,
        predicted={"memory_gib": {"total": 3.5}, "flops_per_step": 1e12},
        env={"gpu_name": gpu, "gpu_count": 4},
        git_commit="abc",
        tags=["t"],
    )
    rec["recorded_at"] = at
    rec.update(kw)
    return rec


def group_frame(cfgs, ms):
    """A timings.group-shaped frame (cfg, median_ms, its interval ±1 ms, mfu) of `cfgs` at median
    steps `ms`; the last row profiled, GPU busy 95%."""
    import pandas as pd

    return pd.DataFrame(
        {
            "cfg": list(cfgs),
            "median_ms": ms,
            "lo_ms": [m - 1 for m in ms],
            "hi_ms": [m + 1 for m in ms],
            "mfu": [0.4] * len(ms),
            "gpu_busy": [float("nan")] * (len(ms) - 1) + [0.95],
        }
    )
