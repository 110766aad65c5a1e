"""What one step is made of: memory per GPU and step time as stacked parts, prediction beside
measurement."""

from __future__ import annotations

import plotly.graph_objects as go

from megalab.charts._style import PALETTE, _figure

PARTS = ("weights", "grads", "optimizer", "activations")  # memory_gib keys of theory.plan
WORDS = {"grads": "gradients", "optimizer": "optimizer state"}  # legend names in words
# above the bars (below them it meets the axis title), in the order the bars stack
LEGEND = dict(orientation="h", x=0, y=1.0, yanchor="bottom", traceorder="normal")
STEP_PARTS = {"compute_s": "compute", "bubble_s": "pipeline bubble", "comm_s": "communication"}


def memory_breakdown(
    pred: dict,
    measured: dict | None = None,
    capacity_gib: float | None = None,
    title: str = "Memory per GPU",
) -> go.Figure:
    """Horizontal stacked bar of predicted memory per GPU (weights, gradients, optimizer state,
    activations) above the measured peak(s), e.g. measured={"allocated": 21.3, "reserved": 23.0};
    each bar ends in its total in GiB, and a line marks the card's capacity."""
    fig = _figure(
        title,
        barmode="stack",
        xaxis_title="GiB per GPU",
        yaxis_title="",
        yaxis_automargin=True,
        legend=LEGEND,
    )
    total = sum(pred.get(part, 0.0) for part in PARTS)
    for i, part in enumerate(PARTS):
        last = i == len(PARTS) - 1
        fig.add_bar(
            y=["predicted"],
            x=[pred.get(part, 0.0)],
            orientation="h",
            name=WORDS.get(part, part),
            marker_color=PALETTE[i],
            text=[f"{total:.1f} GiB"] if last else None,
            textposition="outside" if last else None,
        )
    for i, (name, value) in enumerate((measured or {}).items()):
        fig.add_bar(
            y=[f"measured {name}"],
            x=[value],
            orientation="h",
            name=f"measured {name}",
            marker_color=PALETTE[4 + i % 4],
            marker_pattern_shape="/",
            text=[f"{value:.1f} GiB"],
            textposition="outside",
        )
    if capacity_gib:
        fig.add_vline(
            x=capacity_gib,
            line_dash="dash",
            line_color="black",
            annotation_text=f"capacity {capacity_gib:.0f} GiB",
            annotation_position="bottom left",
        )
    return fig


def step_time_breakdown(parts_by_label: dict[str, dict], title: str = "Step time") -> go.Figure:
    """Horizontal stacked bars, one per label, of {compute_s, bubble_s, comm_s} (given in seconds,
    drawn in ms), named in words."""
    fig = _figure(
        title,
        barmode="stack",
        xaxis_title="ms per step",
        yaxis_title="",
        yaxis_automargin=True,
        legend=LEGEND,
    )
    labels = list(parts_by_label)
    for i, (part, words) in enumerate(STEP_PARTS.items()):
        fig.add_bar(
            y=labels,
            x=[1e3 * parts_by_label[k].get(part, 0.0) for k in labels],
            orientation="h",
            name=words,
            marker_color=PALETTE[i],
        )
    return fig
