"""The interactive planner: pick a model, a GPU and a layout; see memory per GPU and step time.

    from megalab.book import widgets
    widgets.planner("gpt-1.2b", gpu="H200", gpus=4, tp=2, pp=2, mbs=4, gbs=16)

Every change re-runs `megalab.theory.plan` and redraws two figures (predicted memory per GPU against
the card's capacity; the step-time estimate split into compute, pipeline bubble and communication).
Below them, `ranking`: every layout of the model on that many GPUs at that global batch and
sequence, fastest predicted first (`search.search`, with the step-time model
`calibration.for_search` gives), the recorded step time beside each layout the reference machine has
run, and why each is not first; its steps are eager (no CUDA graphs), and it says so. An invalid
layout shows `RunConfig.problems()`, one line each. "Run"
measures the layout on this machine's GPUs (`megalab.run(cfg, mode="live")`) when it has enough,
else shows the recorded reference (`mode="cached"`), or the command that records it.

In the static HTML book there is no kernel: the widget's display also carries a `text/html` version,
the default plan's figures, which JupyterLab ignores (it draws the live widget) and the book shows
(`_config.yml` drops the widget mime type for the html builder).
"""

from __future__ import annotations

import ipywidgets as w
import plotly.io as pio
from IPython.display import display

from megalab import charts
from megalab.runs.axes import SIZES

_POW2 = [1, 2, 4, 8, 16, 32, 64]
_LAYOUT = tuple(a for a in SIZES if a != "etp")  # the planner's drop-downs (runs.axes)


def ranking(cfg, gpu: str = "H200", top: int = 10, store=None) -> tuple:
    """(table, lines): `search.search` of cfg's model on cfg.gpus GPUs of model `gpu` at cfg.gbs and
    cfg.seq. The table is the `top` predicted fastest, then up to `top` further down that hold a
    reference record; columns rank, layout, cfg, mbs, recompute, dist_opt, predicted_ms, mem_gib,
    mfu, measured_ms (the recorded step; NaN where there is no record, or it holds no step time),
    measured, why. A layout with selective recomputation predicted at the same step and memory as
    the same layout without it is left out (`twins`), and the rest ranked again. `lines`: what was
    searched, which step-time model ranked (and its error on records it was not fitted on) and
    what its predictions are worth."""
    from megalab.predict import calibration, search

    model = calibration.for_search(gpu, store)
    found = search.search(cfg, cfg.gpus, gpu=gpu, top=None, store=store, model=model)
    df = found.frame()
    if df.empty:
        return df, [found.summary(), found.table().splitlines()[-1]]
    from megalab.book.frame import describe

    df["layout"] = [describe(c.cfg) for c in found.candidates]  # in words, as the chapters say it
    df["cfg"] = [c.cfg for c in found.candidates]
    dropped = twins(df)
    host = (df["host_s"] / df["step_s"]).tolist() if "host_s" in df else []
    df = df[~dropped].assign(rank=lambda d: range(1, len(d) + 1))
    df = df[(df["rank"] <= top) | df["measured"]].head(2 * top)
    df = df.assign(
        predicted_ms=df["step_s"] * 1e3, measured_ms=df["measured_s"].astype(float) * 1e3
    )
    cols = [
        "rank",
        "layout",
        "cfg",
        "mbs",
        "recompute",
        "dist_opt",
        "predicted_ms",
        "mem_gib",
        "mfu",
        "measured_ms",
        "measured",
        "why",
    ]
    return df[cols].reset_index(drop=True), lines(found, model, int(dropped.sum()), host)


def twins(df):
    """Which rows of a search frame (with a `cfg` column, fastest first) repeat an earlier row
    with selective recomputation: the same layout without it, at the same predicted step and memory.
    With fused (flash) attention the scores selective recomputation drops are never stored, and
    where the host sets the pace its extra attention forward hides under the host's time. A
    recorded row is kept."""
    import pandas as pd

    seen, out = set(), []
    for _, r in df.iterrows():
        key = (r["cfg"].replace(recompute="none").key, round(r["step_s"], 6), round(r["mem_gib"], 3))
        out.append(r["recompute"] == "selective" and key in seen and not r["measured"])
        seen.add(key)
    return pd.Series(out, index=df.index, dtype=bool)


