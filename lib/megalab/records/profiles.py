"""One profiled step, kernel by kernel: what ran, by kind, and where the GPU waited between kernels.

A profiled record keeps the GPU kernels of one step (`profile.timeline`,
megalab.metrics.kernel_timeline: category, start_ms, duration_ms, stream). The gap before a kernel
is the time since the last running kernel ended (0 when it starts while another still runs, on any
stream): the GPU idle, waiting for the host to launch work. Under the profiler every gap is longer
than in an unprofiled step (it adds host work per kernel), so gaps say where the GPU waits, and a
timed, unprofiled record says for how long.

    >>> profiles.by_kind(record["profile"])    # per kind: kernels, kernel_ms, wait_before_ms
    >>> profiles.nccl_kernels(record["profile"])   # each NCCL kernel's ms, in order (waits
                                                   included)
    >>> ms = profiles.kernel_ms({"none": r0, "full": r1})   # ms of kernels per step by kind, one
                                                            column each
    >>> profiles.extra_over(ms, "none", predicted_ratios)  # what each choice adds, measured and
                                                           predicted

Is a step bound by the GPU or by the host that feeds it? Kernels on several CUDA streams overlap, so
the time the GPU is busy is the union of their intervals, not the sum of their durations. Set beside
the step's wall time (from an unprofiled record of the same configuration and trainer: the profiler
adds host work to every kernel) it says what the step waits on: a GPU busy for a fraction of the
step waits on the host (Python, per-layer work, launches, host-device syncs), and faster kernels
would not help.

    >>> profiles.gpu_busy(record["profile"])              # kernels, kernel_s, busy_s, span_s
    >>> profiles.made_before(cfg, "2026-11-25T04:02:15Z")  # the newest record of cfg before a
                                                           trainer change
    >>> profiles.compare({("MoE", "after"): (timed, profiled), ...})   # one row per pair

Does communication hide behind compute? The time an NCCL stream's kernels run while compute kernels
run:

    >>> ring = next(iter(profiles.nccl_streams(profile)))   # the stream with the most NCCL time
    >>> profiles.hidden(profile, ring, ("attention",))      # comm_ms, hidden_ms, exposed_ms, share

Is the work balanced across ranks? A trainer that profiles every rank keeps each one's kernel
seconds by kind (`profile.ranks`) and its forward and backward seconds in one step
(`profile.schedule.rank_seconds`):

    >>> profiles.rank_times(profile)   # per global rank: attention_s, gemm_s, nccl_s, other_s,
                                       forward_s, backward_s
"""

from __future__ import annotations

__all__ = [
    "timeline",
    "by_kind",
    "kernel_ms",
    "extra_over",
    "union_seconds",
    "gpu_busy",
    "made_before",
    "side_profiles",
    "compare",
    "schedule_tasks",
    "nccl_streams",
    "hidden",
    "schedule_stages",
    "schedule_ideal",
    "schedule_summary",
    "nccl_kernels",
    "rank_times",
    "after_last",
]

from collections.abc import Iterable


def timeline(profile: dict):
    """The step's kernels as a DataFrame in start order, with `gap_ms`: the idle time before each
    kernel."""
    import pandas as pd

    t = profile["timeline"]
    k = (
        pd.DataFrame(t["kernels"], columns=t["columns"])
        .sort_values("start_ms", kind="stable")
        .reset_index(drop=True)
    )
    busy_until = (k["start_ms"] + k["duration_ms"].clip(lower=0)).cummax().shift(1)
    k["gap_ms"] = (k["start_ms"] - busy_until).clip(lower=0).fillna(0.0)
    return k


def by_kind(profile: dict):
    """Per kernel kind (gemm, attention, other, nccl; rows only for kinds present): kernels (count),
    kernel_ms (their durations summed) and wait_before_ms (the GPU's idle time just before them); a
    row `all` sums them, its wait_before_ms being the step's whole idle time from its first kernel
    to its last."""
    k = timeline(profile)
    out = k.groupby("category").agg(
        kernels=("gap_ms", "size"),
        kernel_ms=("duration_ms", "sum"),
        wait_before_ms=("gap_ms", "sum"),
    )
    out.loc["all"] = out.sum()
    return out.astype({"kernels": int})


