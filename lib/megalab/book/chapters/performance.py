"""The performance page: how fast the trainer runs, against Megatron-LM's `pretrain_gpt.py` on the
same host and against an external reference, and why the steps of these hosts wait on the CPU.

    g = timings.group(None, "ch02.tp", "H200")       # eager and graphed TP steps, one host
    perf.mfu_table(g)                                # each configuration's step and MFU, in words
    perf.host_per_kernel(ch00.host_cost(g), 2709)    # host time per kernel the graphs remove (µs)
    g = perf.peer_group(None, "H200")                # the fair pair: trainer and peer, one group
    perf.peer_pair(g)                                # per launch mode: ours / peer and intervals
    perf.peer_runs(None, "H200")                     # the pair's runs one by one, in order
    perf.pairs({1: one, 2: two, 4: four})            # every side-by-side pair, ours / peer
    perf.anchor_table({"4 × H200": four})           # Megatron-LM on an 8×H100 node, beside here
    perf.parity_checks(records, errata)              # every parity layout's verdict
    perf.startup_phases(records)                     # median seconds per launch phase

The side-by-side frames are `timings.side_by_side(...)`'s (one row per configuration, or per
configuration and host with by_sitting). The external reference is TUTORIALS: the Megatron-LM step
times of the vuiseng9/megatron-tutorials series (one 8×H100 80 GB node, NVIDIA's PyTorch 25.09
container, Megatron-LM core_r0.14.0, dropout 0.1, eager, micro-batch = global batch 8), quoted as
published, never as a measurement of this book.
"""

from __future__ import annotations

__all__ = [
    "peer_group",
    "peer_pair",
    "peer_figure",
    "peer_runs",
    "peer_losses",
    "TUTORIALS",
    "TUTORIALS_MS",
    "mfu_table",
    "host_per_kernel",
    "pairs",
    "pair_rows",
    "pair_bars",
    "anchor_table",
    "parity_checks",
    "parity_table",
    "stable_parity",
    "parity_gaps",
    "startup_phases",
]

# the series' tensor-parallel tables (02-tp-sp.md, rows R1-R3 weak scaling and R12 strong scaling)
TUTORIALS = (
    "https://github.com/vuiseng9/megatron-tutorials/blob/"
    "0b2c030a1db783c2c15313bd91b2db10860ac637/02-tp-sp.md"
)
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


# -- the fair pair (performance_runs.PEER_GROUP)
# ---------------------------------------------------------------
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


# -- loss parity
# ----------------------------------------------------------------------------------------
LLAMA = "untied-rope-RMSNorm-swiglu"  # the smooth model's change from the gpt-350m preset


def parity_checks(records, errata: dict, parity=None) -> list:
    """(RunConfig, ParityResult or None, erratum reasons) of every layout recorded with the tag
    `parity` (the single-GPU references left out), judged by `parity` (default
    sweep.parity(cfg, mode="cached", quiet=True)); None where no reference is recorded."""
    from megalab.jobs import sweep
    from megalab.records.store import NotRecorded
    from megalab.runs.config import RunConfig

    groups: dict = {}
    for r in records:
        if "parity" in (r.get("tags") or []):
            c = RunConfig.from_dict(r["config"])
            groups.setdefault(sweep.reference_of(c).key, {})[c.key] = c
    judge = parity or (lambda c: sweep.parity(c, mode="cached", quiet=True))
    out = []
    for ref, cs in groups.items():
        for key, c in cs.items():
            if key == ref:
                continue
            keys = {c.key, ref}
            why = sorted({errata[r["id"]] for r in records if r["key"] in keys and r["id"] in errata})
            try:
                out.append((c, judge(c), why))
            except NotRecorded:
                out.append((c, None, why))
    return out


def parity_table(checked):
    """One row per checked layout: model, change (from its preset), layout (words), impl, lr,
    max_diff, band, verdict ('passes', 'fails', 'set aside' for an erratum, 'no reference'),
    spikes (the reference's spike steps)."""
    import pandas as pd
    from megalab.book.frame import describe

    rows = []
    for c, p, why in checked:
        verdict = (
            ("passes" if p.passes else "fails") if p else ("set aside" if why else "no reference")
        )
        rows.append(
            {
                "model": c.name,
                "change": c.preset_changes or "as preset",
                "layout": describe(c),
                "impl": c.impl,
                "lr": c.lr,
                "max_diff": p.max_abs_diff if p else float("nan"),
                "band": p.band if p else float("nan"),
                "verdict": verdict,
                "spikes": len(p.spikes) if p else 0,
            }
        )
    return pd.DataFrame(rows)


def stable_parity(checked, impl: str = "local", lr: float = 1e-4) -> list:
    """(RunConfig, ParityResult) of the Llama-style gpt-350m (LLAMA) at `lr` with layer spec
    `impl`: the model that trains without loss spikes."""
    return [
        (c, p)
        for c, p, _ in checked
        if p is not None
        and c.name == "gpt-350m"
        and c.preset_changes == LLAMA
        and c.impl == impl
        and c.lr == lr
    ]


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


def parity_curves(stable) -> dict:
    """{name: {"step", "loss"}} for charts.loss_parity: the one-GPU reference of `stable`
    (stable_parity's pairs) first, then each layout, named in words without the layer spec."""
    from megalab.book.frame import describe

    if not stable:
        raise LookupError("no parity layout to draw")
    ref = stable[0][1].series
    out = {"1 GPU": {"step": list(ref["step"]), "loss": list(ref["reference"])}}
    for c, p in stable:
        name = describe(c.replace(impl="te"))
        out[name] = {"step": list(p.series["step"]), "loss": list(p.series["layout"])}
    return out


def parity_gaps(pairs, title: str = "Loss minus the one-GPU loss, step by step"):
    """Each parity layout's loss minus its one-GPU reference, step by step (`pairs`: stable_parity's
    (RunConfig, ParityResult), Megatron Core's plain layers and Transformer Engine's together), one
    colour per layer spec, the layout named on hover, inside the ±band (the narrowest of the pairs'
    bands) a layout must not leave."""
    from megalab.book.frame import describe
    from megalab.charts._style import PALETTE, _figure

    if not pairs:
        raise LookupError("no parity layout to draw")
    band = min(p.band for _, p in pairs)
    steps = list(pairs[0][1].series["step"])
    fig = _figure(
        title,
        xaxis_title="step",
        yaxis_title="loss − one-GPU loss (nats)",
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
        margin=dict(t=100),
    )
    fig.add_scatter(
        x=steps + steps[::-1],
        y=[band] * len(steps) + [-band] * len(steps),
        fill="toself",
        fillcolor="rgba(31,95,168,0.12)",
        line=dict(width=0),
        name=f"±{band:g} nats: the band a layout must stay in",
        hoverinfo="skip",
    )
    specs = {"local": "Megatron Core's plain layers", "te": "Transformer Engine layers"}
    shown = set()
    for c, p in pairs:
        gap = p.series["layout"] - p.series["reference"]
        fig.add_scatter(
            x=p.series["step"],
            y=gap,
            mode="lines",
            name=specs.get(c.impl, c.impl),
            legendgroup=c.impl,
            showlegend=c.impl not in shown,
            line=dict(color=PALETTE[1 if c.impl == "te" else 0], width=1.5),
            hovertext=describe(c.replace(impl="local")),
            hoverinfo="text+y",
        )
        shown.add(c.impl)
    return fig.update_yaxes(range=[-2 * band, 2 * band], zeroline=True)
