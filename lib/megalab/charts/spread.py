"""How measured values scatter: a histogram against a target, step-time boxes across recorded runs,
and predictions against measurements on log axes."""

from __future__ import annotations

import plotly.graph_objects as go

from megalab.charts._style import PALETTE, _figure


def distribution(
    values,
    target: float | None = None,
    x_title: str = "value",
    title: str = "Distribution",
    target_name: str = "target",
) -> go.Figure:
    """Histogram of measured values, with a dashed vertical line at a target (e.g. a 20 s
    startup)."""
    fig = _figure(title, xaxis_title=x_title, yaxis_title="runs", bargap=0.05)
    fig.add_histogram(x=list(values), name="runs", marker_color=PALETTE[0])
    if target is not None:
        fig.add_vline(
            x=target,
            line_dash="dash",
            line_color=PALETTE[1],
            annotation_text=f"{target_name} {target:g}",
            annotation_position="top right",
        )
    return fig


def step_time_spread(
    records: list[dict], title: str = "Step time, every recorded run"
) -> go.Figure:
    """One box per recorded run (records of store.find): its per-step times after the warm-up steps
    (metrics.WARMUP_STEPS), so run-to-run and step-to-step noise is visible beside the medians.
    Runs that shared their host with other jobs (tag `packed`) are drawn in a second colour."""
    from megalab.runs.config import RunConfig
    from megalab.metrics import WARMUP_STEPS

    fig = _figure(title, xaxis_title="", yaxis_title="seconds per step", showlegend=True)
    shown = set()
    for r in records:
        times = [
            t
            for t in (r.get("series") or {}).get("step_time_s", [])[WARMUP_STEPS:]
            if t is not None
        ]
        packed = "packed" in (r.get("tags") or [])
        name = "shared host (packed)" if packed else "alone on the host"
        cfg = RunConfig.from_dict(r["config"])
        x = f"dp {cfg.dp}, gbs {cfg.gbs}"
        fig.add_box(
            y=times,
            x=[x] * len(times),
            name=name,
            legendgroup=name,
            showlegend=name not in shown,
            marker_color=PALETTE[1 if packed else 0],
            boxpoints=False,
        )
        shown.add(name)
    return fig.update_layout(boxmode="group")


def predicted_vs_measured(
    df,
    measured: str = "measured_s",
    predicted: str = "predicted_s",
    color: str = "family",
    symbol: str | None = "set",
    label: str = "label",
    title: str = "Predicted against measured",
    unit: str = "s",
) -> go.Figure:
    """One point per row of `df` on log axes, `predicted` (y) against `measured` (x), with the y = x
    line (exact prediction): a colour per value of `color` (e.g. layout family), and filled against
    open markers for the first and later values of `symbol` (e.g. "fit" and "held out"). Hover shows
    `label`."""
    import math

    fig = _figure(
        title,
        xaxis_title=f"measured ({unit})",
        yaxis_title=f"predicted ({unit})",
        xaxis_type="log",
        yaxis_type="log",
        showlegend=True,
    )
    both = list(df[measured]) + list(df[predicted])
    lo, hi = min(both) / 1.3, max(both) * 1.3
    fig.add_scatter(
        x=[lo, hi],
        y=[lo, hi],
        mode="lines",
        name="y = x (exact)",
        hoverinfo="skip",
        line=dict(color="black", dash="dash", width=1),
    )
    kinds = list(dict.fromkeys(df[symbol])) if symbol else [None]
    for i, (value, part) in enumerate(df.groupby(color, sort=False)):
        for j, kind in enumerate(kinds):
            rows = part if kind is None else part[part[symbol] == kind]
            if not len(rows):
                continue
            fig.add_scatter(
                x=rows[measured],
                y=rows[predicted],
                mode="markers",
                text=rows[label],
                name=str(value) if kind is None else f"{value}, {kind}",
                legendgroup=str(value),
                hovertemplate="%{text}<br>measured %{x:.3g}, predicted %{y:.3g}<extra></extra>",
                marker=dict(
                    size=9,
                    color=PALETTE[i % len(PALETTE)],
                    symbol="circle" if j == 0 else "circle-open",
                    line=dict(width=2),
                ),
            )
    return fig.update_xaxes(range=[math.log10(lo), math.log10(hi)]).update_yaxes(
        range=[math.log10(lo), math.log10(hi)]
    )
