"""Chapter 06's tables: theory's memory and bytes per layout, the comparison group `ch06.ep` beside
the vuiseng9/megatron-tutorials series, and what the routing records say.

    ch06_analysis.predicted(models, "H200")       # parameters, FLOPs and memory by part, per model
    ch06_analysis.memory(results, models, "H200") # measured peak against theory
    ch06_analysis.layouts(cfgs, "H200", bw)       # memory and bytes per GPU per step of each layout
    g = timings.group(None, "ch06.ep", "H200")    # medians, 95% intervals: one host, runs alone
    ch06_analysis.ep_group(g)                     # layouts in words, speed-up over DP, MFU
    ch06_analysis.series()                        # the series' two runs: DP 8 + ZeRO, EP 8 on H100
    ch06_analysis.beside_series(ep_group(g))      # speed-ups over the distributed optimizer, both
    ch06_analysis.micro_batches(runs)             # one GPU: step and MFU per micro-batch size
    ch06_analysis.run_rows(runs, "H200")          # the evidence page: one row per earlier run
    ch06_analysis.fits(found, specs)              # the largest expert count, measured and predicted
    ch06_analysis.step_imbalance(records)         # busiest expert over the mean, per step
    ch06_analysis.over_steps(record)              # one step at a time, and all steps summed
    ch06_analysis.summed_heatmaps(records, title) # each expert's tokens over the steps, per policy
    ch06_analysis.worded(fig)                     # legend in words, room for wrapped tick labels
    ch06_analysis.random_router(32768, 64, 8)     # a random router's busiest expert over the mean
    ch06_analysis.at_init(record, cfg)            # step 0 per layer against a random router

The routing measure is the busiest expert's token copies over the mean per expert (1.0 balanced;
with top-k of E experts at most E / k, when every token picks that expert).
"""

from __future__ import annotations

__all__ = [
    "SERIES",
    "SERIES_URL",
    "SERIES_MS",
    "layout",
    "predicted",
    "memory",
    "layouts",
    "ep_group",
    "aux_group",
    "routing_cost",
    "beside_series",
    "micro_batches",
    "run_rows",
    "parity_curves",
    "fits",
    "series_configs",
    "series",
    "expert_weight_ratio",
    "step_imbalance",
    "recovery",
    "routing_name",
    "over_steps",
    "hot_experts",
    "routing_heatmap",
    "summed_heatmaps",
    "worded",
    "expected_max_normal",
    "multinomial_max_over_mean",
    "random_router",
    "at_init",
]

# loss curves named in words ("1 GPU", "EP 4"), as chapter 2 names its TP sizes
from megalab.book.chapters.ch02_analysis import parity_curves  # noqa: E402, F401

SERIES = "vuiseng9/megatron-tutorials"
SERIES_URL = "https://github.com/vuiseng9/megatron-tutorials/blob/main/05-ep-moe.md"
# its runs R1 and R2: OLMoE's shape with Megatron-LM's defaults (GELU, LayerNorm, learned
# positions), 8 H100s, micro-batch 4, global batch 32, sequences of 4096, forced balance; step ms
SERIES_MS = {"DP 8 + distributed optimizer": 337.0, "EP 8": 256.0}
SERIES_GPU = "H100"
SERIES_NAME = "vuiseng9/megatron-tutorials: 8 H100s, GELU"
MEASURED = "measured: 2 H200s, SwiGLU"


def layout(cfg) -> str:
    """'EP 2, allgather dispatcher': the layout in words (frame.describe), CUDA graphs left unsaid
    (every timed run of the chapter has them)."""
    from megalab.book.frame import describe

    return describe(cfg.replace(cuda_graphs="none"))


def predicted(models: dict, gpu: str):
    """Per model (name -> RunConfig): params_b and active_b (billions), tflop (model TFLOP per
    step) and theory's memory per GPU by part (moe.memory_by_part: dense state, expert state,
    activations, total, capacity, fits)."""
    import pandas as pd

    from megalab import theory
    from megalab.theory import moe

    rows = {
        name: {
            "params_b": theory.params(c)["total"] / 1e9,
            "active_b": theory.params(c)["active"] / 1e9,
            "tflop": theory.model_flops(c) / 1e12,
            **moe.memory_by_part(c, gpu),
        }
        for name, c in models.items()
    }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("model").reset_index()


