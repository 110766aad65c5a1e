"""Chapter 01, data parallelism and the distributed optimizer: its runs, by name."""

from __future__ import annotations

from megalab.runs import presets
from megalab.book.specs import GROUP_ITERS, ITERS, PARITY_ITERS, Fit, Group, Parity, degrees


def runs(gpus: int = 4, iters: int = ITERS, gpu: str = "H200") -> dict:
    """gpt2-xl (1.56 B parameters, seq 1024), Transformer Engine spec. mbs 4 unless said otherwise.
    `gpu`: the card the memory searches are sized for (the reference H200, or a reader's own GPU)."""
    base = presets.get("gpt2-xl").replace(iters=iters)
    ds = degrees(gpus)
    top = ds[-1]
    weak = [base.replace(gpus=d, mbs=4, gbs=16 * d) for d in ds]            # 16 sequences per GPU per step
    return {
        "one_gpu": base.replace(mbs=1, gbs=1),
        "fit_mbs": Fit(base.replace(mbs=1, gbs=1), "mbs", gpu),
        "fit_mbs_80gb": Fit(base.replace(mbs=1, gbs=1), "mbs", "H100"),   # the card most readers have
        "accumulation": [base.replace(mbs=4, gbs=4 * k) for k in (1, 2, 4, 8)],
        "weak": weak,
        # scaling where the GPU, not the host's kernel launches, sets the pace (mbs 4 is launch-bound)
        "weak_mbs16": [base.replace(gpus=d, mbs=16, gbs=64 * d) for d in ds],
        "strong": [base.replace(gpus=d, mbs=4, gbs=4 * top) for d in ds],  # one micro-batch per GPU at top
        "overlap": [c.replace(overlap=True) for c in weak if c.dp > 1],
        "dist_opt": [c.replace(dist_opt=True) for c in weak if c.dp > 1],
        "reduce_mbs16": [base.replace(gpus=top, mbs=16, gbs=64 * top, **kw)
                         for kw in ({"overlap": True}, {"dist_opt": True}, {"dist_opt": True, "overlap": True})],
        "fit_mbs_dist_opt": [Fit(base.replace(gpus=d, mbs=1, gbs=d, dist_opt=True), "mbs", gpu) for d in ds[1:]],
        # DP replicates the model state, so without the distributed optimizer DP=N fits what 1 GPU fits
        "fit_layers": Fit(base.replace(mbs=1, gbs=1), "layers", gpu, step=8, width=0.05),
        "fit_layers_dist_opt": Fit(base.replace(gpus=top, mbs=1, gbs=top, dist_opt=True), "layers", gpu,
                                   step=8, width=0.05),
        # DP=top + distributed optimizer against DP=1 with accumulation, same global batch
        "parity": Parity(base.replace(gpus=top, mbs=4, gbs=4 * top, dist_opt=True, iters=PARITY_ITERS)),
        # weak scaling timed on one host, alternated, with CUDA graphs (GPU-bound at mbs 4); the widest profiled
        "groups": {"dp_weak": Group("ch01.dp-weak", [c.replace(iters=GROUP_ITERS, cuda_graphs="te") for c in weak],
                                    profiled=len(weak) - 1)},
    }


# -- the chapter's tables: rows built from the records and theory, worded headers and units ------------------
SEQ_PER_GPU = 16   # the weak-scaling series: sequences per GPU per step


def reduce_cost(cfgs, gpu: str = "H200"):
    """The gradient all-reduce each data-parallel step pays, predicted: one row per DP degree above 1,
    'GB per GPU' (theory: 2 (d-1)/d x 4 bytes per parameter), 'bus GB/s' (chapter 00's best NCCL all-reduce
    over d GPUs) and 'all-reduce (ms)', their quotient."""
    import pandas as pd
    from megalab import theory
    from megalab.machine.bench import best_bus_bandwidth
    rows = []
    for c in cfgs:
        if c.dp > 1:
            nbytes, bw = theory.plan(c, gpu)["comm_bytes_per_step"]["dp"], best_bus_bandwidth("all_reduce", c.dp)
            rows.append({"GPUs": c.dp, "GB per GPU": nbytes / 1e9, "bus GB/s": bw, "all-reduce (ms)": nbytes / bw / 1e6})
    return pd.DataFrame(rows).set_index("GPUs")


def weak_scaling(group, reduce=None):
    """The comparison group ch01.dp-weak (timings.group) as a weak-scaling table, one row per DP degree, fewest
    GPUs first: 'GPUs', 'step (ms)' (median) with its 95% interval 'low (ms)'..'high (ms)', 'tokens per
    second', 'efficiency' (the one-GPU step over this one: the work per GPU is fixed), 'MFU', 'GPU busy' (the
    profiled configuration's share). With `reduce` (reduce_cost): 'predicted step (ms)', the one-GPU step
    plus the all-reduce, and 'predicted efficiency'."""
    import pandas as pd
    df = pd.DataFrame({"GPUs": [c.dp for c in group["cfg"]], "step (ms)": group["median_ms"].to_numpy(),
                       "low (ms)": group["lo_ms"].to_numpy(), "high (ms)": group["hi_ms"].to_numpy(),
                       "tokens": [c.gbs * c.seq for c in group["cfg"]], "MFU": group["mfu"].to_numpy(),
                       "GPU busy": group["gpu_busy"].to_numpy()}).sort_values("GPUs", ignore_index=True)
    if df["GPUs"].iloc[0] != 1:
        raise ValueError("weak scaling needs the one-GPU run as its baseline: the group has none")
    t1 = df["step (ms)"].iloc[0]
    df["tokens per second"] = df.pop("tokens") / df["step (ms)"] * 1e3
    df["efficiency"] = t1 / df["step (ms)"]
    if reduce is not None:
        df["predicted step (ms)"] = t1 + df["GPUs"].map(reduce["all-reduce (ms)"]).fillna(0.0)
        df["predicted efficiency"] = t1 / df["predicted step (ms)"]
    return df