def lines(found, model, twins: int = 0, host: list | None = None) -> list[str]:
    """The sentences above a ranking: what was searched and what fell out, which model ranked it,
    and what its predictions are worth; `host`: each ranked layout's share of its predicted step
    spent waiting on the host, fastest first."""
    from megalab.predict import search
    from megalab.theory.flops import spec

    head = (
        f"{found.model} on {found.gpus} × {found.gpu}, global batch {found.gbs}, sequence "
        f"{found.seq}: {found.enumerated} layouts, {found.invalid} refused by Megatron's rules, "
        f"{found.too_big} predicted not to fit, {found.ranked} ranked"
    )
    if twins:
        head += (
            f"; {twins} with selective recomputation left out, each predicted at the step and "
            "memory of its layout without it: fused attention never stores the scores it frees, "
            "and its extra attention forward hides under the host's time."
        )
    else:
        head += "."
    if found.memory_cap is not None:
        head += (
            f" Nothing predicted at or above {found.memory_cap:.1f} GiB ranks: a recorded run of "
            f"this model that the memory model predicted at {found.memory_cap:.1f} GiB ran out of "
            f"memory on the {spec(found.gpu).mem_gib:g} GiB card, so the model misses part of "
            "what such a run holds."
        )
    if model is None:
        return [head, found.rates, search.CAVEAT]
    held = model.records[model.records["set"] == "held out"]["err_after"].abs()
    fit = int((model.records["set"] == "fit").sum())
    said = (
        f"on the {len(held)} it was not fitted on, median error {held.median():.0%}, worst "
        f"{held.max():.0%}"
        if len(held)
        else "none held out"
    )
    rates = "the matmul, HBM and NCCL rates measured in chapter 0"
    if not model.rates.source.startswith("benched"):
        rates = f"the {found.gpu} datasheet's rates"
    waits = (
        f"the GPU waits on the host for {host[0]:.0%} of the first layout's step and up to "
        f"{max(host):.0%} of another's, "
        if host
        else ""
    )
    return [
        head,
        f"Ranked by chapter 7's step-time model of eager steps (no CUDA graphs), fitted on {fit} "
        f"{found.gpu} records at {rates} ({said}).",
        f"Predicted and recorded steps are eager: {waits}{EAGER}",
    ]


# said above every calibrated ranking: what its step times are worth
EAGER = (
    "so the gaps between layouts follow kernel launch counts as much as GPU work. Time the top "
    "few with CUDA graphs, in one comparison group, before choosing."
)


def ranking_html(table, lines: list[str]) -> str:
    """`ranking`'s answer as HTML: the lines, then the table (a recorded layout's row in bold)."""
    import html

    head = "".join(f"<p style='margin:2px 0'>{html.escape(x)}</p>" for x in lines)
    if table.empty:
        return head
    names = [
        "Rank",
        "Layout",
        "Micro-batch",
        "Predicted eager step (ms)",
        "Memory per GPU (GiB)",
        "MFU (%)",
        "Recorded eager step (ms)",
        "Why not first",
    ]
    # the layout and the last column hold words: they keep a readable width and wrap
    wide = {len(names) - 1: "min-width:8em", 1: "min-width:9em"}
    td = lambda xs, tag="td": "".join(
        f"<{tag} style='padding:1px 6px;vertical-align:top;{wide.get(i, '')}'>"
        f"{html.escape(x)}</{tag}>"
        for i, x in enumerate(xs)
    )  # noqa: E731
    rows, last, gap = (
        [f"<tr>{td(names, 'th')}</tr>"],
        0,
        "⋮ further down, the layouts with a record",
    )
    for _, r in table.iterrows():
        if r["rank"] != last + 1:  # the recorded layouts below the top
            rows.append(f"<tr><td colspan='{len(names)}' style='padding:1px 6px'>{gap}</td></tr>")
            gap = "⋮"
        last = r["rank"]
        cells = [
            f"{r['rank']}",
            r["layout"],
            f"{r['mbs']}",
            f"{r['predicted_ms']:.1f}",
            f"{r['mem_gib']:.1f}",
            f"{100 * r['mfu']:.0f}",
            _measured(r),
            r["why"] or "–",
        ]
        rows.append(
            f"<tr style='font-weight:{'bold' if r['measured'] else 'normal'}'>{td(cells)}</tr>"
        )
    table = f"<table style='font-size:90%;text-align:left;width:100%'>{''.join(rows)}</table>"
    return f"{head}<div style='overflow-x:auto'>{table}</div>"


def _measured(r) -> str:
    if not r["measured"]:
        return ""
    # NaN: no step time
    return "recorded" if r["measured_ms"] != r["measured_ms"] else f"{r['measured_ms']:.1f}"


