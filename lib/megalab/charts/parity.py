"""Is it still correct? Loss curves of a layout against the reference run, inside a tolerance band."""
from __future__ import annotations

import plotly.graph_objects as go

from megalab.charts._style import PALETTE, _figure


def loss_parity(series_by_label: dict[str, dict], band: float | None = None,
                title: str = "Loss parity") -> go.Figure:
    """Loss curves {label: {"step": [...], "loss": [...]}}; the first label is the reference and,
    with `band`, is drawn with a ±band tolerance ribbon that the other curves should stay inside."""
    fig = _figure(title, xaxis_title="step", yaxis_title="loss")
    for i, (label, s) in enumerate(series_by_label.items()):
        if i == 0 and band:
            hi = [v + band for v in s["loss"]]
            lo = [v - band for v in s["loss"]]
            fig.add_scatter(x=list(s["step"]) + list(s["step"])[::-1], y=hi + lo[::-1], fill="toself",
                            line=dict(width=0), fillcolor="rgba(31,95,168,0.15)", hoverinfo="skip",
                            name=f"±{band:g} around {label}")
        fig.add_scatter(x=s["step"], y=s["loss"], mode="lines", name=label,
                        line=dict(color=PALETTE[i % len(PALETTE)], dash="solid" if i == 0 else "dot"))
    return fig
