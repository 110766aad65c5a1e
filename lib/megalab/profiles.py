"""One profiled step, kernel by kernel: what ran, by kind, and where the GPU waited between kernels.

A profiled record keeps the GPU kernels of one step (`profile.timeline`, megalab.metrics.kernel_timeline:
category, start_ms, duration_ms, stream). The gap before a kernel is the time since the last running
kernel ended (0 when it starts while another still runs, on any stream): the GPU idle, waiting for the host
to launch work. Under the profiler every gap is longer than in an unprofiled step (it adds host work per
kernel), so gaps say where the GPU waits, and a timed, unprofiled record says for how long.

    >>> profiles.by_kind(record["profile"])    # per kind: kernels, kernel_ms, wait_before_ms
    >>> ms = profiles.kernel_ms({"none": r0, "full": r1})   # ms of kernels per step by kind, one column each
    >>> profiles.extra_over(ms, "none", predicted_ratios)  # what each choice adds, measured and predicted
"""

from __future__ import annotations

__all__ = ["timeline", "by_kind", "kernel_ms", "extra_over"]


def timeline(profile: dict):
    """The step's kernels as a DataFrame in start order, with `gap_ms`: the idle time before each kernel."""
    import pandas as pd
    t = profile["timeline"]
    k = pd.DataFrame(t["kernels"], columns=t["columns"]).sort_values("start_ms", kind="stable").reset_index(drop=True)
    busy_until = (k["start_ms"] + k["duration_ms"].clip(lower=0)).cummax().shift(1)
    k["gap_ms"] = (k["start_ms"] - busy_until).clip(lower=0).fillna(0.0)
    return k


def by_kind(profile: dict):
    """Per kernel kind (gemm, attention, other, nccl; rows only for kinds present): kernels (count),
    kernel_ms (their durations summed) and wait_before_ms (the GPU's idle time just before them); a row
    `all` sums them, its wait_before_ms being the step's whole idle time from its first kernel to its last."""
    k = timeline(profile)
    out = k.groupby("category").agg(kernels=("gap_ms", "size"), kernel_ms=("duration_ms", "sum"),
                                    wait_before_ms=("gap_ms", "sum"))
    out.loc["all"] = out.sum()
    return out.astype({"kernels": int})


def kernel_ms(profiled: dict):
    """Milliseconds of GPU kernels per step by kind, one column per {label: Result or record} of a profiled
    run (its `profile.kernel_s_per_step`: the profiled steps averaged), kinds that never ran left out, and
    a row `all kernels`."""
    import pandas as pd
    records = {label: getattr(r, "record", r) for label, r in profiled.items()}
    ms = pd.DataFrame({label: rec["profile"]["kernel_s_per_step"] for label, rec in records.items()}) * 1e3
    ms = ms[(ms != 0).any(axis=1)]
    ms.loc["all kernels"] = ms.sum()
    return ms


def extra_over(ms, base: str, ratios=None, source: str = "reference"):
    """What each column of `ms` (kernel_ms's frame) adds over column `base`, by kind, as long rows for
    charts.grouped_bars: "kernel kind", series ("<column>, measured"), extra_ms, source. With `ratios` (a
    frame of the same columns, e.g. FLOPs ratios by kind), also "<column>, predicted" = (ratio − 1) × base's
    ms, for the kinds it has. The `all kernels` row is left out."""
    import pandas as pd
    rows = []
    for col in (c for c in ms.columns if c != base):
        for kind in (k for k in ms.index if k != "all kernels"):
            rows.append({"kernel kind": kind, "series": f"{col}, measured", "source": source,
                         "extra_ms": ms.at[kind, col] - ms.at[kind, base]})
            if ratios is not None and kind in ratios.index:
                rows.append({"kernel kind": kind, "series": f"{col}, predicted", "source": "predicted",
                             "extra_ms": (ratios.at[kind, col] - 1) * ms.at[kind, base]})
    return pd.DataFrame(rows)
