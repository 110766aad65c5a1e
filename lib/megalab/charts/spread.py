"""How measured values scatter: a histogram against a target, step-time boxes across recorded runs."""
from __future__ import annotations

import plotly.graph_objects as go

from megalab.charts._style import PALETTE, _figure


def distribution(values, target: float | None = None, x_title: str = "value",
                 title: str = "Distribution", target_name: str = "target") -> go.Figure:
    """Histogram of measured values, with a dashed vertical line at a target (e.g. a 20 s startup)."""
    fig = _figure(title, xaxis_title=x_title, yaxis_title="runs", bargap=0.05)
    fig.add_histogram(x=list(values), name="runs", marker_color=PALETTE[0])
    if target is not None:
        fig.add_vline(x=target, line_dash="dash", line_color=PALETTE[1],
                      annotation_text=f"{target_name} {target:g}", annotation_position="top right")
    return fig


def step_time_spread(records: list[dict], title: str = "Step time, every recorded run") -> go.Figure:
    """One box per recorded run (records of store.find): its per-step times after the warm-up steps
    (metrics.WARMUP_STEPS), so run-to-run and step-to-step noise is visible beside the medians.
    Runs that shared their host with other jobs (tag `packed`) are drawn in a second colour."""
    from megalab.config import RunConfig
    from megalab.metrics import WARMUP_STEPS
    fig = _figure(title, xaxis_title="", yaxis_title="seconds per step", showlegend=True)
    shown = set()
    for r in records:
        times = [t for t in (r.get("series") or {}).get("step_time_s", [])[WARMUP_STEPS:] if t is not None]
        packed = "packed" in (r.get("tags") or [])
        name = "shared host (packed)" if packed else "alone on the host"
        cfg = RunConfig.from_dict(r["config"])
        x = f"dp {cfg.dp}, gbs {cfg.gbs}"
        fig.add_box(y=times, x=[x] * len(times), name=name, legendgroup=name, showlegend=name not in shown,
                    marker_color=PALETTE[1 if packed else 0], boxpoints=False)
        shown.add(name)
    return fig.update_layout(boxmode="group")
