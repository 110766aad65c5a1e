"""Choices side by side: bars of one metric per choice, and the trade-off between two metrics with its Pareto frontier."""
from __future__ import annotations

import plotly.graph_objects as go

from megalab.charts._style import PALETTE, _figure


def grouped_bars(df, x: str, y: str, color: str | None = None, title: str | None = None,
                 y_title: str | None = None, text_format: str = ".3g") -> go.Figure:
    """Bars of `y` for each value of `x`, one colour per value of `color` (e.g. predicted / measured)."""
    fig = _figure(title or f"{y} by {x}", barmode="group", xaxis_title=x, yaxis_title=y_title or y,
                  xaxis_type="category")
    groups = [(None, df)] if color is None else list(df.groupby(color, sort=False))
    for i, (value, part) in enumerate(groups):
        fig.add_bar(x=part[x].astype(str), y=part[y], name=str(value) if color else y,
                    marker_color=PALETTE[i % len(PALETTE)], texttemplate=f"%{{y:{text_format}}}",
                    textposition="outside")
    if y in ("mfu", "efficiency"):
        fig.update_yaxes(tickformat=".0%")
    return fig


def frontier(df, x: str, y: str, label: str, maximize: tuple[str, ...] = (), title: str | None = None,
             x_title: str | None = None, y_title: str | None = None) -> go.Figure:
    """Trade-off scatter, one point per choice (a row of `df`, named by its `label` column), e.g. step
    time against peak memory per recompute setting. Lower is better on both axes unless the column is
    named in `maximize`; the Pareto frontier (the choices no other beats on both) is drawn as a line,
    and the choices off it are grey."""
    fig = _figure(title or f"{y} against {x}", xaxis_title=x_title or x, yaxis_title=y_title or y)
    best = _pareto(df, x, y, maximize)
    on = df.index.isin(best.index)
    fig.add_scatter(x=df[x], y=df[y], mode="markers+text", name="choices", text=df[label].astype(str),
                    textposition="top center", hovertemplate="%{text}: %{x:.3g}, %{y:.3g}<extra></extra>",
                    marker=dict(size=11, color=[PALETTE[0] if o else "#aaaaaa" for o in on]))
    fig.add_scatter(x=best[x], y=best[y], mode="lines", name="Pareto frontier",
                    line=dict(dash="dash", color=PALETTE[0]), hoverinfo="skip")
    return fig


def _pareto(df, x: str, y: str, maximize: tuple[str, ...]):
    """The rows of `df` no other row beats on both x and y, ordered along x (better x first)."""
    sx, sy = (-1 if x in maximize else 1), (-1 if y in maximize else 1)
    ranked = df.assign(_x=sx * df[x], _y=sy * df[y]).sort_values(["_x", "_y"], kind="stable")
    keep, best_y = [], float("inf")
    for index, value in ranked["_y"].items():
        if value < best_y:
            keep.append(index)
            best_y = value
    return df.loc[keep]
