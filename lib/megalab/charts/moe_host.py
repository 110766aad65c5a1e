"""Where a one-GPU step's time goes when the host, not the GPU, sets the pace: wall time against
GPU-busy time and kernels per step (megalab.records.profiles), and step time and MFU against the
micro-batch size."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from megalab.charts._style import PALETTE, SYMBOLS, TEMPLATE, _split_yours, _yours


def busy_vs_wall(
    df, label: str = "label", title: str = "Per step: wall time against GPU-busy time"
) -> go.Figure:
    """Two panels over the same rows of `df` (profiles.compare's columns, and a column `label`
    naming each row on the x axis): seconds per step, the wall time (bars) beside the time the GPU
    was busy (bars, labelled with busy_frac); and kernels per step. A GPU busy for a small share of
    the step waits on the host."""
    x = df[label].astype(str).tolist()
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.62, 0.38],
        horizontal_spacing=0.12,
        subplot_titles=("seconds per step", "GPU kernels per step"),
    )
    fig.update_layout(template=TEMPLATE, title=title, barmode="group")
    fig.add_bar(
        x=x,
        y=df["wall_s"],
        name="wall time (unprofiled run)",
        marker_color=PALETTE[0],
        texttemplate="%{y:.2f} s",
        textposition="outside",
        row=1,
        col=1,
    )
    fig.add_bar(
        x=x,
        y=df["busy_s"],
        name="GPU busy (profiled step)",
        marker_color=PALETTE[2],
        text=[f"{f:.0%} busy" for f in df["busy_frac"]],
        textposition="outside",
        row=1,
        col=1,
    )
    fig.add_bar(
        x=x,
        y=df["kernels"],
        name="kernels",
        marker_color=PALETTE[7],
        showlegend=False,
        texttemplate="%{y:,.0f}",
        textposition="outside",
        row=1,
        col=2,
    )
    fig.update_traces(cliponaxis=False)
    fig.update_yaxes(
        title_text="seconds", range=[0, 1.15 * float(df["wall_s"].max())], row=1, col=1
    )
    fig.update_yaxes(
        title_text="kernels", range=[0, 1.15 * float(df["kernels"].max())], row=1, col=2
    )
    fig.update_xaxes(type="category")
    return fig


def micro_batch_sweep(
    df,
    x: str = "mbs",
    by: str = "model",
    title: str = "Step time and MFU against the micro-batch size",
    x_title: str = "micro-batch size (sequences)",
) -> go.Figure:
    """Step time (top, seconds) and MFU (bottom) against `x`, one colour per value of `by`: measured
    as markers on solid lines (step_time_s, mfu), predicted as dashed lines (predicted_s,
    predicted_mfu, where present). Rows whose `source` is "yours" get open diamonds named "...
    (yours)"."""
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4], vertical_spacing=0.08
    )
    fig.update_layout(template=TEMPLATE, title=title)
    for i, (value, part) in enumerate(df.groupby(by, sort=False)):
        colour = PALETTE[i % len(PALETTE)]
        book, mine = (p.sort_values(x) for p in _split_yours(part))
        for row, (meas, pred) in enumerate(
            (("step_time_s", "predicted_s"), ("mfu", "predicted_mfu")), start=1
        ):
            first = row == 1
            if pred in book and book[pred].notna().any():
                fig.add_scatter(
                    x=book[x],
                    y=book[pred],
                    mode="lines",
                    name=f"{value}, predicted",
                    legendgroup=f"{value}p",
                    showlegend=first,
                    line=dict(color=colour, dash="dash"),
                    row=row,
                    col=1,
                )
            fig.add_scatter(
                x=book[x],
                y=book[meas],
                mode="lines+markers",
                name=f"{value}, measured",
                legendgroup=str(value),
                showlegend=first,
                marker=dict(size=10, color=colour, symbol=SYMBOLS["reference"]),
                line=dict(color=colour),
                row=row,
                col=1,
            )
            if len(mine):
                fig.add_scatter(
                    x=mine[x],
                    y=mine[meas],
                    mode="markers",
                    name=_yours(f"{value}, measured"),
                    legendgroup=f"{value}y",
                    showlegend=first,
                    row=row,
                    col=1,
                    marker=dict(size=12, color=colour, symbol=SYMBOLS["yours"]),
                )
    fig.update_yaxes(title_text="seconds per step", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="MFU", tickformat=".0%", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(tickvals=sorted(df[x].unique()), type="log")
    fig.update_xaxes(title_text=x_title, row=2, col=1)
    return fig
