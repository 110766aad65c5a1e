"""A measured metric against a swept setting: throughput against GPUs (with the ideal line), any
metric against any knob."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from megalab.charts._style import (
    PALETTE,
    SYMBOLS,
    TEMPLATE,
    _by_source,
    _figure,
    _split_yours,
    _yours,
)


def scaling(
    df,
    x: str = "gpus",
    y: str = "tokens_per_s",
    ideal: bool = True,
    kind: str = "weak",
    title: str | None = None,
) -> go.Figure:
    """Throughput `y` against `x` (GPUs) with the ideal linear line, and the efficiency y / ideal in
    a second panel. Ideal = the smallest x's throughput scaled by x / x_min (weak: per-GPU work
    fixed; strong: global batch fixed; both ideally give linear throughput)."""
    if kind not in ("weak", "strong"):
        raise ValueError(f"kind={kind!r}: use 'weak' or 'strong'")
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.68, 0.32], vertical_spacing=0.06
    )
    fig.update_layout(template=TEMPLATE, title=title or f"{kind.capitalize()} scaling")
    ref = df[df["source"] == "reference"] if "source" in df else df
    ref = ref if len(ref) else df
    base = ref.sort_values(x).iloc[0]
    per_x = float(base[y]) / float(base[x])
    for i, (src, part) in enumerate(_by_source(df)):
        part = part.sort_values(x)
        marker = dict(symbol=SYMBOLS.get(src, "circle"), size=10, color=PALETTE[i])
        fig.add_scatter(
            x=part[x],
            y=part[y],
            mode="lines+markers",
            name=f"measured ({src})",
            marker=marker,
            row=1,
            col=1,
        )
        fig.add_scatter(
            x=part[x],
            y=part[y] / (per_x * part[x]),
            mode="lines+markers",
            marker=marker,
            name=f"efficiency ({src})",
            showlegend=False,
            row=2,
            col=1,
        )
    if ideal:
        xs = sorted(df[x].unique())
        fig.add_scatter(
            x=xs,
            y=[per_x * v for v in xs],
            mode="lines",
            name="ideal (linear)",
            line=dict(dash="dash", color="gray"),
            row=1,
            col=1,
        )
        fig.add_hline(y=1.0, line_dash="dash", line_color="gray", row=2, col=1)
    fig.update_yaxes(title_text=y, row=1, col=1)
    fig.update_yaxes(title_text="efficiency", tickformat=".0%", row=2, col=1)
    fig.update_xaxes(title_text=x, row=2, col=1)
    fig.update_xaxes(tickvals=sorted(df[x].unique()))  # whole GPU counts, no 1.5 GPUs
    return fig


def metric_vs(
    df,
    x: str,
    y: str,
    by: str | None = None,
    peer: dict | None = None,
    peer_name: str = "peer",
    title: str | None = None,
    y_title: str | None = None,
) -> go.Figure:
    """One measured metric `y` against a swept setting `x` (e.g. MFU against micro-batch size), one
    line per value of the column `by`, and optionally another code's numbers {x: y} as star markers.
    Rows whose `source` is "yours" (a reader's own runs) get their own dotted line and open markers
    in their group's colour, named "... (yours)"."""
    fig = _figure(title or f"{y} against {x}", xaxis_title=x, yaxis_title=y_title or y)
    groups = [(None, df)] if by is None else list(df.groupby(by, sort=True))
    for i, (value, part) in enumerate(groups):
        name = "measured" if by is None else f"{by} = {value}"
        book, mine = (p.sort_values(x) for p in _split_yours(part))
        if len(book) or not len(mine):
            fig.add_scatter(
                x=book[x],
                y=book[y],
                mode="lines+markers",
                marker=dict(size=10, color=PALETTE[i]),
                name=name,
            )
        if len(mine):
            fig.add_scatter(
                x=mine[x],
                y=mine[y],
                mode="lines+markers",
                name=_yours(name),
                line=dict(dash="dot"),
                marker=dict(size=12, color=PALETTE[i], symbol=SYMBOLS["yours"]),
            )
    if peer:
        fig.add_scatter(
            x=list(peer),
            y=list(peer.values()),
            mode="markers",
            name=peer_name,
            marker=dict(symbol="star", size=16, color="black"),
        )
    if y in ("mfu",) or (y_title or "").lower().startswith("mfu"):
        fig.update_yaxes(tickformat=".0%")
    return fig
