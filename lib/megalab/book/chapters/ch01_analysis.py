"""Chapter 01's tables, built from its records and theory with worded headers and units: weak
scaling from the comparison group ch01.dp-weak beside the predicted all-reduce, memory per DP degree
against theory, gradient accumulation's memory, the largest micro-batch, the parity curves in words,
and the evidence page's runs.

    from megalab.book.chapters import ch01_analysis as ch01
    ch01.weak_scaling(timings.group(None, "ch01.dp-weak", "H200"), ch01.reduce_cost(ch["weak"]))
"""

from __future__ import annotations

__all__ = [
    "SHOWN",
    "show",
    "reduce_cost",
    "weak_scaling",
    "memory_by_dp",
    "memory_bars",
    "accumulation_memory",
    "largest_micro_batch",
    "measured_and_predicted",
    "parity_curves",
    "eager_timings",
    "group_runs_table",
    "every_run",
]


def reduce_cost(cfgs, gpu: str = "H200"):
    """The gradient all-reduce each data-parallel step pays, predicted: one row per DP degree above
    1, 'GB per GPU' (theory: 2 (d-1)/d x 4 bytes per parameter), 'bus GB/s' (chapter 00's best NCCL
    all-reduce over d GPUs) and 'all-reduce (ms)', their quotient."""
    import pandas as pd
    from megalab import theory
    from megalab.jobs.bench import best_bus_bandwidth

    rows = []
    for c in cfgs:
        if c.dp > 1:
            nbytes, bw = (
                theory.plan(c, gpu)["comm_bytes_per_step"]["dp"],
                best_bus_bandwidth("all_reduce", c.dp),
            )
            rows.append(
                {
                    "GPUs": c.dp,
                    "GB per GPU": nbytes / 1e9,
                    "bus GB/s": bw,
                    "all-reduce (ms)": nbytes / bw / 1e6,
                }
            )
    return pd.DataFrame(rows).set_index("GPUs")


def weak_scaling(group, reduce=None):
    """The comparison group ch01.dp-weak (timings.group) as a weak-scaling table, one row per DP
    degree, fewest GPUs first: 'GPUs', 'step (ms)' (median) with its 95% interval 'low (ms)'..'high
    (ms)' and in words 'interval (ms)' ("101.2 – 101.9"), 'tokens per second', 'efficiency' (the
    one-GPU step over this one: the work per GPU is fixed), 'MFU', 'GPU busy' (the profiled
    configuration's share). With `reduce` (reduce_cost): 'predicted step (ms)', the one-GPU step
    plus the all-reduce, and 'predicted efficiency'."""
    import pandas as pd

    df = pd.DataFrame(
        {
            "GPUs": [c.dp for c in group["cfg"]],
            "step (ms)": group["median_ms"].to_numpy(),
            "low (ms)": group["lo_ms"].to_numpy(),
            "high (ms)": group["hi_ms"].to_numpy(),
            "tokens": [c.gbs * c.seq for c in group["cfg"]],
            "MFU": group["mfu"].to_numpy(),
            "GPU busy": group["gpu_busy"].to_numpy(),
        }
    ).sort_values("GPUs", ignore_index=True)
    if df["GPUs"].iloc[0] != 1:
        raise ValueError("weak scaling needs the one-GPU run as its baseline: the group has none")
    t1 = df["step (ms)"].iloc[0]
    df["tokens per second"] = df.pop("tokens") / df["step (ms)"] * 1e3
    df["efficiency"] = t1 / df["step (ms)"]
    df["interval (ms)"] = interval_text(df["low (ms)"], df["high (ms)"])
    if reduce is not None:
        df["predicted step (ms)"] = t1 + df["GPUs"].map(reduce["all-reduce (ms)"]).fillna(0.0)
        df["predicted efficiency"] = t1 / df["predicted step (ms)"]
    return df


def memory_by_dp(runs, gpu: str = "H200"):
    """Peak memory per GPU against theory, one row per run (megalab.run results): 'GPUs',
    'optimizer' ('replicated' or 'distributed'), 'measured (GiB)' (the peak PyTorch allocated to
    tensors: what theory counts), 'reserved (GiB)' (the allocator's peak, a few GiB above: what
    decides out-of-memory), 'predicted (GiB)' and 'error' (measured over predicted, minus 1)."""
    import pandas as pd
    from megalab import theory

    df = pd.DataFrame(
        [
            {
                "GPUs": r.config.dp,
                "optimizer": "distributed" if r.config.dist_opt else "replicated",
                "measured (GiB)": r.summary["mem_allocated_peak_gib"],
                "reserved (GiB)": r.summary["mem_reserved_peak_gib"],
                "predicted (GiB)": theory.plan(r.config, gpu)["memory_gib"]["total"],
            }
            for r in runs
        ]
    )
    df["error"] = df["measured (GiB)"] / df["predicted (GiB)"] - 1
    return df


