"""Chapter 03's comparison groups as tables: SP against full recomputation by throughput at the
largest micro-batch each fits (`ch03.sp-vs-full`), and what each recomputation choice costs in time
and buys in memory at one micro-batch (`ch03.recompute`).

Each function takes a group's frame (records.timings.group, as `specs.Group.run` returns it) and
returns a pandas frame for `frame.table` or a chart; the group's GPU-busy share travels in attrs.
"""

from __future__ import annotations

from megalab.book import references

from megalab import theory
from megalab.book import frame

__all__ = [
    "CHOICES",
    "choice",
    "throughput",
    "gain_bars",
    "tradeoff",
    "provenance",
    "SERIES_SP_URL",
    "SERIES_SP_VS_FULL",
    "series_full_cost",
]

# The vuiseng9/megatron-tutorials series' SP against full recomputation (its columns C2, C3):
# GPT-22B on TP 8, global batch 4, seq 2048, eager Megatron-LM core_r0.14.0 on one 8×H100 80 GB
# node. Copied from its table (assets/tbl-280-sp-ra.png of this commit), not measured here:
# layout -> (step ms, GB per GPU)
SERIES_SP_URL = references.series("02-tp-sp.md")
SERIES_SP_VS_FULL = {"sp": (427.0, 62.0), "full": (570.0, 57.6)}


def series_full_cost() -> dict:
    """What full recomputation instead of SP cost the series: extra_time (its step over SP's, less
    1) and saved_gb (SP's memory per GPU less its)."""
    (sp_ms, sp_gb), (full_ms, full_gb) = SERIES_SP_VS_FULL["sp"], SERIES_SP_VS_FULL["full"]
    return {"extra_time": full_ms / sp_ms - 1, "saved_gb": sp_gb - full_gb}

# what each recomputation choice is called on the chapter's figures, by (recompute, modules)
CHOICES = {
    ("none", "core_attn"): "no recomputation",
    ("selective", "core_attn"): "selective: core attention",
    ("selective", "mlp"): "selective: MLP",
    ("full", "core_attn"): "full: every layer",
}


def choice(cfg) -> str:
    """The recomputation choice of `cfg` in words (CHOICES): 'selective: MLP'."""
    try:
        return CHOICES[(cfg.recompute, cfg.recompute_modules)]
    except KeyError:
        return frame.describe(cfg)


def _label(cfg) -> str:
    return f"{cfg.name}, {frame.describe(cfg)}, micro-batch {cfg.mbs}"


def _predicted_tokens_s(cfg, gpu: str) -> float:
    """Theory's tokens per second (theory.plan's step estimate), as ch03_memory.predicted_rates."""
    return cfg.gbs * cfg.seq / theory.plan(cfg, gpu)["step_time_estimate"]["total_s"]


def throughput(g, gpu: str) -> "pd.DataFrame":
    """Group `g` (ch03.sp-vs-full) one row per layout, the one without recomputation first: label
    (model, layout and micro-batch in words), model, tp, layout, mbs, median_ms, lo_ms, hi_ms (the
    median step's 95% interval), samples_s and tokens_s (the global batch over the median step),
    mfu, extra_flops (theory: executed over model FLOPs, less one), peak_gib (peak reserved per
    GPU), predicted_tokens_s (theory on `gpu`). attrs: gain (the first row's samples per second over
    the last's), predicted_gain (the same from theory), gpu_busy, wide (the group's)."""
    import pandas as pd

    rows = g.assign(_full=[c.recompute == "full" for c in g["cfg"]]).sort_values(
        "_full", kind="stable"
    )
    cfgs = list(rows["cfg"])
    out = pd.DataFrame(
        {
            "label": [_label(c) for c in cfgs],
            "model": [c.name for c in cfgs],
            "tp": [c.tp for c in cfgs],
            "layout": [frame.describe(c) for c in cfgs],
            "mbs": [c.mbs for c in cfgs],
            "median_ms": rows["median_ms"].to_numpy(),
            "lo_ms": rows["lo_ms"].to_numpy(),
            "hi_ms": rows["hi_ms"].to_numpy(),
            "samples_s": [c.gbs / (ms / 1e3) for c, ms in zip(cfgs, rows["median_ms"])],
            "mfu": rows["mfu"].to_numpy(),
            "extra_flops": [theory.extra_flops(c) for c in cfgs],
            "peak_gib": rows["peak_gib"].to_numpy(),
            "predicted_tokens_s": [_predicted_tokens_s(c, gpu) for c in cfgs],
        }
    )
    out.insert(out.columns.get_loc("mfu"), "tokens_s", out["samples_s"] * [c.seq for c in cfgs])
    out.attrs.update(
        gain=float(out["samples_s"].iloc[0] / out["samples_s"].iloc[-1]),
        predicted_gain=float(
            out["predicted_tokens_s"].iloc[0] / out["predicted_tokens_s"].iloc[-1]
        ),
        gpu_busy=g.attrs.get("gpu_busy"),
        wide=list(g.attrs.get("wide", [])),
    )
    return out


