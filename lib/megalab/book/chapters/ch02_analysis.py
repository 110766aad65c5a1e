"""Chapter 02's tables: the comparison group `ch02.tp` beside Shoeybi et al. 2019, where the time of
a tensor-parallel step goes, and memory per GPU against theory.

    g = timings.group(None, "ch02.tp", "H200")  # medians, 95% intervals: one host, runs alone
    ch02_analysis.predicted(cfgs)                # theory: parameters, FLOPs, memory, TP bytes, time
    ch02_analysis.strong_scaling(g)              # gpt-1.2b, batch 8, on 1, 2, 4 GPUs; Table 8
    ch02_analysis.weak_scaling(g)                # Table 1's models, batch 8; the paper's Fig. 5
    ch02_analysis.beside_paper(df, "speedup", "paper_speedup")   # rows for charts.grouped_bars
    ch02_analysis.weak_bars(weak)                # the weak-scaling bars, each layout with its model
    ch02_analysis.eager_vs_graphs(g)             # one TP run launched eagerly and from CUDA graphs
    ch02_analysis.step_parts(g, profile, busbw)  # the profiled TP step: compute, all-reduces, waits
    ch02_analysis.timeline(profile, title)       # its kernels, the long NCCL waits marked
    ch02_analysis.profiled_step(profile)         # its span, idle time, and NCCL beside compute
    ch02_analysis.memory(results, "H200")        # measured peak against theory, largest micro-batch
    ch02_analysis.parity_curves(parities)        # loss curves named by layout
    ch02_analysis.runs_table(g)                  # the evidence page: every configuration's runs

The group's rows are told apart by their configuration: gpt-1.2b with CUDA graphs at every TP size
(strong scaling), Table 1's model for each TP size with CUDA graphs (weak scaling; TP 1 is gpt-1.2b
in both), and any run without CUDA graphs (eager). Where a reader's reproduction re-measured only
part of the group (megalab.book.beside: fewer GPUs than the book's), the scaling tables are the
book's and carry the reader's own rows in attrs["yours"]; beside_paper draws them as a third bar.
"""

from __future__ import annotations

from megalab.book import references

from megalab.book.chapters.ch01_analysis import interval_text

__all__ = [
    "SERIES_TP_URL",
    "SERIES_TP_STRONG_MS",
    "series_tp_strong",
    "MEASURED",
    "PAPER_NAME",
    "layout",
    "message_bytes",
    "predicted",
    "strong_scaling",
    "weak_scaling",
    "beside_paper",
    "weak_bars",
    "eager_vs_graphs",
    "step_parts",
    "timeline",
    "profiled_step",
    "memory",
    "parity_curves",
    "runs_table",
]

from megalab.charts.timeline import KERNEL_WORDS
from megalab.book.chapters.ch02_tensor_parallel import (
    PAPER_STRONG_SPEEDUP,
    PAPER_WEAK_EFFICIENCY,
    WEAK_TP_MODELS,
)

MEASURED = "measured: H200, CUDA graphs"

# The vuiseng9/megatron-tutorials series' tensor-parallel strong scaling: gpt-1.2b, seq 1024,
# micro-batch = global batch, eager Megatron-LM core_r0.14.0 on one 8×H100 80 GB node. Copied from
# its table (assets/tbl-203-tp-strong-scaling.png of this commit), not measured here:
# (global batch, TP) -> step (ms), rows R11-R14 (batch 8) and R15-R18 (batch 20)
SERIES_TP_URL = references.series("02-tp-sp.md")
SERIES_TP_STRONG_MS = {
    (8, 1): 210,
    (8, 2): 200,
    (8, 4): 200,
    (8, 8): 205,
    (20, 1): 390,
    (20, 2): 259,
    (20, 4): 207,
    (20, 8): 207,
}


def series_tp_strong() -> dict:
    """The series' eager strong scaling read for a floor: tp2_x, TP 2's speed-up at batch 8;
    floor_ms, the slowest of its TP 4 and TP 8 steps at batch 8 and 20, and floor_spread, how far
    those four steps are apart (over the fastest): 2.5 times the work in about the same time."""
    wide = [ms for (_, tp), ms in SERIES_TP_STRONG_MS.items() if tp >= 4]
    return {
        "tp2_x": SERIES_TP_STRONG_MS[8, 1] / SERIES_TP_STRONG_MS[8, 2],
        "floor_ms": max(wide),
        "floor_spread": max(wide) / min(wide) - 1,
    }