def memory_bars(measured, predicted_only=(), gpu: str = "H200"):
    """memory_by_dp's rows in long form for charts.grouped_bars: 'GPUs' (a category; configurations
    in `predicted_only` appear as "8 (predicted)"), 'GiB per GPU' and 'bar' ("replicated, measured",
    "distributed, predicted", ...)."""
    import pandas as pd
    from megalab import theory

    rows = [
        {
            "GPUs": str(r["GPUs"]),
            "optimizer": r["optimizer"],
            "kind": kind,
            "GiB per GPU": r[f"{kind} (GiB)"],
        }
        for _, r in measured.iterrows()
        for kind in ("predicted", "measured")
    ]
    rows += [
        {
            "GPUs": f"{c.dp} (predicted)",
            "optimizer": "distributed" if c.dist_opt else "replicated",
            "kind": "predicted",
            "GiB per GPU": theory.plan(c, gpu)["memory_gib"]["total"],
        }
        for c in predicted_only
    ]
    df = pd.DataFrame(rows)
    df["bar"] = df["optimizer"] + " optimizer, " + df["kind"]
    order = [
        f"{o} optimizer, {k}"
        for o in ("replicated", "distributed")
        for k in ("predicted", "measured")
    ]
    return df.assign(bar=pd.Categorical(df["bar"], order)).sort_values("bar", kind="stable")[
        ["GPUs", "bar", "GiB per GPU"]
    ]


def accumulation_memory(runs, gpu: str = "H200"):
    """Gradient accumulation's memory: one row per run (megalab.run results, one GPU),
    'micro-batches' per step, 'sequences per step', 'measured (GiB)' (allocated peak, as
    memory_by_dp) and 'predicted (GiB)'."""
    import pandas as pd
    from megalab import theory

    return pd.DataFrame(
        [
            {
                "micro-batches": r.config.num_microbatches,
                "sequences per step": r.config.gbs,
                "measured (GiB)": r.summary["mem_allocated_peak_gib"],
                "predicted (GiB)": theory.plan(r.config, gpu)["memory_gib"]["total"],
            }
            for r in runs
        ]
    )