def memory(results: dict, gpu: str):
    """Per run (name -> results.Result): status, measured_gib (reserved peak), predicted_gib
    (theory) and error (measured over predicted, less 1)."""
    import pandas as pd

    from megalab.theory import moe

    rows = []
    for name, r in results.items():
        pred = moe.memory_by_part(r.config, gpu)["total"]
        got = r.summary.get("mem_reserved_peak_gib")
        rows.append(
            {
                "model": name,
                "status": r.status,
                "measured_gib": got,
                "predicted_gib": pred,
                "error": got / pred - 1 if got else None,
            }
        )
    return pd.DataFrame(rows)


def layouts(cfgs: dict, gpu: str, bw: dict):
    """Theory per layout (name -> RunConfig): memory per GPU by part, grad_gb and token_gb (GB each
    GPU sends per step for the gradients and for the tokens), grad_ms and token_ms (those at the
    bus bandwidths `bw` {collective: GB/s}: all-reduce for the gradients, reduce-scatter plus
    all-gather with the distributed optimizer, all-to-all or all-gather for the tokens) and
    expert_gemms (expert GEMMs per GPU per step)."""
    import pandas as pd

    from megalab import theory
    from megalab.theory import moe

    rows = {}
    for name, c in cfgs.items():
        comm = theory.comm_bytes_per_step(c)
        grad_op = "all_gather" if c.dist_opt else "all_reduce"  # the same bus factor
        alltoall = c.moe_dispatcher == "alltoall" and c.etp == 1
        token_op = "all_to_all" if alltoall else "all_gather"
        rows[name] = {
            **moe.memory_by_part(c, gpu),
            "grad_gb": comm["dp"] / 1e9,
            "token_gb": comm["ep"] / 1e9,
            "grad_ms": comm["dp"] / bw[grad_op] / 1e6,
            "token_ms": comm["ep"] / bw[token_op] / 1e6,
            "expert_gemms": moe.expert_gemms_per_step(c),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("layout").reset_index()


def ep_group(g):
    """The comparison group `ch06.ep` (timings.group) as the chapter reads it: layout (in words),
    median_ms, lo_ms, hi_ms, mfu, speedup (DP's median over this one), tokens_s (tokens per second
    per GPU) and gpu_busy (the profiled layout's). attrs: gpu_busy, host."""
    import pandas as pd

    cfgs = list(g["cfg"])
    dp = [i for i, c in enumerate(cfgs) if c.ep == 1 and not c.dist_opt]
    if not dp:
        raise LookupError(f"group {g.attrs.get('name')}: no DP run to compare EP with")
    base = float(g["median_ms"].iloc[dp[0]])
    out = pd.DataFrame(
        {
            "layout": [layout(c) for c in cfgs],
            "median_ms": g["median_ms"].to_numpy(),
            "lo_ms": g["lo_ms"].to_numpy(),
            "hi_ms": g["hi_ms"].to_numpy(),
            "mfu": g["mfu"].to_numpy(),
            "speedup": base / g["median_ms"].to_numpy(),
            "tokens_s": [c.gbs * c.seq / c.gpus / (m / 1e3) for c, m in zip(cfgs, g["median_ms"])],
            "gpu_busy": g["gpu_busy"].to_numpy(),
        }
    )
    out.attrs.update(gpu_busy=g.attrs.get("gpu_busy"), host=g.attrs.get("host"))
    return out


def aux_group(g):
    """The comparison group `ch06.ep-aux` (timings.group) as the chapter reads it: layout (in
    words), balancing ("auxiliary loss" or "forced balance"), median_ms, lo_ms, hi_ms (the pooled
    steps' median and its 95% interval), run_lo_ms and run_hi_ms (the fastest and slowest run's
    median: with a learning router the step time wanders from run to run), mfu, gpu_busy (the
    profiled run's). attrs: gpu_busy, host."""
    import pandas as pd

    cfgs = list(g["cfg"])
    out = pd.DataFrame(
        {
            "layout": [layout(c) for c in cfgs],
            "balancing": [BALANCING[c.moe_balance] for c in cfgs],
            "median_ms": g["median_ms"].to_numpy(),
            "lo_ms": g["lo_ms"].to_numpy(),
            "hi_ms": g["hi_ms"].to_numpy(),
            "run_lo_ms": [min(v) for v in g["run_ms"]],
            "run_hi_ms": [max(v) for v in g["run_ms"]],
            "mfu": g["mfu"].to_numpy(),
            "gpu_busy": g["gpu_busy"].to_numpy(),
        }
    )
    out.attrs.update(gpu_busy=g.attrs.get("gpu_busy"), host=g.attrs.get("host"))
    return out


# moe_balance -> the words a figure uses
BALANCING = {"aux_loss": "auxiliary loss", "force": "forced balance", "none": "no balancing"}


def routing_cost(t):
    """Per layout timed both ways in aux_group's table `t`: forced_ms, aux_ms and cost, the step
    time the auxiliary loss's routing adds (aux_ms / forced_ms - 1), with cost_lo and cost_hi, the
    least and most it adds between any two runs (fastest with the loss over slowest forced, and the
    reverse) and range, the two in words ("14–23%"). Raises LookupError when no layout has both."""
    import pandas as pd

    rows = []
    for x in dict.fromkeys(t["layout"]):
        aux = t[(t["layout"] == x) & (t["balancing"] == "auxiliary loss")]
        forced = t[(t["layout"] == x) & (t["balancing"] == "forced balance")]
        if aux.empty or forced.empty:
            continue
        a, f = aux.iloc[0], forced.iloc[0]
        rows.append(
            {
                "layout": x,
                "forced_ms": f["median_ms"],
                "aux_ms": a["median_ms"],
                "cost": a["median_ms"] / f["median_ms"] - 1,
                "cost_lo": a["run_lo_ms"] / f["run_hi_ms"] - 1,
                "cost_hi": a["run_hi_ms"] / f["run_lo_ms"] - 1,
            }
        )
    if not rows:
        raise LookupError("no layout is timed with both forced balance and the auxiliary loss")
    out = pd.DataFrame(rows).set_index("layout")
    out["range"] = [f"{lo:.0%}–{hi:.0%}" for lo, hi in zip(out["cost_lo"], out["cost_hi"])]
    return out


def beside_series(t):
    """Rows for charts.grouped_bars: layout, who ('measured: 2 H200s, SwiGLU' or the series') and
    speedup over each side's DP + distributed optimizer, from ep_group's table `t` and series()."""
    import pandas as pd

    zo = t.loc[t["layout"].str.endswith("distributed optimizer"), "median_ms"]
    if len(zo) != 1:
        raise LookupError("the group has no one DP + distributed optimizer run to compare with")
    ours = t.assign(who=MEASURED, speedup=float(zo.iloc[0]) / t["median_ms"])
    theirs = series().assign(who=SERIES_NAME)
    cols = ["layout", "who", "speedup"]
    return pd.concat([ours[cols], theirs[cols]], ignore_index=True)


def micro_batches(runs: dict):
    """One row per run ((model, micro-batch) -> results.Result): model, mbs, step_s, mfu."""
    import pandas as pd

    return pd.DataFrame(
        [
            {"model": name, "mbs": m, "step_s": r.summary["step_time_s"], "mfu": r.summary["mfu"]}
            for (name, m), r in runs.items()
        ]
    )


def run_rows(runs: dict, gpu: str):
    """One row per run (name -> results.Result), for the evidence page: run, status, step_ms, mfu,
    measured_gib, predicted_gib, token_gb (theory's token bytes per GPU per step) and cpus (its
    host's CPU cores)."""
    import pandas as pd

    from megalab import theory
    from megalab.theory import moe

    rows = []
    for name, r in runs.items():
        s = r.summary
        rows.append(
            {
                "run": name,
                "status": r.status,
                "step_ms": 1e3 * s["step_time_s"] if s.get("step_time_s") else None,
                "mfu": s.get("mfu"),
                "measured_gib": s.get("mem_reserved_peak_gib"),
                "predicted_gib": moe.memory_by_part(r.config, gpu)["total"],
                "token_gb": theory.comm_bytes_per_step(r.config)["ep"] / 1e9,
                "cpus": (r.record.get("env") or {}).get("cpu_count"),
            }
        )
    return pd.DataFrame(rows)


def fits(found: dict, specs: dict):
    """The largest expert count per layout and GPU count: found {gpus: {layout: fit result}},
    specs {gpus: {layout: specs.Fit}}; rows layout ('EP, 2 GPUs'), what ('measured' or
    'predicted'), experts."""
    import pandas as pd

    rows = [
        {"layout": f"{name}, {g} GPUs", "what": what, "experts": n}
        for g, done in found.items()
        for name in done
        for what, n in (("measured", done[name].largest), ("predicted", specs[g][name].predicted))
    ]
    return pd.DataFrame(rows)


def series_configs() -> dict:
    """The series' R1 and R2 as RunConfigs: the olmoe-like shape with Megatron-LM's default GELU
    MLP, LayerNorm and learned positions, on 8 GPUs at micro-batch 4, global batch 32."""
    from megalab.runs import presets

    base = presets.get("olmoe-like").replace(
        activation="gelu",
        norm="LayerNorm",
        position="learned",
        gpus=8,
        mbs=4,
        gbs=32,
        moe_balance="force",
    )
    return {"DP 8 + distributed optimizer": base.replace(dist_opt=True), "EP 8": base.replace(ep=8)}


def series():
    """The series' two runs: layout, median_ms (its step), mfu (theory's model FLOPs of its GELU
    model over the H100's dense bf16 peak), tokens_s (tokens per second per GPU), speedup (EP over
    the distributed optimizer) and expert_b (expert parameters, billions)."""
    import pandas as pd

    from megalab import theory

    rows = []
    for name, c in series_configs().items():
        ms = SERIES_MS[name]
        rows.append(
            {
                "layout": name,
                "median_ms": ms,
                "mfu": theory.mfu(c, ms / 1e3, SERIES_GPU),
                "tokens_s": c.gbs * c.seq / c.gpus / (ms / 1e3),
                "speedup": SERIES_MS["DP 8 + distributed optimizer"] / ms,
                "expert_b": _expert_params(c) / 1e9,
            }
        )
    return pd.DataFrame(rows)


def _expert_params(cfg) -> int:
    """Expert weights: per layer and expert, 3·h·f with SwiGLU (gate, up, down), 2·h·f with GELU."""
    per = 3 if cfg.activation == "swiglu" else 2
    return cfg.layers * cfg.experts * per * cfg.hidden * cfg.moe_ffn_size


def expert_weight_ratio(ours, theirs) -> float:
    """Expert parameters (and expert FLOPs per token) of `ours` over `theirs`: 1.5 for SwiGLU
    against GELU at the same FFN width."""
    return _expert_params(ours) / _expert_params(theirs)


# -- routing
# ------------------------------------------------------------------------------------------
def step_imbalance(records: dict):
    """Long frame (step, balancing, max_over_mean): per step, the busiest expert over the mean,
    averaged over the MoE layers, for each record (balancing name -> record)."""
    import pandas as pd

    from megalab.records import routing

    parts = []
    for name, rec in records.items():
        imb = routing.imbalance(rec).mean(axis=1)
        parts.append(pd.DataFrame({"step": imb.index, "balancing": name, "max_over_mean": imb}))
    return pd.concat(parts, ignore_index=True)


def routing_name(cfg) -> str:
    """'auxiliary loss 0.01', 'no balancing' or 'forced balance': a routing run's policy in
    words."""
    if cfg.moe_balance == "aux_loss":
        return f"{BALANCING['aux_loss']} {cfg.moe_aux_coeff:g}"
    return BALANCING[cfg.moe_balance]


def recovery(records: dict, settled: float = 1.5, tail: int = 20):
    """Per record (balancing name -> record), from step_imbalance's layer mean: at_start (step 0),
    peak and peak_step, last (the mean of the last `tail` steps) and settled_at, the first step
    from which it stays below `settled` to the end (None when it never does)."""
    import pandas as pd

    rows = []
    for name, rec in records.items():
        imb = step_imbalance({name: rec}).set_index("step")["max_over_mean"]
        above = imb[imb >= settled]
        if above.empty:
            at = int(imb.index[0])
        elif above.index[-1] == imb.index[-1]:
            at = None
        else:
            at = int(above.index[-1]) + 1
        rows.append(
            {
                "balancing": name,
                "at_start": float(imb.iloc[0]),
                "peak": float(imb.max()),
                "peak_step": int(imb.idxmax()),
                "last": float(imb.iloc[-tail:].mean()),
                "settled_at": at,
            }
        )
    return pd.DataFrame(rows).set_index("balancing")


def over_steps(record):
    """Per MoE layer, over the steps the record sums (after the warm-up): per_step, the busiest
    expert over the mean in one step, averaged over those steps; summed, the busiest expert over
    the mean of all those steps' tokens together; fewest_hot, the fewest experts that can have been
    the busiest one in turn (an expert busiest in a set S of the n steps holds at least the sum of
    their ratios over n, so no expert holds more than n·summed of the ratios)."""
    import math

    import pandas as pd

    from megalab.records import routing

    warm = record["routing"]["warmup_steps"]
    per = routing.imbalance(record).iloc[warm:]
    summed = routing.load(record).max(axis=1)
    out = pd.DataFrame({"per_step": per.mean(axis=0).to_numpy(), "summed": summed.to_numpy()})
    out.index = summed.index
    out["fewest_hot"] = [math.ceil(p / s - 1e-9) for p, s in zip(out["per_step"], out["summed"])]
    return out


def hot_experts(record, share: float = 0.5):
    """Per MoE layer, over the steps the record sums (after the warm-up): hot, the experts that
    received more than `share` of the layer's tokens (load above share · E / k, as top-k routing
    lets up to k / share experts do), and top_k_share, the k busiest experts' share of the
    layer's token copies (k / E when balanced, 1.0 when every token picks the same k)."""
    import numpy as np
    import pandas as pd

    from megalab.records import routing
    from megalab.runs.config import RunConfig

    cfg = RunConfig.from_dict(record["config"])
    lo = routing.load(record)
    top = np.sort(lo.to_numpy(), axis=1)[:, ::-1][:, : cfg.topk]
    return pd.DataFrame(
        {
            "hot": (lo > share * cfg.experts / cfg.topk).sum(axis=1).to_numpy(),
            "top_k_share": top.sum(axis=1) / lo.sum(axis=1).to_numpy(),
        },
        index=lo.index,
    )


def routing_heatmap(record, title: str):
    """Busiest expert over the mean per step (rows) and MoE layer (columns), coloured from 1.0
    (balanced) to E / k (every token picks the busiest expert)."""
    from megalab import charts
    from megalab.records import routing
    from megalab.runs.config import RunConfig

    cfg = RunConfig.from_dict(record["config"])
    fig = charts.heatmap(
        routing.imbalance(record),
        x_title="MoE layer",
        y_title="step",
        title=title,
        z_title="busiest / mean",
    )
    return fig.update_traces(zmin=1.0, zmax=cfg.experts / cfg.topk, colorscale="Reds")


def summed_heatmaps(records: dict, title: str):
    """One heat map per record (name -> record), side by side: each expert's tokens summed over the
    measured steps, over its layer's mean, per MoE layer (rows) and expert (columns), coloured from
    0 to E / k (every token of every step picked that expert)."""
    from plotly.subplots import make_subplots

    from megalab import charts
    from megalab.records import routing
    from megalab.runs.config import RunConfig

    names = list(records)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, shared_yaxes=True)
    for i, name in enumerate(names):
        rec = records[name]
        cfg = RunConfig.from_dict(rec["config"])
        lo = routing.load(rec)
        fig.add_heatmap(
            z=lo.to_numpy(),
            x=list(range(1, lo.shape[1] + 1)),
            y=list(range(1, lo.shape[0] + 1)),
            zmin=0.0,
            zmax=cfg.experts / cfg.topk,
            colorscale="Reds",
            showscale=i == len(names) - 1,
            colorbar=dict(title="tokens / mean"),
            row=1,
            col=i + 1,
        )
        fig.update_xaxes(title_text="expert", row=1, col=i + 1)
    fig.update_yaxes(title_text="MoE layer", autorange="reversed", row=1, col=1)
    return fig.update_layout(template=charts.TEMPLATE, title=title)