def nccl_kernels(profile: dict):
    """The durations (ms) of the step's NCCL kernels, in start order (index 0, 1, ...). A
    collective's kernel starts when its GPU arrives and ends when the last GPU has, so each includes
    the wait for the others: the shortest of a kind are the transfer itself."""
    k = timeline(profile)
    return k.loc[k["category"] == "nccl", "duration_ms"].reset_index(drop=True)


def kernel_ms(profiled: dict):
    """Milliseconds of GPU kernels per step by kind, one column per {label: Result or record} of a
    profiled run (its `profile.kernel_s_per_step`: the profiled steps averaged), kinds that never
    ran left out, and a row `all kernels`."""
    import pandas as pd

    records = {label: getattr(r, "record", r) for label, r in profiled.items()}
    ms = (
        pd.DataFrame({label: rec["profile"]["kernel_s_per_step"] for label, rec in records.items()})
        * 1e3
    )
    ms = ms[(ms != 0).any(axis=1)]
    ms.loc["all kernels"] = ms.sum()
    return ms


def extra_over(ms, base: str, ratios=None, source: str = "reference"):
    """What each column of `ms` (kernel_ms's frame) adds over column `base`, by kind, as long rows
    for charts.grouped_bars: "kernel kind", series ("<column>, measured"), extra_ms, source. With
    `ratios` (a frame of the same columns, e.g. FLOPs ratios by kind), also "<column>, predicted" =
    (ratio − 1) × base's ms, for the kinds it has. The `all kernels` row is left out."""
    import pandas as pd

    rows = []
    for col in (c for c in ms.columns if c != base):
        for kind in (k for k in ms.index if k != "all kernels"):
            rows.append(
                {
                    "kernel kind": kind,
                    "series": f"{col}, measured",
                    "source": source,
                    "extra_ms": ms.at[kind, col] - ms.at[kind, base],
                }
            )
            if ratios is not None and kind in ratios.index:
                rows.append(
                    {
                        "kernel kind": kind,
                        "series": f"{col}, predicted",
                        "source": "predicted",
                        "extra_ms": (ratios.at[kind, col] - 1) * ms.at[kind, base],
                    }
                )
    return pd.DataFrame(rows)


def _merged(intervals_ms: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, end) in ms of the union of (start_ms, duration_ms) intervals, in order, overlaps
    merged."""
    out: list[list[float]] = []
    for a, d in sorted(intervals_ms):
        b = a + max(d, 0.0)
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def union_seconds(intervals_ms: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the (start_ms, duration_ms) intervals: overlaps count
    once."""
    return sum(b - a for a, b in _merged(intervals_ms)) / 1e3


def gpu_busy(profile: dict) -> dict:
    """One profiled step's kernels (a record's `profile`): kernels (count), kernel_s (the sum of
    their durations), busy_s (the union of their intervals: time at least one kernel ran), span_s
    (first kernel's start to the last one's end: the step as the GPU saw it, under the profiler) and
    step."""
    t = profile["timeline"]
    cols = {name: i for i, name in enumerate(t["columns"])}
    s, d = cols["start_ms"], cols["duration_ms"]
    rows = [(k[s], k[d]) for k in t["kernels"]]
    return {
        "step": t.get("step"),
        "kernels": len(rows),
        "kernel_s": sum(max(x, 0.0) for _, x in rows) / 1e3,
        "busy_s": union_seconds(rows),
        "span_s": max((a + x for a, x in rows), default=0.0) / 1e3,
    }


def made_before(cfg, when: str, profiled: bool = False, store=None) -> dict:
    """The newest ok record of `cfg` recorded before `when` (ISO 8601 UTC, as records' recorded_at),
    e.g. the last one a trainer made before a change; profiled or not. NotRecorded if there is
    none."""
    from megalab.records.store import NotRecorded
    from megalab.records.store import as_store

    for r in as_store(store).find(cfg, status="ok", profiled=profiled):  # newest first
        if (r.get("recorded_at") or "") < when:
            return r
    raise NotRecorded(f"no {'profiled ' if profiled else ''}record of {cfg.label} before {when}")


