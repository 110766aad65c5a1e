"""The performance page: how fast the trainer runs, against Megatron-LM's `pretrain_gpt.py` on the
same host and against an external reference, and why the steps of these hosts wait on the CPU.

    g = timings.group(None, "ch02.tp", "H200")       # eager and graphed TP steps, one host
    perf.mfu_table(g)                                # each configuration's step and MFU, in words
    perf.host_per_kernel(ch00.host_cost(g), 2709)    # host time per kernel the graphs remove (µs)
    perf.pairs({1: one, 2: two, 4: four})            # every side-by-side pair, ours / peer
    perf.anchor_table({"4 × H200": four})           # Megatron-LM on an 8×H100 node, beside here
    perf.startup_phases(records)                     # median seconds per launch phase

The fair pair (this trainer against Megatron-LM in one comparison group) is performance_peer's;
loss parity, the page's last section, is performance_parity's.

The side-by-side frames are `timings.side_by_side(...)`'s (one row per configuration, or per
configuration and host with by_sitting). The external reference is TUTORIALS: the Megatron-LM step
times of the vuiseng9/megatron-tutorials series (one 8×H100 80 GB node, NVIDIA's PyTorch 25.09
container, Megatron-LM core_r0.14.0, dropout 0.1, eager, micro-batch = global batch 8), quoted as
published, never as a measurement of this book.
"""

from __future__ import annotations

from megalab.book import references

__all__ = [
    "TUTORIALS",
    "TUTORIALS_MS",
    "mfu_table",
    "host_per_kernel",
    "pairs",
    "pair_rows",
    "pair_bars",
    "anchor_table",
    "startup_phases",
]

# the series' tensor-parallel tables (02-tp-sp.md, rows R1-R3 weak scaling and R12 strong scaling)
TUTORIALS = references.series("02-tp-sp.md")
# (model, TP) -> Megatron-LM's step time (ms) there, global batch 8 = micro-batch 8, seq 1024
TUTORIALS_MS = {
    ("gpt-1.2b", 1): 209.0,
    ("gpt-1.2b", 2): 200.0,
    ("gpt-2.5b", 2): 273.0,
    ("gpt-4.2b", 4): 310.0,
}


def _words(cfg) -> str:
    from megalab.book.frame import describe

    return describe(cfg.replace(cuda_graphs="none"), model=True)


def mfu_table(g):
    """One row per configuration of comparison group `g` (timings.group): configuration (model and
    layout in words), launch ('eager' or 'CUDA graphs'), median_ms, mfu (against the GPU's dense
    bf16 peak) and busy (the profiled configuration's GPU-busy share, else NaN)."""
    import pandas as pd

    return pd.DataFrame(
        {
            "configuration": [_words(c) for c in g["cfg"]],
            "launch": ["eager" if c.cuda_graphs == "none" else "CUDA graphs" for c in g["cfg"]],
            "median_ms": g["median_ms"].to_numpy(),
            "mfu": g["mfu"].to_numpy(),
            "busy": g["gpu_busy"].to_numpy(),
        }
    )


def host_per_kernel(cost: dict, kernels: int) -> float:
    """Host time (µs) per kernel that CUDA graphs remove: the eager step minus the graphed one
    (ch00.host_cost), over the kernels one step runs."""
    if kernels <= 0:
        raise ValueError("kernels must be positive: the kernels of one profiled step")
    return (cost["eager_ms"] - cost["graphs_ms"]) * 1e3 / kernels


