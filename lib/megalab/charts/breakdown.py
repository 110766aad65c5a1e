"""What one step is made of: memory per GPU and step time as stacked parts, prediction beside
measurement."""

from __future__ import annotations

import plotly.graph_objects as go

from megalab.charts._style import PALETTE, _figure

PARTS = ("weights", "grads", "optimizer", "activations")  # memory_gib keys of theory.plan


def memory_breakdown(
    pred: dict,
    measured: dict | None = None,
    capacity_gib: float | None = None,
    title: str = "Memory per GPU",
) -> go.Figure:
    """Stacked bar of predicted memory per GPU (weights, grads, optimizer, activations) beside the
    measured peak(s), e.g. measured={"allocated": 21.3, "reserved": 23.0}; a line at the card's
    capacity."""
    fig = _figure(title, barmode="stack", yaxis_title="GiB per GPU", xaxis_title="")
    for i, part in enumerate(PARTS):
        fig.add_bar(x=["predicted"], y=[pred.get(part, 0.0)], name=part, marker_color=PALETTE[i])
    for i, (name, value) in enumerate((measured or {}).items()):
        fig.add_bar(
            x=[f"measured {name}"],
            y=[value],
            name=f"measured {name}",
            marker_color=PALETTE[4 + i % 4],
            marker_pattern_shape="/",
        )
    if capacity_gib:
        fig.add_hline(
            y=capacity_gib,
            line_dash="dash",
            line_color="black",
            annotation_text=f"capacity {capacity_gib:.0f} GiB",
            annotation_position="top left",
        )
    return fig


def step_time_breakdown(parts_by_label: dict[str, dict], title: str = "Step time") -> go.Figure:
    """Horizontal stacked bars, one per label, of {compute_s, bubble_s, comm_s} (seconds)."""
    fig = _figure(
        title,
        barmode="stack",
        xaxis_title="seconds per step",
        yaxis_title="",
        yaxis_automargin=True,
    )
    labels = list(parts_by_label)
    for i, part in enumerate(("compute_s", "bubble_s", "comm_s")):
        fig.add_bar(
            y=labels,
            x=[parts_by_label[k].get(part, 0.0) for k in labels],
            orientation="h",
            name=part.removesuffix("_s"),
            marker_color=PALETTE[i],
        )
    return fig
