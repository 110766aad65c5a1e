"""The book's figures: each function takes plain data and returns a `plotly.graph_objects.Figure`.

Nothing here calls `.show()`: a notebook cell ends with the figure and the renderer set by
`setup_notebook()` displays it. One template (`TEMPLATE`) gives every figure the same look.
Points a reader measured sit beside the reference records: a `source` column ("reference" or
"yours") picks the marker (`SYMBOLS`).

    charts.setup_notebook()                              # first cell of every chapter
    charts.matmul_vs_size(bench.load("matmul"), peak=989)

Rendering: Jupyter Book 1 (myst-nb) cannot render plotly's own mime type, and the HTML book must work
offline. `setup_notebook()` therefore registers a renderer that emits *both* plotly's mime type
(JupyterLab draws it) and a `text/html` div whose script calls `Plotly.newPlot` without bundling
plotly.js. The book loads plotly.js once per page, from the copy inside the installed plotly
package (see `megalab.reproduce.setup`, a Sphinx extension listed in `_config.yml`).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import plotly.io as pio
from plotly.io.base_renderers import PlotlyRenderer
from plotly.subplots import make_subplots

RENDERER = "megalab"
PALETTE = ["#1f5fa8", "#d1495b", "#2e933c", "#edae49", "#6c4f9e", "#00798c", "#8d6a4f", "#555555"]
SYMBOLS = {"reference": "circle", "yours": "diamond-open"}
PARTS = ("weights", "grads", "optimizer", "activations")   # memory_gib keys of theory.plan
TEMPLATE = go.layout.Template(layout=go.Layout(
    template=pio.templates["plotly_white"], colorway=PALETTE, font=dict(size=13),
    margin=dict(l=60, r=30, t=60, b=50), legend=dict(orientation="h", y=-0.2), hovermode="closest",
))


def _figure(title: str, **layout) -> go.Figure:
    fig = go.Figure(layout=dict(template=TEMPLATE, title=title))
    return fig.update_layout(**layout)


# -- rendering -------------------------------------------------------------------------------------
class _BookRenderer(PlotlyRenderer):
    """plotly's mime type for JupyterLab plus an HTML div (no plotly.js inside) for the HTML book."""

    def to_mimebundle(self, fig_dict):
        bundle = super().to_mimebundle(fig_dict)
        html = pio.to_html(bundle["application/vnd.plotly.v1+json"], include_plotlyjs=False,
                           full_html=False, config={"responsive": True, "displaylogo": False},
                           validate=False)
        return {**bundle, "text/html": html}


def setup_notebook() -> None:
    """Make notebook figures render both in JupyterLab and in the static HTML book (renderer RENDERER)."""
    pio.renderers[RENDERER] = _BookRenderer()
    pio.renderers.default = RENDERER


# -- memory and time -------------------------------------------------------------------------------
def memory_breakdown(pred: dict, measured: dict | None = None, capacity_gib: float | None = None,
                     title: str = "Memory per GPU") -> go.Figure:
    """Stacked bar of predicted memory per GPU (weights, grads, optimizer, activations) beside the
    measured peak(s), e.g. measured={"allocated": 21.3, "reserved": 23.0}; a line at the card's capacity."""
    fig = _figure(title, barmode="stack", yaxis_title="GiB per GPU", xaxis_title="")
    for i, part in enumerate(PARTS):
        fig.add_bar(x=["predicted"], y=[pred.get(part, 0.0)], name=part, marker_color=PALETTE[i])
    for i, (name, value) in enumerate((measured or {}).items()):
        fig.add_bar(x=[f"measured {name}"], y=[value], name=f"measured {name}",
                    marker_color=PALETTE[4 + i % 4], marker_pattern_shape="/")
    if capacity_gib:
        fig.add_hline(y=capacity_gib, line_dash="dash", line_color="black",
                      annotation_text=f"capacity {capacity_gib:.0f} GiB", annotation_position="top left")
    return fig


def step_time_breakdown(parts_by_label: dict[str, dict], title: str = "Step time") -> go.Figure:
    """Horizontal stacked bars, one per label, of {compute_s, bubble_s, comm_s} (seconds)."""
    fig = _figure(title, barmode="stack", xaxis_title="seconds per step", yaxis_title="",
                  yaxis_automargin=True)
    labels = list(parts_by_label)
    for i, part in enumerate(("compute_s", "bubble_s", "comm_s")):
        fig.add_bar(y=labels, x=[parts_by_label[k].get(part, 0.0) for k in labels], orientation="h",
                    name=part.removesuffix("_s"), marker_color=PALETTE[i])
    return fig


