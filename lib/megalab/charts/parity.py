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


# below the plot, its top row under the "step" title whatever the number of rows at 1000-1400 px
_LEGEND_BELOW = dict(orientation="h", yanchor="top", y=-0.3, xanchor="left", x=0)


def loss_difference(
    series_by_label: dict[str, dict],
    band: float | dict[str, float],
    title: str = "Loss difference from one GPU",
    references: dict[str, str] | None = None,
    yaxis_title: str = "loss difference from one GPU (nats)",
) -> go.Figure:
    """Loss parity drawn as a difference: each curve's loss minus its reference's, step by step
    (on the steps both logged), inside the ±band ribbon around zero it must not leave.
    `series_by_label` is loss_parity's {label: {"step", "loss"}}; `references` maps a label to its
    reference's label (by default every label after the first to the first). References are not
    drawn (they are the zero line). `band` is one tolerance, or {reference label: band}: one ribbon
    per distinct band, named after the references sharing it. A reader's own curve ("source":
    "yours") is dashed with open markers."""
    labels = list(series_by_label)
    references = references or {label: labels[0] for label in labels[1:]}
    bands = (
        band if isinstance(band, dict) else dict.fromkeys(dict.fromkeys(references.values()), band)
    )
    steps = sorted({st for s in series_by_label.values() for st in s["step"]})
    fig = _figure(title, xaxis_title="step", yaxis_title=yaxis_title, legend=_LEGEND_BELOW)
    by_width: dict[float, list[str]] = {}
    for ref, b in bands.items():
        by_width.setdefault(float(b), []).append(ref)
    for j, (b, refs) in enumerate(sorted(by_width.items(), reverse=True)):
        where = f" (against {', '.join(refs)})" if len(by_width) > 1 else ""
        fig.add_scatter(
            x=[steps[0], steps[-1], steps[-1], steps[0]],
            y=[b, b, -b, -b],
            mode="lines",
            fill="toself",
            line=dict(width=0),
            fillcolor=f"rgba(31,95,168,{0.12 + 0.06 * j:.2f})",
            hoverinfo="skip",
            name=f"allowed band, ±{b:.2g}{where}",
        )
    for i, label in enumerate(labels):
        if label not in references:
            continue
        s, ref = series_by_label[label], series_by_label[references[label]]
        base = {st: v for st, v in zip(ref["step"], ref["loss"]) if v is not None}
        pts = [
            (st, v - base[st])
            for st, v in zip(s["step"], s["loss"])
            if st in base and v is not None
        ]
        yours = s.get("source") == "yours"
        fig.add_scatter(
            x=[st for st, _ in pts],
            y=[d for _, d in pts],
            mode="lines+markers" if yours else "lines",
            name=_yours(label) if yours and not label.endswith("(yours)") else label,
            line=dict(color=PALETTE[i % len(PALETTE)], dash="dash" if yours else "solid"),
            **({"marker": dict(symbol=SYMBOLS["yours"], size=6)} if yours else {}),
        )
    widest = max(by_width)
    gap = max((abs(v) for t in fig.data[len(by_width) :] for v in t.y), default=0.0)
    top = 1.5 * max(widest, gap)
    return fig.update_layout(yaxis_range=[-top, top], margin=dict(b=60))