def worded(fig, x_title: str | None = None, standoff: int = 16):
    """`fig` with its legend in words (drops metric_vs's "column = " before each name) and room
    between the x-axis title and wrapped tick labels; x_title="" drops the title (bars whose
    wrapped category labels say what they are, where the title would meet the legend below)."""
    fig.for_each_trace(lambda t: t.update(name=(t.name or "").split(" = ", 1)[-1]))
    fig.update_xaxes(title_standoff=standoff, automargin=True)
    if x_title is not None:
        fig.update_xaxes(title_text=x_title or None)
    return fig.update_layout(legend_title_text="")


def expected_max_normal(n: int) -> float:
    """The expected largest of `n` independent standard normal values (2.344 for n = 64), by
    integrating E[max] = ∫ x · n φ(x) Φ(x)^(n-1) dx."""
    import numpy as np

    x = np.linspace(-10.0, 10.0, 20001)
    phi = np.exp(-(x**2) / 2) / np.sqrt(2 * np.pi)
    cdf = 0.5 * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
    return float(np.trapezoid(x * n * phi * cdf ** (n - 1), x))


def multinomial_max_over_mean(tokens: int, experts: int, topk: int) -> float:
    """A router that picks each token's top-k experts at random, independently of the other tokens:
    each expert's copies are Binomial(tokens, k/E), so the busiest is about mean + σ·E[max of E
    normals] (the normal approximation), over the mean."""
    p = topk / experts
    mean = tokens * p
    return 1 + expected_max_normal(experts) * (tokens * p * (1 - p)) ** 0.5 / mean


