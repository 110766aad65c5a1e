"""Is a training step bound by the GPU, or by the host that feeds it? What a profiled record answers.

A profiled record keeps the kernels of one step (`profile.timeline`, metrics.kernel_timeline: category,
start_ms, duration_ms, stream). Kernels on several CUDA streams overlap, so the time the GPU is busy is
the union of their intervals, not the sum of their durations. Set beside the step's wall time it says
what the step waits on: a GPU busy for most of the step waits on its kernels; one busy for a fraction of
it waits on the host (Python, the framework's per-layer work, kernel launches, host-device syncs), and
faster kernels would not make the step faster.

    >>> host_bound.gpu_busy(record["profile"])             # kernels, kernel_s, busy_s, span_s
    >>> host_bound.made_before(cfg, "2026-11-25T04:02:15Z")  # the newest record of cfg before a trainer change
    >>> host_bound.compare({("MoE", "after"): (timed, profiled), ...})   # one row per pair

The wall time comes from an unprofiled record (the profiler adds host work to every kernel it traces,
so a profiled step is slower, the more so the more kernels it issues); the busy time from the profiled
record of the same configuration and trainer.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["union_seconds", "gpu_busy", "made_before", "compare"]


def union_seconds(intervals_ms: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the (start_ms, duration_ms) intervals: overlaps count once."""
    total, start, end = 0.0, None, None
    for a, d in sorted(intervals_ms):
        b = a + max(d, 0.0)
        if end is not None and a <= end:   # overlaps the current run of busy time: extend it
            end = max(end, b)
            continue
        if end is not None:
            total += end - start
        start, end = a, b
    if end is not None:
        total += end - start
    return total / 1e3


def gpu_busy(profile: dict) -> dict:
    """One profiled step's kernels (a record's `profile`): kernels (count), kernel_s (the sum of their
    durations), busy_s (the union of their intervals: time at least one kernel ran), span_s (first
    kernel's start to the last one's end: the step as the GPU saw it, under the profiler) and step."""
    t = profile["timeline"]
    cols = {name: i for i, name in enumerate(t["columns"])}
    s, d = cols["start_ms"], cols["duration_ms"]
    rows = [(k[s], k[d]) for k in t["kernels"]]
    return {"step": t.get("step"), "kernels": len(rows), "kernel_s": sum(max(x, 0.0) for _, x in rows) / 1e3,
            "busy_s": union_seconds(rows), "span_s": max((a + x for a, x in rows), default=0.0) / 1e3}


def made_before(cfg, when: str, profiled: bool = False, store=None) -> dict:
    """The newest ok record of `cfg` recorded before `when` (ISO 8601 UTC, as records' recorded_at), e.g.
    the last one a trainer made before a change; profiled or not. NotRecorded if there is none."""
    from megalab.results import NotRecorded
    from megalab.store import _store
    for r in _store(store).find(cfg, status="ok", profiled=profiled):   # newest first
        if (r.get("recorded_at") or "") < when:
            return r
    raise NotRecorded(f"no {'profiled ' if profiled else ''}record of {cfg.label} before {when}")


def compare(pairs: dict) -> "pd.DataFrame":  # noqa: F821
    """One row per {label: (timed record, profiled record)}, label a string or a tuple (its parts become
    the index levels): wall_s (the timed record's median step), the profiled step's gpu_busy (kernels,
    kernel_s, busy_s, span_s), busy_frac = busy_s / wall_s, idle_s = wall_s − busy_s, and the two
    records' git commits and dates."""
    import pandas as pd
    rows = {}
    for label, (timed, profiled) in pairs.items():
        wall = float(timed["summary"]["step_time_s"])
        busy = gpu_busy(profiled["profile"])
        rows[label] = {"wall_s": wall, **busy, "busy_frac": busy["busy_s"] / wall, "idle_s": wall - busy["busy_s"],
                       "commit": (profiled.get("git_commit") or "")[:7], "timed_commit": (timed.get("git_commit") or "")[:7],
                       "recorded": (profiled.get("recorded_at") or "")[:10]}
    return pd.DataFrame.from_dict(rows, orient="index")
