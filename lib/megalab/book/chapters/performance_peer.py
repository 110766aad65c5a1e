"""The performance page's fair pair: this trainer against Megatron-LM's pretrain_gpt.py in one
comparison group (performance_runs.PEER_GROUP: one host, alternated, the weight-gradient
accumulation fusion equal on both sides).

    g = pair.peer_group(None, "H200")      # the group, only runs with the fusion equal on both sides
    pair.peer_pair(g)                      # per launch mode: ours / peer and intervals
    pair.peer_figure(g)                    # both sides' medians and run medians, per launch mode
    pair.peer_runs(None, "H200")           # the pair's runs one by one, in order
    pair.peer_losses(runs)                 # each side's loss curve, per launch mode
"""

from __future__ import annotations

__all__ = ["SIDES", "LAUNCHES", "peer_group", "peer_pair", "peer_figure", "peer_runs", "peer_losses"]

SIDES = {"megalab": "this trainer", "megatron-lm": "Megatron-LM"}  # RunConfig.runner -> words
LAUNCHES = {"none": "eager", "te": "CUDA graphs", "local": "CUDA graphs (Megatron Core)"}


def peer_group(store, gpu_model: str):
    """The fair pair's comparison group (performance_runs.PEER_GROUP) on `gpu_model`, read as
    timings.group reads it but only from runs with the weight-gradient accumulation fusion equal on
    both sides (peer.fusion_equal): a recording of the tag with the fusion on one side only is never
    read, however new. LookupError unless both sides ran in every launch mode recorded."""
    from megalab.book.chapters.performance_runs import PEER_GROUP
    from megalab.jobs.peer import fusion_equal
    from megalab.records import timings

    g = timings.group(store, PEER_GROUP, gpu_model, where=fusion_equal)
    have = {(c.runner, c.cuda_graphs) for c in g["cfg"]}
    missing = {(r, m) for r in SIDES for _, m in have} - have
    if missing:
        raise LookupError(
            f"{PEER_GROUP} lacks {', '.join(sorted(f'{r} {m}' for r, m in missing))}: record "
            "both sides in each launch mode (megalab experiments performance)"
        )
    return g


def peer_pair(g):
    """One row per launch mode of the fair pair (peer_group): launch; ours_ms, ours_lo, ours_hi and
    peer_ms, peer_lo, peer_hi (each side's median step and its 95% interval); ratio (ours / peer)
    with ratio_lo (our interval's low end over theirs' high end) to ratio_hi (the reverse), which
    holds the ratio whenever both medians' intervals hold theirs; less (1 - ratio: the share of
    Megatron-LM's step time ours does not take), less_lo, less_hi; ours_runs and peer_runs (each
    run's median); apart (every run of one side faster than every run of the other); ours_mfu,
    peer_mfu; ours_busy (our profiled step's GPU-busy share, NaN where not profiled)."""
    import pandas as pd

    rows = []
    for mode in dict.fromkeys(c.cuda_graphs for c in g["cfg"]):
        side = {c.runner: row for (_, row), c in zip(g.iterrows(), g["cfg"]) if c.cuda_graphs == mode}
        ours, peer = side["megalab"], side["megatron-lm"]
        ratio = ours["median_ms"] / peer["median_ms"]
        lo, hi = ours["lo_ms"] / peer["hi_ms"], ours["hi_ms"] / peer["lo_ms"]
        rows.append(
            {
                "launch": LAUNCHES[mode],
                **{f"ours_{k}": ours[f"{k}_ms"] for k in ("median", "lo", "hi")},
                **{f"peer_{k}": peer[f"{k}_ms"] for k in ("median", "lo", "hi")},
                "ratio": ratio,
                "ratio_lo": lo,
                "ratio_hi": hi,
                "less": 1 - ratio,
                "less_lo": 1 - hi,
                "less_hi": 1 - lo,
                "ours_runs": list(ours["run_ms"]),
                "peer_runs": list(peer["run_ms"]),
                "apart": max(ours["run_ms"]) < min(peer["run_ms"])
                or min(ours["run_ms"]) > max(peer["run_ms"]),
                "ours_mfu": ours["mfu"],
                "peer_mfu": peer["mfu"],
                "ours_busy": ours["gpu_busy"],
            }
        )
    out = pd.DataFrame(rows)
    return out.rename(columns={"ours_median": "ours_ms", "peer_median": "peer_ms"})


def peer_figure(g, title: str = "gpt-1.2b, TP 2: this trainer and Megatron-LM, one host"):
    """The fair pair (peer_group) as bars: each side's median step per launch mode, with its 95%
    interval."""
    import pandas as pd

    from megalab import charts

    long = pd.DataFrame(
        {
            "launch": [LAUNCHES[c.cuda_graphs] for c in g["cfg"]],
            "side": [SIDES[c.runner] for c in g["cfg"]],
            "median_ms": g["median_ms"].to_numpy(),
            "lo_ms": g["lo_ms"].to_numpy(),
            "hi_ms": g["hi_ms"].to_numpy(),
        }
    )
    return charts.grouped_bars(
        long,
        "launch",
        "median_ms",
        color="side",
        title=title,
        y_title="ms per step (median, 95% interval)",
        text_format=".1f",
        interval=("lo_ms", "hi_ms"),
    )


def peer_runs(store, gpu_model: str):
    """The fair pair's runs one by one, in the order they ran (the profiled one last): run (1, 2,
    ...), side, launch, median_ms (the run's median step after warm-up), mfu, loss_first,
    loss_last, profiled; attrs: records, the run records in that order."""
    import numpy as np
    import pandas as pd

    from megalab import theory
    from megalab.book.chapters.performance_runs import PEER_GROUP
    from megalab.jobs.peer import fusion_equal
    from megalab.records import timings
    from megalab.runs.config import RunConfig

    timed, profiled = timings.group_runs(store, PEER_GROUP, gpu_model, where=fusion_equal)
    runs = timed + ([(RunConfig.from_dict(profiled["config"]), profiled)] if profiled else [])
    rows = []
    for i, (c, r) in enumerate(runs):
        ms = float(np.median(timings.steps_ms(r)))
        rows.append(
            {
                "run": i + 1,
                "side": SIDES[c.runner],
                "launch": LAUNCHES[c.cuda_graphs],
                "median_ms": ms,
                "mfu": theory.mfu(c, ms / 1e3, gpu_model),
                "loss_first": r["summary"]["loss_first"],
                "loss_last": r["summary"]["loss_last"],
                "profiled": r is profiled,
            }
        )
    out = pd.DataFrame(rows)
    out.attrs["records"] = [r for _, r in runs]
    return out


def peer_losses(runs) -> dict:
    """{name: {"step", "loss"}} for charts.loss_parity: each side's loss curve, from its first run
    in each launch mode of `runs` (peer_runs), named by side and launch."""
    out = {}
    for (_, row), r in zip(runs.iterrows(), runs.attrs["records"]):
        name = f"{row['side']}, {row['launch']}"
        if name not in out:
            out[name] = {"step": list(r["series"]["step"]), "loss": list(r["series"]["loss"])}
    return out