def side_profiles(cfg, gpu_model: str, store=None) -> dict:
    """{"ours": record, "peer": record}: the newest profiled record of `cfg` (iterations and seed
    aside) by our trainer and by the peer (`megalab run|peer --profile`) on `gpu_model`, for each
    side that has one."""
    from megalab.runs.config import RunConfig
    from megalab.runs.config import trainer_config
    from megalab.records.store import as_store, same_gpu_model

    loose = lambda c: c.replace(iters=1, seed=0).key  # noqa: E731  timings.loose_key: timings reads this module
    out = {}
    for r in sorted(
        as_store(store).load("run", status="ok"), key=lambda r: r.get("recorded_at") or ""
    ):
        if (
            "profile" in (r.get("tags") or [])
            and r.get("profile")
            and same_gpu_model((r.get("env") or {}).get("gpu_name"), gpu_model)
        ):
            mine = RunConfig.from_dict(r["config"])
            # timings.side_of
            who, ours = (
                ("peer", trainer_config(mine)) if mine.runner != "megalab" else ("ours", mine)
            )
            if loose(ours) == loose(cfg):
                out[who] = r  # oldest first: the newest wins
    return out


def side_kernels(cfg, gpu_model: str, store=None) -> dict:
    """{"ours": ..., "peer": ...} for each side of side_profiles(cfg, gpu_model): compute_ms (its
    kernels but NCCL's, per step, the profiled steps averaged), ring_ms (the busiest NCCL stream's
    kernels in the timeline's step: a ring's send/recv, waits included), step_ms (the profiled run's
    median step: under the profiler, no timing) and commit (its plan's commit, short)."""
    out = {}
    for who, r in side_profiles(cfg, gpu_model, store).items():
        per_kind = r["profile"]["kernel_s_per_step"]
        out[who] = {
            "compute_ms": 1e3 * sum(s for kind, s in per_kind.items() if kind != "nccl"),
            "ring_ms": max(nccl_streams(r["profile"]).values(), default=0.0),
            "step_ms": 1e3 * r["summary"]["step_time_s"],
            "commit": (r.get("git_commit") or "")[:7],
        }
    return out


