"""Who runs what when: the kernels of one step on their CUDA streams, Gantt charts of tasks on rows
(stages, ranks), pipeline schedules, and the pipeline bubble against the number of micro-batches."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from megalab.charts._style import PALETTE, SYMBOLS, TEMPLATE, _figure, _yours

DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
# pipeline_bubble: the `source` values drawn as markers
MEASURED = ("measured", "reference", "yours")


def _add_spans(fig: go.Figure, spans: list[dict], kinds: list, unit: str, **bar) -> None:
    """One horizontal-bar trace per kind (colour PALETTE[i] for kinds[i]) of spans {y, start,
    length, kind[, text][, stream]}: each bar starts at `start` and is `length` long, in `unit`; a
    stream id shows in the hover."""
    for i, kind in enumerate(kinds):
        part = [s for s in spans if s["kind"] == kind]
        if not part:
            continue
        text = [s.get("text") for s in part]
        labels = (
            dict(text=text, textposition="inside", insidetextanchor="middle", textangle=0)
            if any(t is not None for t in text)
            else {}
        )
        hover = (
            "%{text}: " if labels else ""
        ) + f"%{{base:.3f}} {unit} + %{{x:.3f}} {unit}<extra>{kind}</extra>"
        streams = dict(customdata=[s["stream"] for s in part]) if "stream" in part[0] else {}
        if streams:
            hover = hover.replace("<extra>", " (stream %{customdata})<extra>")
        fig.add_bar(
            y=[s["y"] for s in part],
            x=[s["length"] for s in part],
            base=[s["start"] for s in part],
            orientation="h",
            name=str(kind),
            marker_color=PALETTE[i % len(PALETTE)],
            hovertemplate=hover,
            **labels,
            **streams,
            **bar,
        )


KERNEL_KINDS = ("gemm", "attention", "other", "nccl")  # kernel_timeline's colours, in this order
KERNEL_WORDS = {  # kernel_timeline(words=True): the legend in words
    "gemm": "matrix multiplies (GEMM)",
    "attention": "attention",
    "other": "other kernels (norms, element-wise, optimizer)",
    "nccl": "NCCL communication",
}
MAIN, SIDE_NCCL, SIDE_COMPUTE = "main stream", "other streams: NCCL", "other streams: compute"


def _stream_kinds(rows: list[dict]) -> dict:
    """{stream id: its row's words}: the stream with the most kernel time is the main stream (where
    the framework launches its compute); another stream is an NCCL stream when NCCL kernels fill at
    least half of its kernel time, a compute stream otherwise. A profile records stream ids only, so
    the kind is read off the kernels each stream ran."""
    total: dict = {}
    nccl: dict = {}
    for r in rows:
        d = max(float(r["duration_ms"]), 0.0)
        total[r["stream"]] = total.get(r["stream"], 0.0) + d
        nccl[r["stream"]] = nccl.get(r["stream"], 0.0) + (d if r["category"] == "nccl" else 0.0)
    main = max(total, key=total.get) if total else None
    return {
        s: MAIN if s == main else SIDE_NCCL if nccl[s] >= total[s] / 2 else SIDE_COMPUTE
        for s in total
    }


def kernel_timeline(
    profile: dict, title: str = "GPU kernels of one training step", words: bool = False
) -> go.Figure:
    """The kernels of one profiled step (a record's `profile.timeline`) coloured by kind, on one row
    per kind of CUDA stream (_stream_kinds: the main stream, the other streams that mostly run NCCL,
    the other compute streams; the stream id is in each kernel's hover): where communication runs,
    and whether it overlaps compute on another stream. The time axis spans the step, from its first
    kernel to the end of its last. `words`: the legend names each kind in words (KERNEL_WORDS), not
    by its category ("gemm", "nccl")."""
    t = profile["timeline"]
    rows = [dict(zip(t["columns"], k)) for k in t["kernels"]]
    kinds = _stream_kinds(rows)
    order = [k for k in (MAIN, SIDE_NCCL, SIDE_COMPUTE) if k in kinds.values()]
    start = min((r["start_ms"] for r in rows), default=0.0)
    end = max((r["start_ms"] + max(r["duration_ms"], 0.0) for r in rows), default=1.0)
    fig = _figure(
        title,
        barmode="overlay",
        xaxis_title="milliseconds from the step's first kernel",
        yaxis_title=None,
        yaxis_type="category",
        bargap=0.3,
        height=260 + 50 * len(order),
    )
    spans = [
        dict(
            y=kinds[r["stream"]],
            start=r["start_ms"] - start,
            length=max(r["duration_ms"], 0.002),
            kind=r["category"],
            stream=r["stream"],
        )
        for r in rows
    ]
    # fixed colours
    kernel_kinds = list(KERNEL_KINDS) + sorted({s["kind"] for s in spans} - set(KERNEL_KINDS))
    _add_spans(fig, spans, kernel_kinds, "ms", marker_line_width=0)
    if words:
        fig.for_each_trace(lambda tr: tr.update(name=KERNEL_WORDS.get(tr.name, tr.name)))
    fig.update_yaxes(
        categoryorder="array",
        categoryarray=order,
        autorange="reversed",
        automargin=True,
        ticksuffix=" ",
    )
    return fig.update_xaxes(range=[0, end - start], automargin=True)


def gantt(
    tasks,
    title: str = "Schedule",
    row_title: str = "stage",
    x_title: str = "seconds from the step's start",
) -> go.Figure:
    """Tasks as horizontal bars on their rows (pipeline stage, rank; the first row on top): `tasks`
    is a DataFrame or a list of dicts with row, start_s, end_s, kind (e.g. "F"/"B", one colour each)
    and an optional label written in the bar (e.g. the micro-batch). Idle time shows as gaps. {panel
    title: tasks} draws schedules one above the other on a shared time axis, e.g. measured beside
    ideal."""
    panels = {
        name: _records(t)
        for name, t in (tasks.items() if isinstance(tasks, dict) else [(None, tasks)])
    }
    kinds = list(dict.fromkeys(t["kind"] for ts in panels.values() for t in ts))
    n_rows = sum(len({t["row"] for t in ts}) for ts in panels.values())
    titles = [str(name) for name in panels] if isinstance(tasks, dict) else None
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        shared_xaxes=True,
        subplot_titles=titles,
        vertical_spacing=0.3 / len(panels),
    )
    fig.update_layout(
        template=TEMPLATE,
        title=title,
        barmode="overlay",
        bargap=0.25,
        height=160 + 60 * len(panels) + 36 * n_rows,
    )
    for p, ts in enumerate(panels.values(), start=1):
        spans = [
            dict(
                y=str(t["row"]),
                start=t["start_s"],
                length=t["end_s"] - t["start_s"],
                kind=t["kind"],
                **({"text": str(t["label"])} if _has_label(t) else {}),
            )
            for t in ts
        ]
        _add_spans(fig, spans, kinds, "s", row=p, col=1, marker_line=dict(color="white", width=1))
        order = [str(r) for r in _ordered(t["row"] for t in ts)]
        fig.update_yaxes(
            type="category",
            categoryorder="array",
            categoryarray=order,
            autorange="reversed",
            title_text=row_title,
            row=p,
            col=1,
        )
    shown = set()
    for trace in fig.data:  # one legend entry per kind, however many panels draw it
        trace.update(legendgroup=trace.name, showlegend=trace.name not in shown)
        shown.add(trace.name)
    fig.update_xaxes(title_text=x_title, row=len(panels), col=1)
    return fig


def pipeline_schedule(
    schedules: dict,
    title: str = "Pipeline schedule",
    x_title: str = "time (one micro-batch's forward through one stage = 1)",
) -> go.Figure:
    """Pipeline schedules as Gantt charts on a shared time axis, one panel each ({panel title:
    tasks}): `tasks` as theory.schedule returns them (stage, microbatch, chunk, kind "F"/"B", start,
    end). One row per stage, forward and backward passes in their own colours (per chunk where a
    schedule has several: the same chunk, the same colour in every panel), each bar labelled with
    its micro-batch; the gaps are the bubble."""
    chunked = any(t["chunk"] > 0 for tasks in schedules.values() for t in tasks)

    def kind(t: dict) -> str:
        name = "forward" if t["kind"] == "F" else "backward"
        return f"{name}, chunk {t['chunk']}" if chunked else name

    panels = {
        name: [
            dict(
                row=f"stage {t['stage']}",
                start_s=t["start"],
                end_s=t["end"],
                kind=kind(t),
                label=t["microbatch"],
            )
            for t in tasks
        ]
        for name, tasks in schedules.items()
    }
    return gantt(panels, title=title, row_title="", x_title=x_title)


def pipeline_bubble(
    df,
    y: str = "bubble",
    title: str = "Pipeline bubble against the number of micro-batches",
    y_title: str = "bubble / ideal step",
) -> go.Figure:
    """The bubble `y` against micro-batches m (log axis), one colour per pipeline size p and one
    dash per chunk count v (solid: v = 1). `df` has columns m, p, v and `y`; rows whose optional
    `source` column says "measured" (or "reference", a recorded run's) are drawn as markers over the
    lines, and rows of a reader's own runs ("yours") as open diamonds named "... (yours)"."""
    fig = _figure(
        title, xaxis_title="micro-batches per step, m", yaxis_title=y_title, xaxis_type="log"
    )
    df = df if "source" in df else df.assign(source="predicted")
    measured = df["source"].isin(MEASURED)
    ps, vs = sorted(df["p"].unique()), sorted(df["v"].unique())
    for (p, v), part in df[~measured].groupby(["p", "v"], sort=True):
        part = part.sort_values("m")
        fig.add_scatter(
            x=part["m"],
            y=part[y],
            mode="lines",
            name=f"p = {p}, v = {v}",
            line=dict(
                color=PALETTE[ps.index(p) % len(PALETTE)], dash=DASHES[vs.index(v) % len(DASHES)]
            ),
        )
    for (src, p, v), part in df[measured].groupby(["source", "p", "v"], sort=True):
        name = f"measured, p = {p}, v = {v}"
        fig.add_scatter(
            x=part["m"],
            y=part[y],
            mode="markers",
            name=_yours(name) if src == "yours" else name,
            marker=dict(
                size=11,
                color=PALETTE[ps.index(p) % len(PALETTE)],
                symbol=SYMBOLS["yours"] if src == "yours" else "circle",
            ),
        )
    fig.update_xaxes(tickvals=sorted(df["m"].unique()))
    return fig.update_yaxes(tickformat=".0%")


def _records(tasks) -> list[dict]:
    return tasks.to_dict("records") if hasattr(tasks, "to_dict") else [dict(t) for t in tasks]


def _has_label(task: dict) -> bool:
    label = task.get("label")
    # a DataFrame's missing label is NaN, and NaN != NaN
    return label is not None and label == label


def _ordered(values) -> list:
    """Distinct values sorted, or in order of appearance where they cannot be compared."""
    distinct = list(dict.fromkeys(values))
    try:
        return sorted(distinct)
    except TypeError:
        return distinct