PAPER_NAME = "Shoeybi et al. 2019: V100"


def layout(cfg) -> str:
    """'1 GPU', 'TP 2', 'TP 2 × DP 2 + distributed optimizer': the layout in words
    (frame.describe), CUDA graphs left unsaid (the chapter's step times all have them but one,
    which says so)."""
    from megalab.book.frame import describe

    return describe(cfg.replace(cuda_graphs="none"))


def message_bytes(cfg) -> int:
    """Bytes of one TP all-reduce: the bf16 activation (s, b, h) of one micro-batch."""
    return cfg.seq // cfg.cp * cfg.mbs * cfg.hidden * 2


def predicted(cfgs, busbw: dict | None = None):
    """Theory for each configuration: model, layout, params_b (billions), tflop_per_gpu (model TFLOP
    per GPU per step), gib (memory per GPU), tp_gb (GB each GPU sends in TP all-reduces per step)
    and tp_ms (that over the all-reduce bus bandwidth for its message size: `busbw` {tp: GB/s}, else
    chapter 0's NCCL benchmark records; 0 without TP)."""
    import pandas as pd

    from megalab import theory
    from megalab.jobs import bench

    rows = []
    for c in cfgs:
        nbytes = theory.comm_bytes_per_step(c)["tp"]
        if c.tp == 1:
            bw = None
        elif busbw:
            bw = busbw[c.tp]
        else:
            bw = bench.best_bus_bandwidth("all_reduce", c.tp, size_bytes=message_bytes(c))
        rows.append(
            {
                "model": c.name,
                "layout": layout(c),
                "params_b": theory.params(c)["total"] / 1e9,
                "tflop_per_gpu": theory.model_flops(c) / c.gpus / 1e12,
                "gib": theory.memory(c)["total"],
                "tp_gb": nbytes / 1e9,
                "tp_ms": nbytes / (bw * 1e9) * 1e3 if c.tp > 1 else 0.0,
            }
        )
    return pd.DataFrame(rows)


def _graphed(g, keep):
    rows = g[[c.cuda_graphs != "none" and keep(c) for c in g["cfg"]]]
    return rows.assign(tp=[c.tp for c in rows["cfg"]]).sort_values("tp", kind="stable")


def strong_scaling(g):
    """gpt-1.2b with CUDA graphs at each TP size of group `g` (timings.group): tp, layout,
    median_ms, lo_ms, hi_ms, interval (lo_ms – hi_ms in words), mfu, speedup (the one-GPU median
    over this one) and paper_speedup (Table 8)."""
    import pandas as pd

    rows = _graphed(g, lambda c: c.name == WEAK_TP_MODELS[1])
    if not len(rows) or rows["tp"].iloc[0] != 1:
        raise LookupError(
            f"group {g.attrs.get('name')}: no one-GPU run of {WEAK_TP_MODELS[1]} to scale from"
        )
    out = pd.DataFrame(
        {
            "tp": rows["tp"],
            "layout": [layout(c) for c in rows["cfg"]],
            "median_ms": rows["median_ms"],
            "lo_ms": rows["lo_ms"],
            "hi_ms": rows["hi_ms"],
            "mfu": rows["mfu"],
        }
    )
    out["interval"] = interval_text(out["lo_ms"], out["hi_ms"])
    out["speedup"] = out["median_ms"].iloc[0] / out["median_ms"]
    out["paper_speedup"] = [PAPER_STRONG_SPEEDUP.get(t, float("nan")) for t in out["tp"]]
    return _with_yours(out.reset_index(drop=True), g, strong_scaling)