# -- scaling and parity ----------------------------------------------------------------------------
def scaling(df, x: str = "gpus", y: str = "tokens_per_s", ideal: bool = True, kind: str = "weak",
            title: str | None = None) -> go.Figure:
    """Throughput `y` against `x` (GPUs) with the ideal linear line, and the efficiency y / ideal in a
    second panel. Ideal = the smallest x's throughput scaled by x / x_min (weak: per-GPU work fixed;
    strong: global batch fixed; both ideally give linear throughput)."""
    if kind not in ("weak", "strong"):
        raise ValueError(f"kind={kind!r}: use 'weak' or 'strong'")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.68, 0.32], vertical_spacing=0.06)
    fig.update_layout(template=TEMPLATE, title=title or f"{kind.capitalize()} scaling")
    ref = df[df["source"] == "reference"] if "source" in df else df
    ref = ref if len(ref) else df
    base = ref.sort_values(x).iloc[0]
    per_x = float(base[y]) / float(base[x])
    for i, (src, part) in enumerate(_by_source(df)):
        part = part.sort_values(x)
        marker = dict(symbol=SYMBOLS.get(src, "circle"), size=10, color=PALETTE[i])
        fig.add_scatter(x=part[x], y=part[y], mode="lines+markers", name=f"measured ({src})",
                        marker=marker, row=1, col=1)
        fig.add_scatter(x=part[x], y=part[y] / (per_x * part[x]), mode="lines+markers", marker=marker,
                        name=f"efficiency ({src})", showlegend=False, row=2, col=1)
    if ideal:
        xs = sorted(df[x].unique())
        fig.add_scatter(x=xs, y=[per_x * v for v in xs], mode="lines", name="ideal (linear)",
                        line=dict(dash="dash", color="gray"), row=1, col=1)
        fig.add_hline(y=1.0, line_dash="dash", line_color="gray", row=2, col=1)
    fig.update_yaxes(title_text=y, row=1, col=1)
    fig.update_yaxes(title_text="efficiency", tickformat=".0%", row=2, col=1)
    fig.update_xaxes(title_text=x, row=2, col=1)
    fig.update_xaxes(tickvals=sorted(df[x].unique()))  # whole GPU counts, no 1.5 GPUs
    return fig


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


# -- know your machine -----------------------------------------------------------------------------
def _by_source(df):
    if "source" not in df:
        return [("reference", df)]
    return [(src, df[df["source"] == src]) for src in ("reference", "yours") if (df["source"] == src).any()]


def matmul_vs_size(df, peak: float, title: str = "Matmul throughput") -> go.Figure:
    """TFLOP/s of square matmuls (columns n, tflops, dtype[, source]) against n, log x, with the
    datasheet peak as a dashed line."""
    fig = _figure(title, xaxis_title="matrix size n (n×n·n×n)", yaxis_title="TFLOP/s",
                  xaxis_type="log")
    i = 0
    for src, part in _by_source(df):
        for dtype, d in part.groupby("dtype", sort=True):
            d = d.sort_values("n")
            fig.add_scatter(x=d["n"], y=d["tflops"], mode="lines+markers", name=f"{dtype} ({src})",
                            marker=dict(symbol=SYMBOLS.get(src, "circle"), size=9),
                            line=dict(color=PALETTE[i % len(PALETTE)]))
            i += 1
    fig.add_hline(y=peak, line_dash="dash", line_color="black",
                  annotation_text=f"datasheet peak {peak:.0f} TFLOP/s (dense bf16)",
                  annotation_position="bottom right")
    return fig


def hbm_vs_size(df, peak_tbs: float, title: str = "HBM bandwidth") -> go.Figure:
    """Copy bandwidth (columns size_bytes, gbs[, source]) against bytes copied, log x, with the
    datasheet HBM bandwidth as a dashed line (TB/s)."""
    fig = _figure(title, xaxis_title="bytes copied", yaxis_title="TB/s", xaxis_type="log")
    for i, (src, d) in enumerate(_by_source(df)):
        d = d.sort_values("size_bytes")
        fig.add_scatter(x=d["size_bytes"], y=d["gbs"] / 1e3, mode="lines+markers", name=f"copy ({src})",
                        marker=dict(symbol=SYMBOLS.get(src, "circle"), size=9), line=dict(color=PALETTE[i]))
    fig.add_hline(y=peak_tbs, line_dash="dash", line_color="black",
                  annotation_text=f"datasheet {peak_tbs:g} TB/s", annotation_position="bottom right")
    return fig


