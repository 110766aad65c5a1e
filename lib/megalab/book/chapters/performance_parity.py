"""The performance page's last section, loss parity: every layout recorded with the tag `parity`
judged against its one-GPU reference, and the smooth model's loss gaps drawn.

    parity.parity_checks(records, errata)    # (RunConfig, ParityResult or None, erratum reasons)
    parity.parity_table(checked)             # one row per layout: change, layout, verdict, spikes
    parity.stable_parity(checked)            # the Llama-style gpt-350m's pairs (no loss spikes)
    parity.parity_gaps(stable)               # each layout's loss minus one GPU's, in the band
"""

from __future__ import annotations

__all__ = ["LLAMA", "parity_checks", "parity_table", "stable_parity", "parity_curves", "parity_gaps"]

LLAMA = "untied-rope-RMSNorm-swiglu"  # the smooth model's change from the gpt-350m preset


def parity_checks(records, errata: dict, parity=None) -> list:
    """(RunConfig, ParityResult or None, erratum reasons) of every layout recorded with the tag
    `parity` (the single-GPU references left out), judged by `parity` (default
    sweep.parity(cfg, mode="cached", quiet=True)); None where no reference is recorded."""
    from megalab.jobs import sweep
    from megalab.records.store import NotRecorded
    from megalab.runs.config import RunConfig

    groups: dict = {}
    for r in records:
        if "parity" in (r.get("tags") or []):
            c = RunConfig.from_dict(r["config"])
            groups.setdefault(sweep.reference_of(c).key, {})[c.key] = c
    judge = parity or (lambda c: sweep.parity(c, mode="cached", quiet=True))
    out = []
    for ref, cs in groups.items():
        for key, c in cs.items():
            if key == ref:
                continue
            keys = {c.key, ref}
            why = sorted({errata[r["id"]] for r in records if r["key"] in keys and r["id"] in errata})
            try:
                out.append((c, judge(c), why))
            except NotRecorded:
                out.append((c, None, why))
    return out


def parity_table(checked):
    """One row per checked layout: model, change (from its preset), layout (words), impl, lr,
    max_diff, band, verdict ('passes', 'fails', 'set aside' for an erratum, 'no reference'),
    spikes (the reference's spike steps)."""
    import pandas as pd
    from megalab.book.frame import describe

    rows = []
    for c, p, why in checked:
        verdict = (
            ("passes" if p.passes else "fails") if p else ("set aside" if why else "no reference")
        )
        rows.append(
            {
                "model": c.name,
                "change": c.preset_changes or "as preset",
                "layout": describe(c),
                "impl": c.impl,
                "lr": c.lr,
                "max_diff": p.max_abs_diff if p else float("nan"),
                "band": p.band if p else float("nan"),
                "verdict": verdict,
                "spikes": len(p.spikes) if p else 0,
            }
        )
    return pd.DataFrame(rows)


def stable_parity(checked, impl: str = "local", lr: float = 1e-4) -> list:
    """(RunConfig, ParityResult) of the Llama-style gpt-350m (LLAMA) at `lr` with layer spec
    `impl`: the model that trains without loss spikes."""
    return [
        (c, p)
        for c, p, _ in checked
        if p is not None
        and c.name == "gpt-350m"
        and c.preset_changes == LLAMA
        and c.impl == impl
        and c.lr == lr
    ]


def parity_curves(stable) -> dict:
    """{name: {"step", "loss"}} for charts.loss_parity: the one-GPU reference of `stable`
    (stable_parity's pairs) first, then each layout, named in words without the layer spec."""
    from megalab.book.frame import describe

    if not stable:
        raise LookupError("no parity layout to draw")
    ref = stable[0][1].series
    out = {"1 GPU": {"step": list(ref["step"]), "loss": list(ref["reference"])}}
    for c, p in stable:
        name = describe(c.replace(impl="te"))
        out[name] = {"step": list(p.series["step"]), "loss": list(p.series["layout"])}
    return out


def parity_gaps(pairs, title: str = "Loss minus the one-GPU loss, step by step"):
    """Each parity layout's loss minus its one-GPU reference, step by step (`pairs`: stable_parity's
    (RunConfig, ParityResult), Megatron Core's plain layers and Transformer Engine's together), one
    colour per layer spec, the layout named on hover, inside the ±band (the narrowest of the pairs'
    bands) a layout must not leave."""
    from megalab.book.frame import describe
    from megalab.charts._style import PALETTE, _figure

    if not pairs:
        raise LookupError("no parity layout to draw")
    band = min(p.band for _, p in pairs)
    steps = list(pairs[0][1].series["step"])
    fig = _figure(
        title,
        xaxis_title="step",
        yaxis_title="loss − one-GPU loss (nats)",
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
        margin=dict(t=100),
    )
    fig.add_scatter(
        x=steps + steps[::-1],
        y=[band] * len(steps) + [-band] * len(steps),
        fill="toself",
        fillcolor="rgba(31,95,168,0.12)",
        line=dict(width=0),
        name=f"±{band:g} nats: the band a layout must stay in",
        hoverinfo="skip",
    )
    specs = {"local": "Megatron Core's plain layers", "te": "Transformer Engine layers"}
    shown = set()
    for c, p in pairs:
        gap = p.series["layout"] - p.series["reference"]
        fig.add_scatter(
            x=p.series["step"],
            y=gap,
            mode="lines",
            name=specs.get(c.impl, c.impl),
            legendgroup=c.impl,
            showlegend=c.impl not in shown,
            line=dict(color=PALETTE[1 if c.impl == "te" else 0], width=1.5),
            hovertext=describe(c.replace(impl="local")),
            hoverinfo="text+y",
        )
        shown.add(c.impl)
    return fig.update_yaxes(range=[-2 * band, 2 * band], zeroline=True)
