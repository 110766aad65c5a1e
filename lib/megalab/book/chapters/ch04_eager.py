"""Chapter 04's evidence page: what the first, eager CP runs measured, and why their step times
teach the host rather than context parallelism.

    ch04_eager.fixed_cost(runs)                    # step = fixed + FLOPs / rate, per layout
    ch04_eager.ring_kernels(cfg, profile, bw)      # the ring's NCCL kernels against their bytes
    ch04_eager.compute_share(cfg, profile, step)   # compute kernels per rank against the step
    ch04_eager.end_loss(results)                   # where each run's loss ended, and after how long
    ch04_eager.step_table(runs)                    # the eager step times, by layout and length
    ch04_eager.median_steps(runs)                  # {(cp_comm, seq): median step seconds}

Every function takes run results (`.config`, `.summary`, `.series`, `.record`, as `megalab.run`
returns them) or a record's `profile`.
"""

from __future__ import annotations

from megalab import theory
from megalab.book.chapters.ch04_analysis import layout

__all__ = ["fixed_cost", "ring_kernels", "compute_share", "end_loss", "step_table", "median_steps"]


def fixed_cost(runs):
    """A least-squares line through each layout's steps against its model TFLOP per GPU: layout,
    runs, fixed_s (the step at zero FLOPs), rate (the TFLOP/s per GPU its slope implies) and the
    shortest and longest step. A run is a Result (`.status`, `.config`, `.summary`) or a (RunConfig,
    step seconds) pair, as a comparison group's medians give them. A step the GPU paces has a small
    fixed part and a rate below the GPU's peak; a large fixed part, or a rate above the peak, says
    something else sets the pace."""
    import numpy as np
    import pandas as pd

    by = {}
    for r in runs:
        cfg, step = r if isinstance(r, tuple) else (r.config, r.summary.get("step_time_s"))
        if isinstance(r, tuple) or r.status == "ok":
            by.setdefault(layout(cfg), []).append((cfg, step))
    rows = []
    for name, pairs in by.items():
        x = np.array([theory.model_flops(c) / c.gpus / 1e12 for c, _ in pairs])
        y = np.array([step for _, step in pairs])
        slope, fixed = np.polyfit(x, y, 1) if len(pairs) > 1 else (float("nan"), float("nan"))
        rows.append(
            {
                "layout": name,
                "runs": len(pairs),
                "fixed_s": float(fixed),
                "rate": float(1 / slope) if slope > 0 else float("inf"),
                "shortest_s": float(y.min()),
                "longest_s": float(y.max()),
            }
        )
    return pd.DataFrame(rows)


def ring_kernels(cfg, profile: dict, bus_bw_gbs: float) -> dict:
    """The NCCL kernels on the busiest NCCL stream of a profiled ring (p2p) step, rank 0: kernels,
    total_ms, fast_ms, median_ms and slow_ms (their 5th, 50th and 95th percentile), hop_ms (one
    hop's K and V chunk, s/cp tokens in bf16, at `bus_bw_gbs`) and bytes_ms (kernels x hop_ms: what
    moving the bytes needs). A kernel's time includes waiting for its peers: kernels near hop_ms
    moved bytes, the rest of the time is waiting."""
    from megalab.records import profiles

    k = profiles.timeline(profile)
    ring = next(iter(profiles.nccl_streams(profile)))
    ms = k.loc[(k["category"] == "nccl") & (k["stream"] == ring), "duration_ms"]
    kv_width = cfg.hidden // cfg.heads * cfg.groups
    hop = 2 * cfg.seq // cfg.cp * cfg.mbs * kv_width * 2 / (bus_bw_gbs * 1e9) * 1e3
    return {
        "kernels": int(len(ms)),
        "total_ms": float(ms.sum()),
        "fast_ms": float(ms.quantile(0.05)),
        "median_ms": float(ms.median()),
        "slow_ms": float(ms.quantile(0.95)),
        "hop_ms": hop,
        "bytes_ms": hop * len(ms),
    }


def compute_share(cfg, profile: dict, step_s: float):
    """Each rank's compute kernels (GEMM, attention, the rest; NCCL left out) in a profiled step
    against `step_s`, a timed step of the same configuration: layout, rank, compute_s, nccl_s and
    share (compute_s / step_s)."""
    from megalab.records import profiles

    t = profiles.rank_times(profile)
    compute = t["gemm_s"] + t["attention_s"] + t["other_s"]
    return [
        {
            "layout": layout(cfg),
            "rank": int(rank),
            "compute_s": float(c),
            "nccl_s": float(t.at[rank, "nccl_s"]),
            "share": float(c / step_s),
        }
        for rank, c in compute.items()
    ]


def end_loss(results):
    """Where each run's loss ended, and after how many steps: layout, seq, steps, profiled,
    lr_warmup (the trainer's warm-up steps, min(10, iters // 10)), last (the loss at its last step)
    and at_10 (the loss at step 10, the last step both 10- and 20-step runs share)."""
    import pandas as pd

    rows = []
    for r in results:
        loss = list(r.series.get("loss") or [])
        rows.append(
            {
                "layout": layout(r.config),
                "seq": r.config.seq,
                "steps": len(loss),
                "profiled": "profile" in (r.record.get("tags") or ()),
                "lr_warmup": min(10, r.config.iters // 10),
                "last": float(loss[-1]),
                "at_10": float(loss[9]) if len(loss) >= 10 else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def step_table(runs):
    """The eager runs' median steps: seq (rows) by layout (columns), in seconds."""
    import pandas as pd

    rows = [
        {"seq": r.config.seq, "layout": layout(r.config), "step_s": r.summary["step_time_s"]}
        for r in runs
        if r.status == "ok"
    ]
    return pd.DataFrame(rows).pivot_table(
        index="seq", columns="layout", values="step_s", sort=False
    )


def median_steps(runs) -> dict:
    """{(cp_comm, seq): median step in seconds} of the runs that ran."""
    return {
        (r.config.cp_comm, r.config.seq): float(r.summary["step_time_s"])
        for r in runs
        if r.status == "ok"
    }