def pairs(frames: dict, fusion_from: str | None = None):
    """Every side-by-side pair of `frames` ({"4 × H200": timings.side_by_side(...)}), one row
    each: gpus (the frame's key), configuration (model and layout in words), launch ('eager' or
    'CUDA graphs'), host (1, 2, ... in the order of that frame's recordings), ours_ms, peer_ms,
    ratio, ratio_lo, ratio_hi, apart (the quartile ranges do not overlap: the gap is beyond the
    steps' scatter), cfg (the RunConfig) and fusion_equal: both sides accumulated weight gradients
    unfused (our runs predate `fusion_from`, the trainer change that turned the fusion on;
    records.TRAINER_CHANGES)."""
    import pandas as pd

    if fusion_from is None:
        from megalab.records import TRAINER_CHANGES

        fusion_from = TRAINER_CHANGES[0][0]
    rows = []
    for gpus, t in frames.items():
        order = {at: i + 1 for i, at in enumerate(sorted(set(t["sitting_at"])))}
        for (_, r), c in zip(t.iterrows(), t["cfg"]):
            rows.append(
                {
                    "gpus": gpus,
                    "configuration": _words(c),
                    "launch": "eager" if c.cuda_graphs == "none" else "CUDA graphs",
                    "host": order[r["sitting_at"]],
                    "ours_ms": r["ours_ms"],
                    "peer_ms": r["peer_ms"],
                    "ratio": r["ratio"],
                    "ratio_lo": r["ratio_lo"],
                    "ratio_hi": r["ratio_hi"],
                    "apart": bool(r["ratio_lo"] > 1 or r["ratio_hi"] < 1),
                    "fusion_equal": bool(r["sitting_at"] < fusion_from),
                    "cfg": c,
                }
            )
    return pd.DataFrame(rows)


def anchor_table(frames: dict):
    """Megatron-LM's step on an 8×H100 node (TUTORIALS_MS, eager) beside what the side-by-side
    pairs measured on these hosts (`frames`: {"2 × H100": timings.side_by_side(...)}), for the
    configurations both have (one GPU or pure TP, micro-batch 8, global batch 8): configuration,
    gpus (the frame's key), tutorials_ms, tutorials_mfu (their step time, this book's FLOP count,
    the H100's peak), peer_eager_lo/hi (the peer without graphs, over the hosts here), ours_eager_lo
    /hi, peer_graphs_ms and ours_graphs_ms (with Transformer Engine's CUDA graphs on both sides;
    the median over hosts, NaN where none ran)."""
    import pandas as pd

    from megalab import theory

    def median(values) -> float:
        return float(pd.Series(values, dtype=float).median()) if values else float("nan")

    rows = []
    for gpus, t in frames.items():
        for (name, tp), ms in TUTORIALS_MS.items():
            mine = [
                (c, r)
                for (_, r), c in zip(t.iterrows(), t["cfg"])
                if (c.name, c.tp, c.gpus, c.mbs, c.gbs) == (name, tp, tp, 8, 8)
            ]
            eager = [r for c, r in mine if c.cuda_graphs == "none"]
            graphed = [r for c, r in mine if c.cuda_graphs != "none"]
            if not eager:
                continue
            cfg = next(c for c, _ in mine if c.cuda_graphs == "none")
            rows.append(
                {
                    "configuration": _words(cfg),
                    "gpus": gpus,
                    "tutorials_ms": ms,
                    "tutorials_mfu": theory.mfu(cfg, ms / 1e3, "H100"),
                    "peer_eager_lo": min(r["peer_ms"] for r in eager),
                    "peer_eager_hi": max(r["peer_ms"] for r in eager),
                    "ours_eager_lo": min(r["ours_ms"] for r in eager),
                    "ours_eager_hi": max(r["ours_ms"] for r in eager),
                    "peer_graphs_ms": median([r["peer_ms"] for r in graphed]),
                    "ours_graphs_ms": median([r["ours_ms"] for r in graphed]),
                }
            )
    return pd.DataFrame(rows)


# -- startup
# --------------------------------------------------------------------------------------------
PHASES = {
    "python": "torchrun, Python start",
    "imports": "import torch, Megatron, TE",
    "process_groups": "process groups",
    "model": "build the model",
    "training_state": "init, DDP, optimizer",
    "loop": "data, schedule",
    "first_step": "first step",
}


