"""The interactive planner: pick a model, a GPU and a layout; see memory per GPU and step time.

    from megalab import widgets
    widgets.planner("gpt-1.2b", gpu="H200", gpus=4, tp=2, pp=2, mbs=4, gbs=16)

Every change re-runs `megalab.theory.plan` and redraws two figures (predicted memory per GPU against
the card's capacity; the step-time estimate split into compute, pipeline bubble and communication).
An invalid layout shows `RunConfig.problems()`, one line each. "Run" measures the layout on this
machine's GPUs (`megalab.run(cfg, mode="live")`) when it has enough, else shows the recorded
reference (`mode="cached"`), or the command that records it.

In the static HTML book there is no kernel: the widget's display also carries a `text/html` version,
the default plan's figures, which JupyterLab ignores (it draws the live widget) and the book shows
(`_config.yml` drops the widget mime type for the html builder).
"""
from __future__ import annotations

import ipywidgets as w
import plotly.io as pio
from IPython.display import display

from megalab import charts

_POW2 = [1, 2, 4, 8, 16, 32, 64]
_LAYOUT = ("tp", "pp", "vpp", "cp", "ep")


def figures(cfg, gpu: str = "H200") -> tuple:
    """(memory figure, step-time figure, one-line summary) of `theory.plan(cfg, gpu)`."""
    from megalab import hardware, theory
    plan = theory.plan(cfg, gpu)
    spec = hardware.gpu_spec(gpu)
    mem = charts.memory_breakdown(plan["memory_gib"], capacity_gib=spec.mem_gib,
                                  title=f"Predicted memory per GPU ({spec.name})")
    est = plan["step_time_estimate"]
    step = charts.step_time_breakdown({plan["layout"]: est}, title="Predicted step time")
    total = est["total_s"] or float("nan")
    line = (f"{plan['layout']}: {plan['memory_gib']['total']:.1f} GiB of {spec.mem_gib:g} per GPU; "
            f"step ≈ {total * 1e3:.1f} ms (compute {est['compute_s'] / total:.0%}, "
            f"bubble {est['bubble_s'] / total:.0%}, communication {est['comm_s'] / total:.0%}); "
            f"MFU ≈ {est.get('mfu', float('nan')):.0%}")
    return mem.update_layout(height=380), step.update_layout(height=260), line


class Planner(w.VBox):
    """The planner widget; `cfg` is the RunConfig currently selected."""

    def __init__(self, preset: str = "gpt-1.2b", gpu: str = "H200", **layout):
        from megalab import hardware, presets
        base = presets.get(preset).replace(**layout)
        dd = lambda v, opts, d: w.Dropdown(options=opts, value=v, description=d,  # noqa: E731
                                           layout=w.Layout(width="150px"), style={"description_width": "50px"})
        self._c = {
            "preset": w.Dropdown(options=presets.names(), value=preset, description="model"),
            "gpu": w.Dropdown(options=list(hardware.GPUS), value=gpu, description="GPU"),
            "gpus": dd(base.gpus, _POW2, "gpus"),
            **{k: dd(getattr(base, k), _POW2, k) for k in _LAYOUT},
            "mbs": dd(base.mbs, _POW2, "mbs"),
            "gbs": w.BoundedIntText(value=base.gbs, min=1, max=1 << 16, description="gbs",
                                    layout=w.Layout(width="150px"), style={"description_width": "50px"}),
            "seq": dd(base.seq, [256 * 2**i for i in range(9)], "seq"),
            "recompute": w.Dropdown(options=["none", "selective", "full"], value=base.recompute,
                                    description="recompute"),
            "sp": w.Checkbox(value=base.sp, description="sp"),
            "dist_opt": w.Checkbox(value=base.dist_opt, description="dist_opt"),
        }
        self._status = w.HTML()
        self._mem, self._time, self._log = w.Output(), w.Output(), w.Output()
        run = w.Button(description="Run", button_style="primary", tooltip="measure, or show the record")
        run.on_click(lambda _: self.run())
        for c in self._c.values():
            c.observe(lambda _: self.update(), names="value")
        c = self._c
        rows = [w.HBox([c["preset"], c["gpu"], c["gpus"]]), w.HBox([c[k] for k in _LAYOUT]),
                w.HBox([c["mbs"], c["gbs"], c["seq"], c["recompute"]]), w.HBox([c["sp"], c["dist_opt"], run])]
        super().__init__(rows + [self._status, w.HBox([self._mem, self._time]), self._log])
        self.update()

    @property
    def cfg(self):
        from megalab import presets
        v = {k: c.value for k, c in self._c.items()}
        return presets.get(v.pop("preset")).replace(**{k: x for k, x in v.items() if k != "gpu"})

    def update(self) -> None:
        """Re-plan and redraw; an invalid layout shows its problems instead of figures."""
        cfg = self.cfg
        problems = cfg.problems()
        if problems:
            self._status.value = "<br>".join(f"<span style='color:#d1495b'>✗ {p}</span>" for p in problems)
            return
        mem, step, line = figures(cfg, self._c["gpu"].value)
        self._status.value = f"<b>dp = {cfg.dp}</b> · {line}"
        for out, fig in ((self._mem, mem), (self._time, step)):
            out.clear_output(wait=True)
            with out:
                display(fig)

    def run(self) -> None:
        """Measure this layout here when the GPUs are present, else show its recorded result."""
        import megalab
        from megalab.results import NotRecorded
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
        bundle["text/html"] = f"<p><b>Static planner</b> (open the notebook for the live one). {line}</p>{html}"
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
