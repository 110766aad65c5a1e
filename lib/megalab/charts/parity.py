"""Is it still correct? Loss curves of a layout against the reference run, inside a tolerance
band."""

from __future__ import annotations

import plotly.graph_objects as go

from megalab.charts._style import PALETTE, SYMBOLS, _figure, _yours


def loss_parity(
    series_by_label: dict[str, dict], band: float | None = None, title: str = "Loss parity"
) -> go.Figure:
    """Loss curves {label: {"step": [...], "loss": [...]}}; the first label is the reference and,
    with `band`, is drawn with a ±band tolerance ribbon that the other curves should stay inside. A
    curve whose dict says "source": "yours" (a reader's own run) is dashed with open markers and
    named "... (yours)"."""
    fig = _figure(title, xaxis_title="step", yaxis_title="loss")
    for i, (label, s) in enumerate(series_by_label.items()):
        if i == 0 and band:
            hi = [v + band for v in s["loss"]]
            lo = [v - band for v in s["loss"]]
            fig.add_scatter(
                x=list(s["step"]) + list(s["step"])[::-1],
                y=hi + lo[::-1],
                fill="toself",
                line=dict(width=0),
                fillcolor="rgba(31,95,168,0.15)",
                hoverinfo="skip",
                name=f"±{band:g} around {label}",
            )
        yours = s.get("source") == "yours"
        dash = "dash" if yours else "solid" if i == 0 else "dot"
        fig.add_scatter(
            x=s["step"],
            y=s["loss"],
            mode="lines+markers" if yours else "lines",
            name=_yours(label) if yours and not label.endswith("(yours)") else label,
            line=dict(color=PALETTE[i % len(PALETTE)], dash=dash),
            **({"marker": dict(symbol=SYMBOLS["yours"], size=6)} if yours else {}),
        )
    return fig