def gain_bars(table, predicted_pairs, gpu: str) -> "pd.DataFrame":
    """Rows for charts.grouped_bars: throughput's `table` as its measured and predicted gain (SP's
    samples per second over full recomputation's), then each (SP, full recomputation) pair of
    RunConfigs in `predicted_pairs` (layouts not timed: gpt-22b at TP 4) predicted only. Columns:
    label (model and TP degree in words, "predicted only" where not timed), kind ("measured" or
    "predicted"), gain."""
    import pandas as pd

    timed = f"{table['model'].iloc[0]}, TP {table['tp'].iloc[0]}"
    rows = [
        {"label": timed, "kind": kind, "gain": table.attrs[key]}
        for kind, key in (("measured", "gain"), ("predicted", "predicted_gain"))
    ]
    rows += [
        {
            "label": f"{sp.name}, TP {sp.tp} (predicted only)",
            "kind": "predicted",
            "gain": _predicted_tokens_s(sp, gpu) / _predicted_tokens_s(full, gpu),
        }
        for sp, full in predicted_pairs
    ]
    return pd.DataFrame(rows)


def tradeoff(g) -> "pd.DataFrame":
    """Group `g` (ch03.recompute) one row per recomputation choice, in the group's order (none
    first): choice (CHOICES), median_ms, lo_ms, hi_ms, extra_time (the median step over the first
    row's, less one), extra_flops (theory: executed over model FLOPs, less one), peak_gib (peak
    reserved per GPU), saved_gib (the first row's peak less this one's), mfu. attrs: gpu_busy,
    wide (the group's)."""
    import pandas as pd

    cfgs = list(g["cfg"])
    if cfgs[0].recompute != "none":
        raise ValueError(
            f"tradeoff needs the run without recomputation first, not {frame.describe(cfgs[0])}"
        )
    base_ms, base_gib = g["median_ms"].iloc[0], g["peak_gib"].iloc[0]
    out = pd.DataFrame(
        {
            "choice": [choice(c) for c in cfgs],
            "median_ms": g["median_ms"].to_numpy(),
            "lo_ms": g["lo_ms"].to_numpy(),
            "hi_ms": g["hi_ms"].to_numpy(),
            "extra_time": (g["median_ms"] / base_ms - 1).to_numpy(),
            "extra_flops": [theory.extra_flops(c) for c in cfgs],
            "peak_gib": g["peak_gib"].to_numpy(),
            "saved_gib": (base_gib - g["peak_gib"]).to_numpy(),
            "mfu": g["mfu"].to_numpy(),
        }
    )
    out.attrs.update(gpu_busy=g.attrs.get("gpu_busy"), wide=list(g.attrs.get("wide", [])))
    return out


def provenance(g) -> "pd.DataFrame":
    """Group `g` run by run for the evidence page (ch02_analysis.runs_table: runs, each run's
    median, the median and its 95% interval, half-width, whether wider than ±2%, MFU; peak_gib,
    the runs' median peak reserved memory per GPU), each configuration named by model, layout and
    micro-batch in words."""
    from megalab.book.chapters.ch02_analysis import runs_table

    table = runs_table(g).assign(configuration=[_label(c) for c in g["cfg"]])
    return table.assign(peak_gib=g["peak_gib"].to_numpy())