def memory_by_dp(runs, gpu: str = "H200"):
    """Peak memory per GPU against theory, one row per run (megalab.run results): 'GPUs', 'optimizer'
    ('replicated' or 'distributed'), 'measured (GiB)' (PyTorch's reserved peak), 'predicted (GiB)' and
    'error' (measured over predicted, minus 1)."""
    import pandas as pd
    from megalab import theory
    df = pd.DataFrame([{"GPUs": r.config.dp, "optimizer": "distributed" if r.config.dist_opt else "replicated",
                        "measured (GiB)": r.summary["mem_reserved_peak_gib"],
                        "predicted (GiB)": theory.plan(r.config, gpu)["memory_gib"]["total"]} for r in runs])
    df["error"] = df["measured (GiB)"] / df["predicted (GiB)"] - 1
    return df


def memory_bars(measured, predicted_only=(), gpu: str = "H200"):
    """memory_by_dp's rows in long form for charts.grouped_bars: 'GPUs' (a category; configurations in
    `predicted_only` appear as "8 (predicted)"), 'GiB per GPU' and 'bar' ("replicated, measured",
    "distributed, predicted", ...)."""
    import pandas as pd
    from megalab import theory
    rows = [{"GPUs": str(r["GPUs"]), "optimizer": r["optimizer"], "kind": kind, "GiB per GPU": r[f"{kind} (GiB)"]}
            for _, r in measured.iterrows() for kind in ("predicted", "measured")]
    rows += [{"GPUs": f"{c.dp} (predicted)", "optimizer": "distributed" if c.dist_opt else "replicated",
              "kind": "predicted", "GiB per GPU": theory.plan(c, gpu)["memory_gib"]["total"]} for c in predicted_only]
    df = pd.DataFrame(rows)
    df["bar"] = df["optimizer"] + " optimizer, " + df["kind"]
    order = [f"{o} optimizer, {k}" for o in ("replicated", "distributed") for k in ("predicted", "measured")]
    return df.assign(bar=pd.Categorical(df["bar"], order)).sort_values("bar", kind="stable")[["GPUs", "bar", "GiB per GPU"]]


def accumulation_memory(runs, gpu: str = "H200"):
    """Gradient accumulation's memory: one row per run (megalab.run results, one GPU), 'micro-batches' per
    step, 'sequences per step', 'measured (GiB)' (reserved peak) and 'predicted (GiB)'."""
    import pandas as pd
    from megalab import theory
    return pd.DataFrame([{"micro-batches": r.config.num_microbatches, "sequences per step": r.config.gbs,
                          "measured (GiB)": r.summary["mem_reserved_peak_gib"],
                          "predicted (GiB)": theory.plan(r.config, gpu)["memory_gib"]["total"]} for r in runs])


def largest_micro_batch(fits: dict):
    """{(DP degree, 'replicated' or 'distributed'): (Fit, its FitResult)} as a table: 'GPUs', 'optimizer',
    'largest micro-batch' (the search's answer) and 'predicted'."""
    import pandas as pd
    return pd.DataFrame([{"GPUs": dp, "optimizer": opt, "largest micro-batch": result.largest,
                          "predicted": fit.predicted} for (dp, opt), (fit, result) in fits.items()])


def measured_and_predicted(df, x: str):
    """A table with 'measured (GiB)' and 'predicted (GiB)' columns in long form for charts.grouped_bars:
    `x` (as text), 'kind' ('predicted' or 'measured') and 'GiB per GPU'."""
    long = df.melt(id_vars=[x], value_vars=["predicted (GiB)", "measured (GiB)"], var_name="kind",
                   value_name="GiB per GPU")
    return long.assign(**{x: long[x].astype(str), "kind": long["kind"].str.removesuffix(" (GiB)")})


def eager_timings(series: dict):
    """The evidence page's eager runs, one row per run: {series name: [megalab.run results]} as 'series',
    'layout' (frame.describe), 'micro-batch', 'sequences per step', 'step (ms)', 'MFU', 'alone on its host'
    (False where the run shared the host with other jobs). They are no comparison group: each row stands
    alone, with its own host and trainer."""
    import pandas as pd
    from megalab.book.frame import describe
    return pd.DataFrame([{"series": name, "layout": describe(r.config), "micro-batch": r.config.mbs,
                          "sequences per step": r.config.gbs, "step (ms)": 1e3 * r.summary["step_time_s"],
                          "MFU": r.summary["mfu"], "alone on its host": "packed" not in (r.record.get("tags") or ())}
                         for name, runs in series.items() for r in runs])


def parity_curves(parity) -> dict:
    """A ParityResult's curves (charts.loss_parity) named in words: '1 GPU, 4 micro-batches of 4' and the
    layout ('DP 4 + distributed optimizer'); a curve measured here keeps its ' (yours)'."""
    from megalab.book.frame import describe
    cfg = parity.layout.config
    names = [f"1 GPU, {cfg.gbs // cfg.mbs} micro-batches of {cfg.mbs}", describe(cfg)]
    return {name + (" (yours)" if key.endswith(" (yours)") else ""): curve
            for name, (key, curve) in zip(names, parity.curves().items())}