def rank_of(cfg, gpu: str = "H200", store=None) -> dict:
    """Where cfg's layout (in words, micro-batch and recomputation alike) stands in `ranking`:
    rank, of (how many layouts were ranked), why (why it is not first) and first (the RunConfig
    ranked first, as `best` gives it, from the same search). LookupError when the search did not
    rank it (an impossible layout)."""
    from megalab.book.frame import describe

    table, _ = ranking(cfg, gpu, top=10**6, store=store)
    same = table[
        (table["layout"] == describe(cfg))
        & (table["mbs"] == cfg.mbs)
        & (table["recompute"] == cfg.recompute)
    ]
    if same.empty:
        raise LookupError(f"{describe(cfg)} at micro-batch {cfg.mbs}: not among the ranked layouts")
    row = same.iloc[0]
    return {
        "rank": int(row["rank"]),
        "of": int(table["rank"].max()),
        "why": row["why"],
        "first": table["cfg"].iloc[0],
    }


def best(cfg, gpu: str = "H200", store=None):
    """The RunConfig `ranking` puts first for cfg's model, GPU count, gbs and seq."""
    return ranking(cfg, gpu, top=1, store=store)[0]["cfg"].iloc[0]


def figures(cfg, gpu: str = "H200") -> tuple:
    """(memory figure, step-time figure, one-line summary) of `theory.plan(cfg, gpu)`."""
    from megalab import theory
    from megalab.machine import hardware

    from megalab.book.frame import describe

    plan = theory.plan(cfg, gpu)
    spec = hardware.gpu_spec(gpu)
    mem = charts.memory_breakdown(
        plan["memory_gib"],
        capacity_gib=spec.mem_gib,
        title=f"Predicted memory per GPU ({spec.name})",
    )
    est = plan["step_time_estimate"]
    step = charts.step_time_breakdown(
        {describe(cfg): est}, title="Roofline step time: a lower bound, no host term"
    )
    total = est["total_s"] or float("nan")
    line = (
        f"{describe(cfg)}: {plan['memory_gib']['total']:.1f} GiB of {spec.mem_gib:g} per GPU; "
        f"roofline step ≥ {total * 1e3:.1f} ms (compute {est['compute_s'] / total:.0%}, "
        f"pipeline bubble {est['bubble_s'] / total:.0%}, communication "
        f"{est['comm_s'] / total:.0%}), so MFU ≤ {est.get('mfu', float('nan')):.0%}. A bound: "
        "it has no host term, the time an eager step's GPU waits for kernel launches, which the "
        "calibrated estimate adds."
    )
    return mem.update_layout(height=260), step.update_layout(height=260), line