def half_bandwidth_size(sizes, bws) -> float | None:
    """Smallest message size reaching half the peak bandwidth (Hockney's n½): below it a collective
    is latency-bound, above it bandwidth-bound. None if no size qualifies."""
    pairs = sorted(zip(sizes, bws))
    if not pairs:
        return None
    half = max(b for _, b in pairs) / 2
    return next((float(s) for s, b in pairs if b >= half), None)


def bandwidth_vs_size(df, y: str = "busbw_gbs", title: str = "NCCL bus bandwidth") -> go.Figure:
    """Log-log bus bandwidth against message size (columns op, gpus, size_bytes, `y`[, source]),
    one panel per op, one line per GPU count, the measured peak annotated and the latency-bound
    region (sizes below n½, see `half_bandwidth_size`) shaded."""
    ops = [op for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") if op in set(df["op"])]
    ops += sorted(set(df["op"]) - set(ops))
    cols = 2 if len(ops) > 1 else 1
    rows = math.ceil(len(ops) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=ops, shared_yaxes=True,
                        horizontal_spacing=0.06, vertical_spacing=0.14)
    fig.update_layout(template=TEMPLATE, title=title, height=320 * rows + 120)
    gpus = sorted(df["gpus"].unique())
    for k, op in enumerate(ops):
        r, c = k // cols + 1, k % cols + 1
        d_op = df[df["op"] == op]
        for src, part in _by_source(d_op):
            for j, n in enumerate(gpus):
                d = part[part["gpus"] == n].sort_values("size_bytes")
                if d.empty:
                    continue
                fig.add_scatter(x=d["size_bytes"], y=d[y], mode="lines+markers", row=r, col=c,
                                name=f"{n} GPUs ({src})", legendgroup=f"{n}-{src}", showlegend=k == 0,
                                marker=dict(symbol=SYMBOLS.get(src, "circle"), size=7),
                                line=dict(color=PALETTE[j % len(PALETTE)]))
        best = d_op.iloc[int(d_op[y].to_numpy().argmax())]
        fig.add_annotation(x=math.log10(best["size_bytes"]), y=math.log10(best[y]), row=r, col=c,
                           text=f"peak {best[y]:.0f} GB/s ({int(best['gpus'])} GPUs)", showarrow=True,
                           arrowhead=2, ax=-40, ay=30)
        n_half = half_bandwidth_size(d_op["size_bytes"], d_op[y])
        if n_half:
            fig.add_vrect(x0=d_op["size_bytes"].min(), x1=n_half, fillcolor="gray", opacity=0.12,
                          line_width=0, row=r, col=c, annotation_text="latency-bound",
                          annotation_position="top left")
    fig.update_xaxes(type="log", title_text="message size (bytes)", row=rows)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text=f"{y} (GB/s)" if y.endswith("_gbs") else y, col=1)
    return fig


def roofline(peak_tflops: float, bw_tbs: float, title: str = "Roofline") -> go.Figure:
    """The roofline model: attainable TFLOP/s = min(peak, intensity × memory bandwidth), log-log,
    with the ridge point (peak / bandwidth FLOP per byte) marked."""
    ridge = peak_tflops / bw_tbs
    xs = [ridge / 100 * 10 ** (i / 20) for i in range(81)]
    fig = _figure(title, xaxis_title="arithmetic intensity (FLOP per byte of HBM traffic)",
                  yaxis_title="attainable TFLOP/s", xaxis_type="log", yaxis_type="log")
    fig.add_scatter(x=xs, y=[min(peak_tflops, x * bw_tbs) for x in xs], mode="lines", name="roofline",
                    line=dict(color=PALETTE[0], width=3))
    fig.add_vline(x=ridge, line_dash="dot", line_color="gray")
    fig.add_annotation(x=math.log10(ridge), y=math.log10(peak_tflops), text=f"ridge {ridge:.0f} FLOP/B",
                       showarrow=True, arrowhead=2, ax=50, ay=40)
    fig.add_annotation(x=math.log10(xs[8]), y=math.log10(xs[8] * bw_tbs), text="memory-bound",
                       showarrow=False, yshift=20, textangle=-30)
    fig.add_annotation(x=math.log10(xs[-10]), y=math.log10(peak_tflops), text="compute-bound",
                       showarrow=False, yshift=12)
    return fig