def largest_micro_batch(fits: dict):
    """{(DP degree, 'replicated' or 'distributed'): (Fit, its FitResult)} as a table: 'GPUs',
    'optimizer', 'largest micro-batch' (the search's answer) and 'predicted'."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "GPUs": dp,
                "optimizer": opt,
                "largest micro-batch": result.largest,
                "predicted": fit.predicted,
            }
            for (dp, opt), (fit, result) in fits.items()
        ]
    )


def measured_and_predicted(df, x: str):
    """A table with 'measured (GiB)' and 'predicted (GiB)' columns in long form for
    charts.grouped_bars: `x` (as text), 'kind' ('predicted' or 'measured') and 'GiB per GPU'."""
    long = df.melt(
        id_vars=[x],
        value_vars=["predicted (GiB)", "measured (GiB)"],
        var_name="kind",
        value_name="GiB per GPU",
    )
    return long.assign(**{x: long[x].astype(str), "kind": long["kind"].str.removesuffix(" (GiB)")})


def eager_timings(series: dict):
    """The evidence page's eager runs, one row per run: {series name: [megalab.run results]} as
    'series', 'layout' (frame.describe), 'micro-batch', 'sequences per step', 'step (ms)', 'MFU',
    'alone on its host' ('no' where the run shared the host with other jobs). They are no comparison
    group: each row stands alone, with its own host and trainer."""
    import pandas as pd
    from megalab.book.frame import describe

    return pd.DataFrame(
        [
            {
                "series": name,
                "layout": describe(r.config),
                "micro-batch": r.config.mbs,
                "sequences per step": r.config.gbs,
                "step (ms)": 1e3 * r.summary["step_time_s"],
                "MFU": r.summary["mfu"],
                "alone on its host": _alone(r.record),
            }
            for name, runs in series.items()
            for r in runs
        ]
    )


def parity_curves(parity) -> dict:
    """A ParityResult's curves (charts.loss_parity) named in words: '1 GPU, 4 micro-batches of 4'
    and the layout ('DP 4 + distributed optimizer'); a curve measured here keeps its ' (yours)'."""
    from megalab.book.frame import describe

    cfg = parity.layout.config
    names = [f"1 GPU, {cfg.gbs // cfg.mbs} micro-batches of {cfg.mbs}", describe(cfg)]
    return {
        name + (" (yours)" if key.endswith(" (yours)") else ""): curve
        for name, (key, curve) in zip(names, parity.curves().items())
    }


def interval_text(lo, hi, digits: int = 1) -> list[str]:
    """Intervals in words, one per pair of `lo` and `hi`: "101.2 – 101.9"."""
    return [f"{a:.{digits}f} – {b:.{digits}f}" for a, b in zip(lo, hi)]


def parity_difference(curves: dict, band: float, title: str):
    """The loss parity as a difference (charts.loss_difference): every curve of `curves`
    (parity_curves) after the first, minus the first (the one-GPU reference), per step, inside the
    ±band ribbon it must stay in."""
    from megalab import charts

    return charts.loss_difference(curves, band, title)


def group_runs_table(group):
    """The comparison group's runs (timings.group) for the evidence page, one row per layout:
    'layout' (frame.describe), 'runs', 'each run (ms)' (each run's median step, in the order they
    ran), 'median (ms)' and '95% interval (±%)' (the half-width of the median's interval), 'GPU
    busy' (the profiled one)."""
    import pandas as pd
    from megalab.book.frame import describe

    return pd.DataFrame(
        {
            "layout": [describe(c) for c in group["cfg"]],
            "runs": group["runs"].to_numpy(),
            "each run (ms)": [", ".join(f"{ms:.1f}" for ms in runs) for runs in group["run_ms"]],
            "median (ms)": group["median_ms"].to_numpy(),
            "95% interval (±%)": 100 * group["half"].to_numpy(),
            "GPU busy": group["gpu_busy"].to_numpy(),
        }
    )


def every_run(cfgs, gpu: str = "H200", store=None):
    """Every clean recorded run of `cfgs` on `gpu` (not profiled), for the evidence page: one row
    per run, 'layout', 'sequences per step', 'step (ms)' (its median step), 'alone on its host',
    'trainer revision'. Repeats of one eager configuration show how far apart two runs of it
    land."""
    import pandas as pd
    from megalab.book.frame import describe
    from megalab.records import trainer_revision
    from megalab.records.store import as_store

    rows = [
        {
            "layout": describe(c),
            "sequences per step": c.gbs,
            "step (ms)": 1e3 * r["summary"]["step_time_s"],
            "alone on its host": _alone(r),
            "trainer revision": trainer_revision(r),
        }
        for c in cfgs
        for r in reversed(as_store(store).find(c, status="ok", gpu_model=gpu, profiled=False))
    ]
    return pd.DataFrame(rows)


def _alone(record) -> str:
    """'yes' for a run alone on its host, 'no' for one that shared it with other jobs."""
    return "no" if "packed" in (record.get("tags") or ()) else "yes"


# -- the tables as shown: each kind's columns, in order, with their headers (frame.table)
# ------------------
SHOWN = {
    "reduce": (
        {
            "GPUs": "GPUs",
            "GB per GPU": "Bytes per GPU (GB)",
            "bus GB/s": "Bus bandwidth (GB/s)",
            "all-reduce (ms)": "All-reduce (ms)",
        },
        {},
    ),
    "weak": (
        {
            "GPUs": "GPUs",
            "step (ms)": "Step, median (ms)",
            "interval (ms)": "95% interval (ms)",
            "efficiency": ("Efficiency (%)", 100),
            "predicted efficiency": ("Predicted efficiency (%)", 100),
            "MFU": ("MFU (%)", 100),
        },
        {"Step, median (ms)": 1},
    ),
    "strong": (
        {
            "GPUs": "GPUs",
            "step (ms)": "Step, median (ms)",
            "interval (ms)": "95% interval (ms)",
            "speed-up": "Speed-up over one GPU",
            "predicted speed-up": "Predicted speed-up",
            "MFU": ("MFU (%)", 100),
        },
        {"Step, median (ms)": 1, "Speed-up over one GPU": 2, "Predicted speed-up": 2},
    ),
    "fits": (
        {
            "GPUs": "GPUs",
            "optimizer": "Optimizer",
            "largest micro-batch": "Largest micro-batch, searched",
            "predicted": "Predicted",
        },
        {},
    ),
    "group": (
        {
            "layout": "Layout",
            "runs": "Runs",
            "each run (ms)": "Each run (ms)",
            "median (ms)": "Median step (ms)",
            "95% interval (±%)": "95% interval (±%)",
            "GPU busy": ("GPU busy (%)", 100),
        },
        {"Median step (ms)": 1, "95% interval (±%)": 2},
    ),
    "every_run": (
        {
            "layout": "Layout",
            "sequences per step": "Sequences per step",
            "step (ms)": "Step (ms)",
            "alone on its host": "Alone on its host",
        },
        {"Step (ms)": 0},
    ),
    "eager": (
        {
            "series": "Series",
            "layout": "Layout",
            "micro-batch": "Micro-batch",
            "sequences per step": "Sequences per step",
            "step (ms)": "Step (ms)",
            "MFU": ("MFU (%)", 100),
            "alone on its host": "Alone on its host",
        },
        {"Step (ms)": 0, "MFU (%)": 0},
    ),
}


def show(df, kind: str):
    """df as the chapter shows a table of `kind` (a key of SHOWN): worded headers with units,
    rounded, index hidden (frame.table)."""
    from megalab.book.frame import table

    columns, digits = SHOWN[kind]
    return table(df.reset_index() if df.index.name in columns else df, columns, digits)