def weak_scaling(g):
    """Shoeybi et al.'s Table 1 model for each TP size of group `g`, with CUDA graphs: tp, model,
    layout, median_ms, tflops (model TFLOP/s per GPU), mfu, efficiency (TFLOP/s per GPU over the
    one-GPU run's: the paper's weak-scaling efficiency) and paper_efficiency (Fig. 5)."""
    import pandas as pd

    from megalab import theory

    rows = _graphed(g, lambda c: WEAK_TP_MODELS.get(c.tp) == c.name)
    out = pd.DataFrame(
        {
            "tp": rows["tp"],
            "model": [c.name for c in rows["cfg"]],
            "layout": [layout(c) for c in rows["cfg"]],
            "median_ms": rows["median_ms"],
            "tflops": [
                theory.tflops_per_gpu(c, ms / 1e3) for c, ms in zip(rows["cfg"], rows["median_ms"])
            ],
            "mfu": rows["mfu"],
        }
    )
    out["efficiency"] = out["tflops"] / out["tflops"].iloc[0]
    out["paper_efficiency"] = [PAPER_WEAK_EFFICIENCY.get(t, float("nan")) for t in out["tp"]]
    return _with_yours(out.reset_index(drop=True), g, weak_scaling)


def _with_yours(out, g, table):
    """`out`, with attrs["yours"]: the rows `table` makes of the reader's own recording behind a
    partial group `g` (megalab.book.beside), as records; none otherwise."""
    from megalab.book import beside

    mine = beside.yours(g)
    if mine is not None:
        out.attrs["yours"] = table(mine).drop(columns="cfg", errors="ignore").to_dict("records")
    return out


def beside_paper(df, value: str, paper: str, x: str = "layout"):
    """Long rows (x, who, value) for charts.grouped_bars: `value` as MEASURED beside `paper` as
    PAPER_NAME, one pair per row of df (a scaling table above); the name of `value` is kept as the
    value column."""
    import pandas as pd

    from megalab.book.beside import YOURS

    ours = pd.DataFrame({x: df[x], "who": MEASURED, value: df[value]})
    theirs = pd.DataFrame({x: df[x], "who": PAPER_NAME, value: df[paper]})
    yours = df.attrs.get("yours")
    mine = [pd.DataFrame(yours).assign(who=YOURS)[[x, "who", value]]] if yours else []
    return pd.concat([ours, *mine, theirs], ignore_index=True)


def weak_bars(wk):
    """beside_paper's rows for weak_scaling's table `wk`, each layout named with its model
    ('gpt-2.5b, TP 2'): Table 1 scales the model with the GPUs."""
    named = lambda rows: [f"{r['model']}, {r['layout']}" for r in rows]  # noqa: E731
    yours = wk.attrs.get("yours") or []
    bars = wk.assign(layout=named(wk.to_dict("records")))
    bars.attrs["yours"] = [{**r, "layout": n} for r, n in zip(yours, named(yours))]
    return beside_paper(bars, "efficiency", "paper_efficiency")


def eager_vs_graphs(g):
    """Each run of group `g` without CUDA graphs beside its graphed twin: one row per launch mode
    (launch: 'eager' or 'CUDA graphs'), layout, median_ms, lo_ms, hi_ms and run_spread (slowest
    run's median over the fastest's, minus 1). attrs: slower (eager over graphed median) and
    busy_at_most (graphed over eager median: the eager step's GPU-busy share can be no higher, its
    kernels being the same)."""
    import pandas as pd

    from megalab.records.timings import loose_key

    keys = {loose_key(c): label for label, c in g["cfg"].items()}
    rows = []
    for label, cfg in g["cfg"].items():
        twin = keys.get(loose_key(cfg.replace(cuda_graphs="te")))
        if cfg.cuda_graphs != "none" or twin is None:
            continue
        for launch, at in (("eager", label), ("CUDA graphs", twin)):
            r = g.loc[at]
            rows.append(
                {
                    "launch": launch,
                    "layout": layout(cfg),
                    "median_ms": r["median_ms"],
                    "lo_ms": r["lo_ms"],
                    "hi_ms": r["hi_ms"],
                    "run_spread": max(r["run_ms"]) / min(r["run_ms"]) - 1,
                }
            )
    if not rows:
        raise LookupError(
            f"group {g.attrs.get('name')}: no run without CUDA graphs beside its graphed twin"
        )
    out = pd.DataFrame(rows)
    out.attrs.update(
        slower=out["median_ms"].iloc[0] / out["median_ms"].iloc[1],
        busy_at_most=out["median_ms"].iloc[1] / out["median_ms"].iloc[0],
    )
    return out