def compare(pairs: dict) -> "pd.DataFrame":  # noqa: F821
    """One row per {label: (timed record, profiled record)}, label a string or a tuple (its parts
    become the index levels): wall_s (the timed record's median step), the profiled step's gpu_busy
    (kernels, kernel_s, busy_s, span_s), busy_frac = busy_s / wall_s, idle_s = wall_s − busy_s, and
    the two records' git commits and dates."""
    import pandas as pd

    rows = {}
    for label, (timed, profiled) in pairs.items():
        wall = float(timed["summary"]["step_time_s"])
        busy = gpu_busy(profiled["profile"])
        rows[label] = {
            "wall_s": wall,
            **busy,
            "busy_frac": busy["busy_s"] / wall,
            "idle_s": wall - busy["busy_s"],
            "commit": (profiled.get("git_commit") or "")[:7],
            "timed_commit": (timed.get("git_commit") or "")[:7],
            "recorded": (profiled.get("recorded_at") or "")[:10],
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def schedule_tasks(profile: dict, chunks: int = 1) -> list:
    """The measured pipeline schedule of a profiled record (`profile.schedule`,
    megalab.train.stage_clock) as charts.gantt tasks: one row per stage, kind "F"/"B" (with the
    chunk, "F1", when a GPU holds several), labelled with the micro-batch, seconds from the step's
    start. Empty if the run kept none."""
    sched = (profile or {}).get("schedule") or {}
    return [
        {
            "row": f"stage {stage}",
            "start_s": t["start_s"],
            "end_s": t["end_s"],
            "label": t["microbatch"],
            "kind": t["kind"] + (str(t["chunk"]) if chunks > 1 else ""),
        }
        for stage, tasks in sorted(sched.get("stages", {}).items(), key=lambda kv: int(kv[0]))
        for t in tasks
    ]


def _passes(profile: dict) -> dict:
    """{stage number: its measured passes in start order} of `profile.schedule` ({} if the run kept
    none)."""
    stages = ((profile or {}).get("schedule") or {}).get("stages", {})
    return {int(s): sorted(stages[s], key=lambda t: t["start_s"]) for s in sorted(stages, key=int)}


def _mean(xs: list) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def schedule_stages(profile: dict):
    """Per stage of the measured pipeline schedule (`profile.schedule`), a DataFrame indexed by
    stage: passes, forward_s and backward_s (its mean forward and backward pass), busy_s (its passes
    summed: a stage runs one at a time), span_s (the first pass's start to the last one's end, over
    all stages), idle_share = 1 − busy_s / span_s (the bubble as the step's timeline shows it:
    (p−1)/(v·m+p−1) on equal stages with free sends, theory.bubble_over_step) and order, its passes
    as (kind, micro-batch, chunk): theory.stage_order's form. Empty if the run kept no schedule."""
    import pandas as pd

    stages = _passes(profile)
    every = [t for ts in stages.values() for t in ts]
    if not every:
        return pd.DataFrame()
    span = max(t["end_s"] for t in every) - min(t["start_s"] for t in every)
    rows = {}
    for stage, ts in stages.items():
        took = {k: [t["end_s"] - t["start_s"] for t in ts if t["kind"] == k] for k in "FB"}
        busy = sum(took["F"]) + sum(took["B"])
        rows[stage] = {
            "passes": len(ts),
            "forward_s": _mean(took["F"]),
            "backward_s": _mean(took["B"]),
            "busy_s": busy,
            "span_s": span,
            "idle_share": 1 - busy / span,
            "order": [(t["kind"], t["microbatch"], t["chunk"]) for t in ts],
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("stage")


def schedule_ideal(profile: dict) -> list:
    """The ideal schedule (theory.schedule) of the measured step's p stages, m micro-batches and v
    chunks, each forward and backward pass taking the measured mean over all stages, as
    schedule_tasks rows: the same step with equal stages and free sends, to draw beside the measured
    one."""
    from megalab.theory import schedule

    stages = _passes(profile)
    every = [t for ts in stages.values() for t in ts]
    if not every:
        return []
    m, v = (1 + max(t[k] for t in every) for k in ("microbatch", "chunk"))
    tf, tb = (_mean([t["end_s"] - t["start_s"] for t in every if t["kind"] == k]) for k in "FB")
    return [
        {
            "row": f"stage {t['stage']}",
            "start_s": t["start"],
            "end_s": t["end"],
            "label": t["microbatch"],
            "kind": t["kind"] + (str(t["chunk"]) if v > 1 else ""),
        }
        for t in schedule(len(stages), m, v, tf, tb)
    ]


def schedule_summary(profile: dict) -> dict:
    """One measured pipeline step (`profile.schedule`) in numbers: `busiest`, the stage busy longest
    (it sets the step), with its busy_s and idle_share (schedule_stages); the other stages' least
    and most of each (rest_busy_lo/hi, rest_idle_lo/hi); span_s; span_ideal_s, schedule_ideal's span
    (equal stages, free sends); in_order, whether every stage ran its passes in theory.stage_order's
    order. {} if the run kept no schedule."""
    from megalab.theory import stage_order

    t = schedule_stages(profile)
    if t.empty:
        return {}
    every = [x for ts in _passes(profile).values() for x in ts]
    m, v = (1 + max(x[k] for x in every) for k in ("microbatch", "chunk"))
    busiest = int(t["busy_s"].idxmax())
    rest = t.drop(busiest)
    return {
        "busiest": busiest,
        "busy_s": t.loc[busiest, "busy_s"],
        "idle_share": t.loc[busiest, "idle_share"],
        "rest_busy_lo": rest["busy_s"].min(),
        "rest_busy_hi": rest["busy_s"].max(),
        "rest_idle_lo": rest["idle_share"].min(),
        "rest_idle_hi": rest["idle_share"].max(),
        "span_s": t["span_s"].iloc[0],
        "span_ideal_s": max(x["end_s"] for x in schedule_ideal(profile)),
        "in_order": all(t.loc[s, "order"] == stage_order(len(t), m, v, s) for s in t.index),
    }


def after_last(profile: dict, category: str = "gemm") -> dict:
    """The step's kernels that start after its last kernel of `category` ends (after the last
    backward matrix multiply: the once-a-step work of gradients and optimizer): kernels (count),
    span_ms (from that end to the step's last kernel's end), busy_ms (the union of their
    intervals) and by_kind (kernels per kind)."""
    k = timeline(profile)
    mine = k[k["category"] == category]
    if mine.empty:
        raise ValueError(f"after_last: the profiled step has no {category!r} kernel")
    start = float((mine["start_ms"] + mine["duration_ms"]).max())
    tail = k[k["start_ms"] >= start]
    return {
        "kernels": len(tail),
        "span_ms": float((tail["start_ms"] + tail["duration_ms"]).max() - start)
        if len(tail)
        else 0.0,
        "busy_ms": 1e3 * union_seconds(zip(tail["start_ms"], tail["duration_ms"])),
        "by_kind": tail["category"].value_counts().to_dict(),
    }


def nccl_streams(profile: dict) -> dict:
    """{CUDA stream: ms of NCCL kernels on it} of one profiled step, the busiest stream first: a
    ring's send/recv run on a stream of their own, beside the collectives on the compute stream."""
    k = timeline(profile)
    ms = (
        k[k["category"] == "nccl"]
        .groupby("stream")["duration_ms"]
        .sum()
        .sort_values(ascending=False)
    )
    return {s: float(v) for s, v in ms.items()}


def hidden(profile: dict, stream, behind: Iterable[str] = ("attention",)) -> dict:
    """How much of the NCCL kernels on CUDA stream `stream` (e.g. a ring's send/recv) ran while
    kernels of the kinds `behind` ran: comm_ms (the union of those NCCL kernels' intervals),
    hidden_ms (the part during which a kernel of a kind in `behind` ran, on any stream), exposed_ms
    = comm_ms − hidden_ms, and share = hidden_ms / comm_ms. An NCCL kernel's time includes waiting
    for its peer, so hidden time is time the GPU computed while the transfer was in flight, not a
    transfer rate."""
    k = timeline(profile)
    comm = _merged(
        zip(
            *(
                k.loc[(k["category"] == "nccl") & (k["stream"] == stream), c]
                for c in ("start_ms", "duration_ms")
            )
        )
    )
    work = _merged(
        zip(*(k.loc[k["category"].isin(list(behind)), c] for c in ("start_ms", "duration_ms")))
    )
    both, j = 0.0, 0
    for a, b in comm:  # both lists are sorted and disjoint: one sweep
        while j < len(work) and work[j][1] <= a:
            j += 1
        i = j
        while i < len(work) and work[i][0] < b:
            both += min(b, work[i][1]) - max(a, work[i][0])
            i += 1
    total = sum(b - a for a, b in comm)
    return {
        "comm_ms": total,
        "hidden_ms": both,
        "exposed_ms": total - both,
        "share": both / total if total else 0.0,
    }


def rank_times(profile: dict):
    """Per global rank of a profiled step (a DataFrame indexed by rank): its kernel seconds per step
    by kind (`profile.ranks`, "<kind>_s": attention, gemm, nccl, other) and forward_s and
    backward_s, its forward and backward seconds in the schedule's step
    (`profile.schedule.rank_seconds`, NaN where absent). An NCCL kernel's time includes waiting for
    the peer, so the work a rank does is in its compute kernels, and its forward and backward times
    include waiting for the slowest rank. Empty for records of rank 0 alone."""
    import pandas as pd

    ranks = (profile or {}).get("ranks") or {}
    busy = ((profile or {}).get("schedule") or {}).get("rank_seconds") or []
    rows = {
        int(r): {
            **{f"{kind}_s": float(s) for kind, s in kinds.items()},
            "forward_s": busy[int(r)]["F"] if int(r) < len(busy) else float("nan"),
            "backward_s": busy[int(r)]["B"] if int(r) < len(busy) else float("nan"),
        }
        for r, kinds in ranks.items()
    }
    return pd.DataFrame.from_dict(rows, orient="index").sort_index().rename_axis("rank")