# -- the trainer, proven ---------------------------------------------------------------------------
def metric_vs(df, x: str, y: str, by: str | None = None, peer: dict | None = None,
              peer_name: str = "peer", title: str | None = None, y_title: str | None = None) -> go.Figure:
    """One measured metric `y` against a swept setting `x` (e.g. MFU against micro-batch size), one
    line per value of the column `by`, and optionally another code's numbers {x: y} as star markers."""
    fig = _figure(title or f"{y} against {x}", xaxis_title=x, yaxis_title=y_title or y)
    groups = [(None, df)] if by is None else list(df.groupby(by, sort=True))
    for i, (value, part) in enumerate(groups):
        part = part.sort_values(x)
        fig.add_scatter(x=part[x], y=part[y], mode="lines+markers", marker=dict(size=10, color=PALETTE[i]),
                        name="measured" if by is None else f"{by} = {value}")
    if peer:
        fig.add_scatter(x=list(peer), y=list(peer.values()), mode="markers", name=peer_name,
                        marker=dict(symbol="star", size=16, color="black"))
    if y in ("mfu",) or (y_title or "").lower().startswith("mfu"):
        fig.update_yaxes(tickformat=".0%")
    return fig


def distribution(values, target: float | None = None, x_title: str = "value",
                 title: str = "Distribution", target_name: str = "target") -> go.Figure:
    """Histogram of measured values, with a dashed vertical line at a target (e.g. a 20 s startup)."""
    fig = _figure(title, xaxis_title=x_title, yaxis_title="runs", bargap=0.05)
    fig.add_histogram(x=list(values), name="runs", marker_color=PALETTE[0])
    if target is not None:
        fig.add_vline(x=target, line_dash="dash", line_color=PALETTE[1],
                      annotation_text=f"{target_name} {target:g}", annotation_position="top right")
    return fig


# -- chapters: comparisons and kernel timelines ------------------------------------------------------
def grouped_bars(df, x: str, y: str, color: str | None = None, title: str | None = None,
                 y_title: str | None = None, text_format: str = ".3g") -> go.Figure:
    """Bars of `y` for each value of `x`, one colour per value of `color` (e.g. predicted / measured)."""
    fig = _figure(title or f"{y} by {x}", barmode="group", xaxis_title=x, yaxis_title=y_title or y,
                  xaxis_type="category")
    groups = [(None, df)] if color is None else list(df.groupby(color, sort=False))
    for i, (value, part) in enumerate(groups):
        fig.add_bar(x=part[x].astype(str), y=part[y], name=str(value) if color else y,
                    marker_color=PALETTE[i % len(PALETTE)], texttemplate=f"%{{y:{text_format}}}",
                    textposition="outside")
    if y in ("mfu", "efficiency"):
        fig.update_yaxes(tickformat=".0%")
    return fig


def kernel_timeline(profile: dict, title: str = "GPU kernels of one training step") -> go.Figure:
    """The kernels of one profiled step (a record's `profile.timeline`) on their CUDA streams, coloured
    by kind: where communication (nccl) runs, and whether it overlaps compute on another stream."""
    t = profile["timeline"]
    rows = [dict(zip(t["columns"], k)) for k in t["kernels"]]
    streams = sorted({r["stream"] for r in rows}, key=lambda s: (s is None, s))
    fig = _figure(title, barmode="overlay", xaxis_title="milliseconds from the step's first kernel",
                  yaxis_title="CUDA stream", yaxis_type="category", bargap=0.3)
    for i, cat in enumerate(("gemm", "attention", "other", "nccl")):
        part = [r for r in rows if r["category"] == cat]
        if part:
            fig.add_bar(y=[f"stream {r['stream']}" for r in part], x=[max(r["duration_ms"], 0.002) for r in part],
                        base=[r["start_ms"] for r in part], orientation="h", name=cat,
                        marker_color=PALETTE[i], marker_line_width=0,
                        hovertemplate="%{base:.3f} ms + %{x:.3f} ms<extra>" + cat + "</extra>")
    fig.update_yaxes(categoryorder="array", categoryarray=[f"stream {s}" for s in streams])
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