def step_parts(g, profile: dict, busbw_gbs: float):
    """Where the profiled configuration's median step of group `g` goes (its profiled step's
    kernels, `profile`), each part beside what it would cost without TP's overheads:

    - compute kernels: the union of the non-NCCL kernels' intervals, beside the one-GPU step over t;
    - all-reduce transfers: TP's all-reduces (4 per layer and micro-batch) at their typical (median)
    NCCL
      kernel time, beside theory's bytes over `busbw_gbs` (the all-reduce bus bandwidth measured for
      messages of that size);
    - waiting and gaps: the rest of the median step (collectives waiting for the slowest rank, the
    other
      collectives, idle time), beside 0.

    Rows: part, measured_ms, expected_ms, expected (how). attrs: allreduces, typical_ms (one
    all-reduce's median kernel), predicted_each_ms, nccl_ms (every NCCL kernel of the profiled
    step), compute_x (compute kernels over the one-GPU step / t), tp."""
    import numpy as np
    import pandas as pd

    from megalab import theory
    from megalab.records.profiles import timeline, union_seconds

    label = g.attrs.get("profiled")
    if label is None:
        raise LookupError(f"group {g.attrs.get('name')}: no profiled run")
    cfg, step_ms = g.loc[label, "cfg"], g.loc[label, "median_ms"]
    one = strong_scaling(g)["median_ms"].iloc[0]
    k = timeline(profile)
    nccl = k.loc[k["category"] == "nccl", "duration_ms"]
    compute_ms = 1e3 * union_seconds(
        k.loc[k["category"] != "nccl", ["start_ms", "duration_ms"]].itertuples(index=False)
    )
    allreduces = 4 * cfg.layers // cfg.pp * cfg.num_microbatches
    typical = float(np.median(nccl)) if len(nccl) else 0.0
    predicted = theory.comm_bytes_per_step(cfg)["tp"] / (busbw_gbs * 1e9) * 1e3
    transfer = allreduces * typical
    out = pd.DataFrame(
        [
            {
                "part": "compute kernels",
                "measured_ms": compute_ms,
                "expected_ms": one / cfg.tp,
                "expected": f"the one-GPU step ÷ {cfg.tp}",
            },
            {
                "part": "all-reduce transfers",
                "measured_ms": transfer,
                "expected_ms": predicted,
                "expected": "bytes ÷ bus bandwidth",
            },
            {
                "part": "waiting and gaps",
                "measured_ms": step_ms - compute_ms - transfer,
                "expected_ms": 0.0,
                "expected": "none",
            },
            {
                "part": "step (median)",
                "measured_ms": step_ms,
                "expected_ms": one / cfg.tp + predicted,
                "expected": "the sum",
            },
        ]
    )
    out.attrs.update(
        allreduces=allreduces,
        typical_ms=typical,
        predicted_each_ms=predicted / allreduces,
        nccl_ms=float(nccl.sum()),
        compute_x=compute_ms / (one / cfg.tp),
        tp=cfg.tp,
    )
    return out


def timeline(profile: dict, title: str, wait_ms: float = 1.0):
    """charts.kernel_timeline of `profile` with every NCCL kernel longer than `wait_ms` shaded and
    labelled: a TP all-reduce moves its bytes in well under a millisecond (step_parts), so a longer
    one is mostly a rank waiting for the others. fig.layout.meta: span_ms, the profiled step's
    length from its first kernel to the end of its last, and waits_ms, the shaded kernels' total."""
    from megalab import charts

    t = profile["timeline"]
    rows = [dict(zip(t["columns"], k)) for k in t["kernels"]]
    start = min(r["start_ms"] for r in rows)
    span = max(r["start_ms"] + r["duration_ms"] for r in rows) - start
    waits = [r for r in rows if r["category"] == "nccl" and r["duration_ms"] > wait_ms]
    fig = charts.kernel_timeline(profile, title=title, words=True)
    # GEMMs on top: at this zoom the forward's all-reduces would otherwise hide them
    gemm = KERNEL_WORDS["gemm"]
    fig.data = [d for d in fig.data if d.name != gemm] + [d for d in fig.data if d.name == gemm]
    for i, r in enumerate(sorted(waits, key=lambda r: -r["duration_ms"])):
        label = dict(annotation_text="NCCL: waiting", annotation_position="top right") if i < 2 else {}
        fig.add_vrect(
            x0=r["start_ms"] - start,
            x1=r["start_ms"] - start + r["duration_ms"],
            fillcolor="#d1495b",
            opacity=0.15,
            line_width=0,
            **label,
        )
    waited = sum(r["duration_ms"] for r in waits)
    return fig.update_layout(meta={"span_ms": span, "waits_ms": waited})


