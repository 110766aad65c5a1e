"""Where a profiled step's time goes: its GPU kernels by kind, and the time the GPU waits between
them."""

from __future__ import annotations

import plotly.graph_objects as go

from megalab.charts._style import PALETTE, _figure

KIND_COLOURS = {
    "gemm": PALETTE[0],
    "attention": PALETTE[1],
    "other": PALETTE[2],
    "nccl": PALETTE[3],
    "idle": "#bbbbbb",
}  # the colours of charts.kernel_timeline, idle grey


def kernel_time(
    parts_by_label: dict[str, dict],
    title: str = "GPU time per step by kernel kind",
    unit: str = "ms",
    y_title: str = "",
) -> go.Figure:
    """Horizontal stacked bars, one per label (first on top), of {kind: time}: kernel kinds (gemm,
    attention, other, nccl) in their timeline colours and in that order, then any other part, and
    `idle` (the GPU waiting, grey, hatched) last. Kinds absent or zero in every bar get no trace."""
    labels = list(parts_by_label)
    seen = list(dict.fromkeys(k for parts in parts_by_label.values() for k in parts))
    order = list(KIND_COLOURS)
    kinds = sorted(seen, key=lambda k: (k == "idle", order.index(k) if k in order else len(order)))
    fig = _figure(
        title,
        barmode="stack",
        xaxis_title=f"{unit} per step",
        yaxis_title=y_title,
        yaxis_automargin=True,
    )
    for i, kind in enumerate(kinds):
        values = [float(parts_by_label[label].get(kind, 0.0)) for label in labels]
        if not any(values):
            continue
        fig.add_bar(
            y=labels,
            x=values,
            orientation="h",
            name=kind,
            marker_color=KIND_COLOURS.get(kind, PALETTE[(4 + i) % len(PALETTE)]),
            marker_pattern_shape="/" if kind == "idle" else "",
            hovertemplate=f"%{{y}}: %{{x:.1f}} {unit}<extra>{kind}</extra>",
        )
    return fig.update_yaxes(autorange="reversed")