def random_router(
    tokens: int, experts: int, topk: int, shared: float = 0.0, trials: int = 4, seed: int = 0
) -> float:
    """Monte Carlo: the busiest expert over the mean, averaged over `trials` batches of `tokens`
    tokens, for a router with random weights whose logits for token t and expert e are
    √shared·a_e + √(1-shared)·b_te (a, b independent standard normal): `shared` is the part of the
    logits' variance every token shares (0: independent tokens, a multinomial router)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        common = rng.standard_normal(experts).astype(np.float32)
        own = rng.standard_normal((tokens, experts), dtype=np.float32)
        logits = np.sqrt(shared) * common + np.sqrt(1 - shared) * own
        picked = np.argpartition(-logits, topk - 1, axis=1)[:, :topk]
        counts = np.bincount(picked.ravel(), minlength=experts)
        out.append(counts.max() / counts.mean())
    return float(np.mean(out))


def at_init(record, cfg, grid: int = 25):
    """Step 0 (before any update) per MoE layer: measured, the busiest expert over the mean;
    independent, what a random router gives over independent tokens (the step's gbs·seq tokens);
    shared, the shared part of the logits' variance a random router needs to give the measured
    value (interpolated on `grid` points of random_router from 0 to 0.9)."""
    import numpy as np
    import pandas as pd

    from megalab.records import routing

    tokens = cfg.gbs * cfg.seq
    first = routing.imbalance(record).iloc[0]
    xs = np.linspace(0.0, 0.9**0.5, grid) ** 2  # dense near 0, where the curve is steep
    ys = np.array([random_router(tokens, cfg.experts, cfg.topk, s, trials=2) for s in xs])
    ys = np.maximum.accumulate(ys)  # monotone for the inverse
    return pd.DataFrame(
        {
            "measured": first.to_numpy(),
            "independent": ys[0],
            "shared": np.interp(first.to_numpy(), ys, xs),
        },
        index=first.index,
    )