def startup_phases(records):
    """Median seconds in each launch phase (PHASES, in words) over the ok runs that report their
    phases (summary.startup_marks_s: seconds since launch at the end of each); attrs: runs."""
    import pandas as pd

    marks = pd.DataFrame(
        [
            r["summary"]["startup_marks_s"]
            for r in records
            if r.get("status") == "ok" and (r.get("summary") or {}).get("startup_marks_s")
        ]
    )
    if marks.empty:
        raise LookupError("no run reports its startup phases (summary.startup_marks_s)")
    marks = marks[list(PHASES)]
    phases = marks.diff(axis=1).fillna(marks).median().rename(index=PHASES)
    out = phases.rename("seconds").rename_axis("phase").reset_index()
    out.attrs["runs"] = len(marks)
    return out


def startup_seconds(records) -> list[float]:
    """Launch to the end of the first step (summary.startup_s) of every ok run of the trainer."""
    return [
        float(r["summary"]["startup_s"])
        for r in records
        if r.get("status") == "ok"
        and (r.get("config") or {}).get("runner", "megalab") == "megalab"
        and (r.get("summary") or {}).get("startup_s")
    ]


# -- figures
# -------------------------------------------------------------------------------------------
def pair_rows(p) -> list[str]:
    """One label per row of `pairs(...)`, naming the pair and its host: "gpt-4.2b, TP 4, CUDA graphs
    · 4 × H200 VM 2" (the VM's number only where that kind of host was rented more than once); two
    eager pairs of one configuration on one host are told apart by their micro-batch."""
    many = p.groupby("gpus")["host"].transform("nunique") > 1
    vm = [f"{g} VM" + (f" {h}" if m else "") for g, h, m in zip(p["gpus"], p["host"], many)]
    graphs = [", CUDA graphs" if launch == "CUDA graphs" else "" for launch in p["launch"]]
    rows = [f"{c}{g} · {v}" for c, g, v in zip(p["configuration"], graphs, vm)]
    if "cfg" in p and len(set(rows)) < len(rows):
        twice = {r for r in rows if rows.count(r) > 1}
        rows = [
            r.replace(" · ", f", micro-batch {c.mbs} · ") if r in twice else r
            for r, c in zip(rows, p["cfg"])
        ]
    return rows


def pair_bars(p, title: str = "Our step time over Megatron-LM's, pair by pair"):
    """`pairs(...)` as one row per pair (pair_rows: configuration and host), a dot at the ratio of
    the two step times with its interval, one colour per launch mode, a line at 1 (equal) and the
    ratio written at the right edge."""
    import plotly.graph_objects as go

    from megalab.charts._style import PALETTE, _figure

    rows = pair_rows(p)
    right = float(p["ratio_hi"].max()) + 0.04
    fig = _figure(
        title,
        height=160 + 24 * len(p),
        xaxis_title="our step time / Megatron-LM's (left of 1: ours faster)",
        yaxis=dict(autorange="reversed", type="category", automargin=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
        margin=dict(t=110),
    )
    for i, launch in enumerate(("eager", "CUDA graphs")):
        m = (p["launch"] == launch).to_numpy()
        fig.add_scatter(
            x=p["ratio"][m],
            y=[r for r, k in zip(rows, m) if k],
            mode="markers",
            name=launch,
            marker=dict(color=PALETTE[i], size=10),
            error_x=dict(
                type="data",
                symmetric=False,
                array=(p["ratio_hi"] - p["ratio"])[m],
                arrayminus=(p["ratio"] - p["ratio_lo"])[m],
            ),
        )
    fig.add_trace(
        go.Scatter(
            x=[right] * len(p),
            y=rows,
            mode="text",
            text=[f"{r:.2f}" for r in p["ratio"]],
            textposition="middle right",
            textfont=dict(size=13),
            showlegend=False,
            hoverinfo="skip",
        )
    )
    fig.add_vline(x=1, line_dash="dash", line_color="#555555")
    return fig.update_xaxes(range=[float(p["ratio_lo"].min()) - 0.03, right + 0.08])
