"""A matrix as coloured cells, e.g. tokens routed to each expert in each layer."""

from __future__ import annotations

import plotly.graph_objects as go

from megalab.charts._style import _figure


def heatmap(
    matrix,
    x_title: str,
    y_title: str,
    title: str = "Heat map",
    z_title: str = "",
    center: float | None = None,
    text_format: str | None = None,
) -> go.Figure:
    """One cell per value of `matrix` (rows on y, the first on top; columns on x): a DataFrame's
    index and columns label the cells, a list of lists or an array is numbered from 0. With `center`
    (e.g. the tokens each expert would get under perfect balance) the colours diverge around it;
    with `text_format` (e.g. ".0f") each cell shows its value."""
    if hasattr(matrix, "columns"):
        z, xs, ys = matrix.to_numpy().tolist(), list(matrix.columns), list(matrix.index)
    else:
        z = [list(row) for row in matrix]
        xs, ys = list(range(len(z[0]) if z else 0)), list(range(len(z)))
    fig = _figure(
        title,
        xaxis_title=x_title,
        yaxis_title=y_title,
        xaxis_type="category",
        yaxis_type="category",
        yaxis_autorange="reversed",
    )
    scale = dict(colorscale="Blues") if center is None else dict(colorscale="RdBu_r", zmid=center)
    text = dict(texttemplate=f"%{{z:{text_format}}}") if text_format else {}
    fig.add_heatmap(
        z=z,
        x=[str(v) for v in xs],
        y=[str(v) for v in ys],
        colorbar_title=z_title,
        hovertemplate=f"{y_title} %{{y}}, {x_title} %{{x}}: %{{z}}<extra></extra>",
        **scale,
        **text,
    )
    return fig