def profiled_step(profile: dict) -> dict:
    """One profiled step's kernels, as the GPU saw them under the profiler: span_ms (first kernel's
    start to the last one's end), busy_ms (time at least one kernel ran), idle_ms (span − busy),
    nccl_ms (the NCCL kernels, overlaps counted once), side_nccl_ms (those not on the main stream,
    the one with the most kernel time), overlap_ms (NCCL time during which a compute kernel ran, on
    any stream: profiles.hidden summed over the NCCL streams) and overlap_share (overlap_ms over
    nccl_ms)."""
    from megalab.records.profiles import gpu_busy, hidden, nccl_streams, timeline

    k = timeline(profile)
    main = k.groupby("stream")["duration_ms"].sum().idxmax()
    busy = gpu_busy(profile)
    span = 1e3 * busy["span_s"] - float(k["start_ms"].min())
    compute = ("gemm", "attention", "other")
    streams = nccl_streams(profile)
    overlap = sum(hidden(profile, s, behind=compute)["hidden_ms"] for s in streams)
    nccl = sum(streams.values())
    return {
        "span_ms": span,
        "busy_ms": 1e3 * busy["busy_s"],
        "idle_ms": span - 1e3 * busy["busy_s"],
        "nccl_ms": nccl,
        "side_nccl_ms": nccl - streams.get(main, 0.0),
        "overlap_ms": overlap,
        "overlap_share": overlap / nccl if nccl else 0.0,
    }


def memory(results, gpu: str):
    """Peak memory per GPU of each run against theory: layout, measured_gib (peak reserved),
    predicted_gib (theory.memory) and largest_mbs (the largest micro-batch theory fits on `gpu` in
    that layout). A run is a Result or a (RunConfig, record) pair (timings.group_runs gives
    those)."""
    import pandas as pd

    from megalab import theory
    from megalab.book.specs import predicted_largest

    pairs = [r if isinstance(r, tuple) else (r.config, {"summary": r.summary}) for r in results]
    return pd.DataFrame(
        [
            {
                "layout": layout(c),
                "measured_gib": rec["summary"]["mem_reserved_peak_gib"],
                "predicted_gib": theory.memory(c)["total"],
                "largest_mbs": predicted_largest(c, "mbs", gpu),
            }
            for c, rec in pairs
        ]
    )


def runs_table(g):
    """Group `g` run by run, for the evidence page: configuration (model and layout in words, with
    or without CUDA graphs), runs, run_medians (each run's median step in ms, in the order they
    ran), median_ms, lo_ms, hi_ms, interval (the two in words), half (the 95% interval's half-width
    over the median), wide ("yes" when the interval is wider than ±2%) and mfu."""
    import pandas as pd

    return pd.DataFrame(
        {
            "configuration": [
                f"{c.name}, {layout(c)}, " + ("CUDA graphs" if c.cuda_graphs != "none" else "eager")
                for c in g["cfg"]
            ],
            "runs": g["runs"].astype(int),
            "run_medians": ["; ".join(f"{ms:,.1f}" for ms in v) for v in g["run_ms"]],
            "median_ms": g["median_ms"],
            "lo_ms": g["lo_ms"],
            "hi_ms": g["hi_ms"],
            "interval": interval_text(g["lo_ms"], g["hi_ms"]),
            "half": g["half"],
            "wide": g["wide"].map({True: "yes", False: "no"}).to_numpy(),
            "mfu": g["mfu"],
        }
    ).reset_index(drop=True)


def parity_curves(parities) -> dict:
    """{name: curve} of ParityResults (megalab.jobs.sweep.parity) for charts.loss_parity, named in
    words: the one-GPU reference once ("1 GPU"), then each layout ("TP 2"); a curve measured here
    keeps " (yours)"."""
    out = {}
    for par in parities:
        for (label, curve), name in zip(par.curves().items(), ("1 GPU", layout(par.layout.config))):
            out.setdefault(name + (" (yours)" if label.endswith(" (yours)") else ""), curve)
    return out