class Planner(w.VBox):
    """The planner widget; `cfg` is the RunConfig currently selected."""

    def __init__(self, preset: str = "gpt-1.2b", gpu: str = "H200", **layout):
        from megalab.machine import hardware
        from megalab.runs import presets

        base = presets.get(preset).replace(**layout)
        dd = lambda v, opts, d: w.Dropdown(
            options=opts,
            value=v,
            description=d,  # noqa: E731
            layout=w.Layout(width="150px"),
            style={"description_width": "50px"},
        )
        self._c = {
            "preset": w.Dropdown(options=presets.names(), value=preset, description="model"),
            "gpu": w.Dropdown(options=list(hardware.GPUS), value=gpu, description="GPU"),
            "gpus": dd(base.gpus, _POW2, "gpus"),
            **{k: dd(getattr(base, k), _POW2, k) for k in _LAYOUT},
            "mbs": dd(base.mbs, _POW2, "mbs"),
            "gbs": w.BoundedIntText(
                value=base.gbs,
                min=1,
                max=1 << 16,
                description="gbs",
                layout=w.Layout(width="150px"),
                style={"description_width": "50px"},
            ),
            "seq": dd(base.seq, [256 * 2**i for i in range(9)], "seq"),
            "recompute": w.Dropdown(
                options=["none", "selective", "full"], value=base.recompute, description="recompute"
            ),
            "sp": w.Checkbox(value=base.sp, description="sp"),
            "dist_opt": w.Checkbox(value=base.dist_opt, description="dist_opt"),
        }
        self._top = w.Dropdown(
            options=[5, 10, 20, 50],
            value=10,
            description="top",
            layout=w.Layout(width="150px"),
            style={"description_width": "50px"},
        )
        # (inputs, html) of the last ranking
        self._status, self._rank, self._ranked = w.HTML(), w.HTML(), (None, "")
        self._mem, self._time, self._log = w.Output(), w.Output(), w.Output()
        run = w.Button(
            description="Run", button_style="primary", tooltip="measure, or show the record"
        )
        run.on_click(lambda _: self.run())
        for c in (*self._c.values(), self._top):
            c.observe(lambda _: self.update(), names="value")
        c = self._c
        rows = [
            w.HBox([c["preset"], c["gpu"], c["gpus"]]),
            w.HBox([c[k] for k in _LAYOUT]),
            w.HBox([c["mbs"], c["gbs"], c["seq"], c["recompute"]]),
            w.HBox([c["sp"], c["dist_opt"], run]),
        ]
        ranked = w.HTML(
            "<b>Every layout of this model on these GPUs at this gbs and seq, fastest predicted "
            "eager step first</b> (bold: recorded on the reference machine)"
        )
        super().__init__(
            rows
            + [
                self._status,
                w.HBox([self._mem, self._time]),
                self._log,
                w.HBox([ranked, self._top]),
                self._rank,
            ]
        )
        self.update()

    @property
    def cfg(self):
        from megalab.runs import presets

        v = {k: c.value for k, c in self._c.items()}
        return presets.get(v.pop("preset")).replace(**{k: x for k, x in v.items() if k != "gpu"})

    def update(self) -> None:
        """Re-plan and redraw; an invalid layout shows its problems instead of figures."""
        cfg = self.cfg
        self._rank.value = self.ranking_html()
        problems = cfg.problems()
        if problems:
            self._status.value = "<br>".join(
                f"<span style='color:#d1495b'>✗ {p}</span>" for p in problems
            )
            return
        mem, step, line = figures(cfg, self._c["gpu"].value)
        self._status.value = f"<b>dp = {cfg.dp}</b> · {line}"
        for out, fig in ((self._mem, mem), (self._time, step)):
            out.clear_output(wait=True)
            with out:
                display(fig)

    def ranking_html(self) -> str:
        """`ranking` of the chosen model, GPU, GPU count, gbs and seq as HTML; searched again only
        when one of those (or top) changed, not the layout."""
        from megalab.runs.config import InvalidLayout

        v = {k: self._c[k].value for k in ("preset", "gpu", "gpus", "gbs", "seq")} | {
            "top": self._top.value
        }
        if self._ranked[0] != v:
            try:
                html = ranking_html(*ranking(self.cfg, v["gpu"], v["top"]))
            except InvalidLayout as exc:
                html = "<br>".join(
                    f"<span style='color:#d1495b'>✗ {p}</span>" for p in str(exc).splitlines()
                )
            self._ranked = (v, html)
        return self._ranked[1]

    def run(self) -> None:
        """Measure this layout here when the GPUs are present, else show its recorded result."""
        import megalab
        from megalab.jobs.running import NotRecorded

        cfg = self.cfg
        self._log.clear_output()
        with self._log:
            try:
                cfg.validate()
                result = megalab.run(cfg, mode="live" if _gpu_count() >= cfg.gpus else "cached")
                print(repr(result))
            except (megalab.InvalidLayout, NotRecorded, megalab.NotEnoughGPUs) as exc:
                print(f"{type(exc).__name__}: {exc}")

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if self.cfg.problems():
            return bundle
        mem, step, line = figures(self.cfg, self._c["gpu"].value)
        html = "".join(pio.to_html(f, include_plotlyjs=False, full_html=False) for f in (mem, step))
        bundle["text/html"] = (
            f"<p><b>Static planner</b> (open the notebook for the live one). {line}</p>{html}"
            f"<p><b>Every layout of {self.cfg.name} on {self.cfg.gpus} GPUs at global batch "
            f"{self.cfg.gbs}, sequence {self.cfg.seq}, fastest predicted eager step first</b> "
            "(bold: recorded)</p>"
            f"{self.ranking_html()}"
        )
        return bundle


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def planner(preset: str = "gpt-1.2b", gpu: str = "H200", **layout) -> Planner:
    """The interactive planner, starting from `preset` with the RunConfig fields in `layout`."""
    return Planner(preset, gpu, **layout)


TERMS = {
    "compute_s": "compute",
    "host_s": "GPU waiting on the host",
    "comm_s": "communication (bytes, and a fixed cost per collective)",
    "bubble_s": "pipeline bubble",
    "optimizer_s": "optimizer",
    "total_s": "step",
}


def estimate(cfg, gpu: str = "H200", store=None):
    """(table, line): the step of cfg on GPU model `gpu` predicted by the step-time model calibrated
    on the records (calibration.calibrate), one row per term ("term", "ms", "share of the step"),
    and one line saying what it was fitted on and its held-out error. NotRecorded when the store
    holds too few records to fit."""
    import pandas as pd
    from megalab.predict import calibration

    model = calibration.calibrate(store, gpu)
    est = model.predict(cfg)
    rows = [
        {"term": words, "ms": 1e3 * est[k], "share of the step": est[k] / est["total_s"]}
        for k, words in TERMS.items()
    ]
    return pd.DataFrame(rows), f"{model.summary()}; MFU ≈ {est['mfu']:.0%}"
