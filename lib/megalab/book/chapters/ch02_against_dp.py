"""Chapter 02's TP against data parallelism at equal memory use: the comparison group
`ch02.tp-vs-dp` (DP with the distributed optimizer, and each TP layout at the largest micro-batch
theory fits within DP's memory per GPU, at one global batch, with CUDA graphs) as one table, where
the widest TP's profiled step goes, and which models fit only with TP.

    g = timings.group(None, "ch02.tp-vs-dp", "H200")  # medians, 95% intervals: one host, runs alone
    ch02_against_dp.table(g, results)       # per layout: step, tokens/s, MFU, memory, bytes sent
    ch02_against_dp.split(profile)          # the profiled step: compute kernels against NCCL's
    ch02_against_dp.fits("gpt-22b", 4)      # predicted memory per GPU: DP + distributed optimizer
                                            # against TP, at micro-batch 1
"""

from __future__ import annotations

__all__ = ["TOO_BIG", "label", "table", "split", "fits"]

TOO_BIG = "gpt-22b"  # the model chapter 3 trains on TP 4: DP alone cannot hold it on 4 H200s


def label(cfg) -> str:
    """'TP 2 × DP 2 + distributed optimizer, micro-batch 12': the layout in words and the
    micro-batch it runs at."""
    from megalab.book.chapters.ch02_analysis import layout

    return f"{layout(cfg)}, micro-batch {cfg.mbs}"


def table(g, results=(), busbw: dict | None = None):
    """Group `g` (timings.group of ch02.tp-vs-dp), one row per layout, DP first: layout (label),
    tp, mbs, median_ms, lo_ms, hi_ms, interval (in words), tokens_s (the global batch's tokens over
    the median step), mfu, gib (theory's memory per GPU), measured_gib (peak reserved of the run of
    `results`, Results, with that configuration; without them, the group's own runs' peak_gib),
    tp_gb and dp_gb (GB each GPU sends per step in TP all-reduces of activations, and in DP's
    gradient reduction and weight gathering), tp_ms (the TP bytes over the all-reduce bus bandwidth:
    ch02_analysis.predicted). attrs: budget_gib (the DP row's theory memory), gpu_busy and profiled
    (g's)."""
    import numpy as np

    from megalab import theory
    from megalab.book.chapters.ch01_analysis import interval_text
    from megalab.book.chapters.ch02_analysis import predicted
    from megalab.records.timings import loose_key

    rows = g.assign(tp=[c.tp for c in g["cfg"]]).sort_values("tp", kind="stable")
    cfgs = list(rows["cfg"])
    peaks = {loose_key(r.config): r.summary.get("mem_reserved_peak_gib") for r in results}
    out = predicted(cfgs, busbw)[["gib", "tp_gb", "tp_ms"]]
    out.insert(0, "layout", [label(c) for c in cfgs])
    out.insert(1, "tp", [c.tp for c in cfgs])
    out.insert(2, "mbs", [c.mbs for c in cfgs])
    out["median_ms"] = rows["median_ms"].to_numpy()
    out["lo_ms"] = rows["lo_ms"].to_numpy()
    out["hi_ms"] = rows["hi_ms"].to_numpy()
    out["interval"] = interval_text(out["lo_ms"], out["hi_ms"])
    out["tokens_s"] = [c.gbs * c.seq / (ms / 1e3) for c, ms in zip(cfgs, out["median_ms"])]
    out["mfu"] = rows["mfu"].to_numpy()
    own = rows["peak_gib"] if "peak_gib" in rows else [np.nan] * len(cfgs)
    out["measured_gib"] = [peaks.get(loose_key(c), p) for c, p in zip(cfgs, own)]
    out["dp_gb"] = [theory.comm_bytes_per_step(c)["dp"] / 1e9 for c in cfgs]
    out.attrs.update(
        budget_gib=float(out["gib"].iloc[0]),
        gpu_busy=g.attrs.get("gpu_busy"),
        profiled=g.attrs.get("profiled"),
    )
    return out.reset_index(drop=True)


def split(profile: dict) -> dict:
    """One profiled step's GPU time (a record's `profile`): compute_ms, the time at least one
    kernel other than NCCL's ran (overlaps counted once), and nccl_ms, the NCCL kernels' total."""
    from megalab.records.profiles import timeline, union_seconds

    k = timeline(profile)
    compute = k.loc[k["category"] != "nccl", ["start_ms", "duration_ms"]]
    return {
        "compute_ms": 1e3 * union_seconds(compute.itertuples(index=False)),
        "nccl_ms": float(k.loc[k["category"] == "nccl", "duration_ms"].sum()),
    }


def fits(name: str = TOO_BIG, gpus: int = 4, gpu: str = "H200"):
    """Theory's memory per GPU of preset `name` on `gpus` GPUs at micro-batch 1: DP with the
    distributed optimizer (its weights and gradients whole on every GPU) against TP over all of
    them (everything split but the activations at the layer boundaries). Rows: layout, gib, fits
    (within `gpu`'s memory)."""
    import pandas as pd

    from megalab import theory
    from megalab.book.chapters.ch02_analysis import layout
    from megalab.runs import presets

    base = presets.get(name).replace(gpus=gpus, mbs=1, gbs=gpus)
    cfgs = [base.replace(dist_opt=True), base.replace(tp=gpus)]
    mem = [theory.memory(c, gpu) for c in cfgs]
    return pd.DataFrame(
        {
            "layout": [layout(c) for c in cfgs],
            "gib": [m["total"] for m in mem],
            "fits": [bool(m["fits"]) for m in mem],
        }
    )
