"""Chapter 01's strong scaling and overlapped gradient reduce, from their comparison groups
(ch01.dp-strong, ch01.overlap) beside what theory predicts: the speed-up over one GPU against a
step of compute divided d ways plus the work that does not divide (the gradient all-reduce and the
optimizer step), and where the time the overlap hides goes, kernel kind by kind.

    from megalab.book.chapters import ch01_scaling
    st = ch01_scaling.strong_scaling(timings.group(None, "ch01.dp-strong", "H200"),
                                     ch01.reduce_cost(ch["strong"]), ch01_scaling.optimizer_ms(cfg))
"""

from __future__ import annotations

from megalab.book import references

__all__ = [
    "optimizer_ms",
    "strong_scaling",
    "overlap_steps",
    "kernels",
    "shift",
    "KINDS",
    "SERIES_DP_URL",
    "SERIES_DP_STEP_MS",
    "series_dp_over",
]

# The vuiseng9/megatron-tutorials series' data-parallel table: GPT-2 XL, seq 1024, eager
# Megatron-LM core_r0.14.0 on one 8×H100 80 GB node, one micro-batch per GPU and step. Copied from
# its table (assets/tbl-101_dp_zero2.png of this commit), not measured here:
# (DP, micro-batch) -> step (ms), rows R1, R2 (micro-batch 1) and R3, R5 (15, the most that fits)
SERIES_DP_URL = references.series("01-dp-zero2.md")
SERIES_DP_STEP_MS = {(1, 1): 220, (4, 1): 250, (1, 15): 393, (4, 15): 421}


def series_dp_over(mbs: int = 15) -> float:
    """How much longer the series' DP 4 step is than its DP 1 step at micro-batch `mbs` (1 or
    15): the weak-scaling cost of data parallelism on its node."""
    if (1, mbs) not in SERIES_DP_STEP_MS:
        raise KeyError(f"the series timed micro-batches 1 and 15, not {mbs}")
    return SERIES_DP_STEP_MS[4, mbs] / SERIES_DP_STEP_MS[1, mbs] - 1

# the kernel kinds of a profiled step as the chapter names them, in the order it draws them
KINDS = {
    "gemm": "GEMMs",
    "attention": "attention",
    "other": "other kernels",
    "exposed": "NCCL alone on the GPU",
    "hidden": "NCCL, beside compute",
}


def optimizer_ms(cfg, gpu: str = "H200", store=None) -> float:
    """The optimizer step of `cfg` predicted, in ms: the HBM bytes it moves (zeroing and norming
    the fp32 gradients, Adam, the bf16 copy: theory.moe.optimizer_bytes_per_step) over the best
    benched HBM copy rate. It does not shrink with the DP degree unless the optimizer is
    distributed."""
    from megalab.predict import step_model

    return 1e3 * step_model.parts(cfg, step_model.Rates.recorded(gpu, store))["optimizer_s"]


def strong_scaling(group, reduce, optimizer: float):
    """The comparison group ch01.dp-strong (timings.group: one global batch on 1, 2, 4 GPUs) as a
    table, fewest GPUs first: 'GPUs', 'step (ms)' and its 95% interval 'interval (ms)', 'speed-up'
    (the one-GPU step over this one), 'efficiency' (speed-up over GPUs), 'MFU', 'GPU busy' (the
    profiled row), 'tokens per second'; 'compute (ms)', the one-GPU step less the optimizer's
    `optimizer` ms, divided by the GPUs; 'predicted step (ms)', that plus the optimizer and the
    all-reduce of `reduce` (ch01_analysis.reduce_cost), and 'predicted speed-up'."""
    import pandas as pd

    from megalab.book.chapters.ch01_analysis import interval_text

    df = pd.DataFrame(
        {
            "GPUs": [c.dp for c in group["cfg"]],
            "step (ms)": group["median_ms"].to_numpy(),
            "interval (ms)": interval_text(group["lo_ms"], group["hi_ms"]),
            "MFU": group["mfu"].to_numpy(),
            "GPU busy": group["gpu_busy"].to_numpy(),
            "tokens": [c.gbs * c.seq for c in group["cfg"]],
        }
    ).sort_values("GPUs", ignore_index=True)
    if df["GPUs"].iloc[0] != 1 or df["tokens"].nunique() != 1:
        raise ValueError("strong scaling needs one global batch and the one-GPU run as baseline")
    t1 = df["step (ms)"].iloc[0]
    df["tokens per second"] = df.pop("tokens") / df["step (ms)"] * 1e3
    df["speed-up"] = t1 / df["step (ms)"]
    df["efficiency"] = df["speed-up"] / df["GPUs"]
    df["compute (ms)"] = (t1 - optimizer) / df["GPUs"]
    ar = df["GPUs"].map(reduce["all-reduce (ms)"]).fillna(0.0)
    df["predicted step (ms)"] = df["compute (ms)"] + optimizer + ar
    df["predicted speed-up"] = t1 / df["predicted step (ms)"]
    df["predicted efficiency"] = df["predicted speed-up"] / df["GPUs"]
    return df


def overlap_steps(group):
    """The comparison group ch01.overlap (timings.group) as one row per layout, the reduce waiting
    for the backward first: 'layout' (frame.describe), 'overlap' (bool), 'step (ms)', its 95%
    interval 'low (ms)'..'high (ms)' and in words 'interval (ms)', 'MFU', 'GPU busy', and 'saved'
    (one minus this step over the first row's)."""
    import pandas as pd

    from megalab.book.chapters.ch01_analysis import interval_text
    from megalab.book.frame import describe

    df = pd.DataFrame(
        {
            "layout": [describe(c) for c in group["cfg"]],
            "overlap": [c.overlap for c in group["cfg"]],
            "step (ms)": group["median_ms"].to_numpy(),
            "low (ms)": group["lo_ms"].to_numpy(),
            "high (ms)": group["hi_ms"].to_numpy(),
            "interval (ms)": interval_text(group["lo_ms"], group["hi_ms"]),
            "MFU": group["mfu"].to_numpy(),
            "GPU busy": group["gpu_busy"].to_numpy(),
        }
    ).sort_values("overlap", ignore_index=True)
    if list(df["overlap"]) != [False, True]:
        raise ValueError("the overlap group holds one layout without and one with the overlap")
    df["saved"] = 1 - df["step (ms)"] / df["step (ms)"].iloc[0]
    return df


def kernels(profiled: dict):
    """{name: a record's profile} as kernel milliseconds of one profiled step per kind, long form
    for charts.grouped_bars: 'kernels' (KINDS' words), 'layout' (the name) and 'ms'. NCCL time is
    split by whether a GEMM, attention or other kernel ran beside it (profiles.hidden, every NCCL
    stream): 'beside compute' is communication the overlap hid, if the compute beside it did not
    slow down."""
    import pandas as pd

    from megalab.records import profiles

    rows = []
    for name, profile in profiled.items():
        ms = profiles.by_kind(profile)["kernel_ms"]
        split = [
            profiles.hidden(profile, s, behind=("gemm", "attention", "other"))
            for s in profiles.nccl_streams(profile)
        ]
        ms = {
            **{k: float(ms.get(k, 0.0)) for k in ("gemm", "attention", "other")},
            "exposed": sum(h["exposed_ms"] for h in split),
            "hidden": sum(h["hidden_ms"] for h in split),
        }
        rows += [{"kernels": KINDS[k], "layout": name, "ms": v} for k, v in ms.items()]
    return pd.DataFrame(rows)


def shift(kernels_df) -> dict:
    """What changed from the first layout of `kernels_df` (kernels) to the second: 'exposed_cut_ms',
    the fall in NCCL time with no compute beside it, and 'compute_slower_ms', the rise in GEMM,
    attention and other kernel time. Their difference is what the overlap should save per step."""
    ms = kernels_df.pivot(index="kernels", columns="layout", values="ms")
    before, after = list(dict.fromkeys(kernels_df["layout"]))[:2]
    compute = ms.loc[[KINDS[k] for k in ("gemm", "attention", "other")]].sum()
    exposed = ms.loc[KINDS["exposed"]]
    return {
        "exposed_cut_ms": float(exposed[before] - exposed[after]),
        "compute_slower_ms": float(compute[after] - compute[before]),
    }
