"""Know your machine: matmul and HBM throughput against size, NCCL bandwidth against message size,
the roofline."""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from megalab.charts._style import PALETTE, SYMBOLS, TEMPLATE, _by_source, _figure


def matmul_vs_size(df, peak: float, title: str = "Matmul throughput") -> go.Figure:
    """TFLOP/s of square matmuls (columns n, tflops, dtype[, source]) against n, log x, with the
    datasheet peak as a dashed line."""
    fig = _figure(
        title, xaxis_title="matrix size n (n×n·n×n)", yaxis_title="TFLOP/s", xaxis_type="log"
    )
    i = 0
    for src, part in _by_source(df):
        for dtype, d in part.groupby("dtype", sort=True):
            d = d.sort_values("n")
            fig.add_scatter(
                x=d["n"],
                y=d["tflops"],
                mode="lines+markers",
                name=f"{dtype} ({src})",
                marker=dict(symbol=SYMBOLS.get(src, "circle"), size=9),
                line=dict(color=PALETTE[i % len(PALETTE)]),
            )
            i += 1
    fig.add_hline(
        y=peak,
        line_dash="dash",
        line_color="black",
        annotation_text=f"datasheet peak {peak:.0f} TFLOP/s (dense bf16)",
        annotation_position="bottom right",
    )
    return fig


def hbm_vs_size(df, peak_tbs: float, title: str = "HBM bandwidth") -> go.Figure:
    """Copy bandwidth (columns size_bytes, gbs[, source]) against bytes copied, log x, with the
    datasheet HBM bandwidth as a dashed line (TB/s)."""
    fig = _figure(title, xaxis_title="bytes copied", yaxis_title="TB/s", xaxis_type="log")
    for i, (src, d) in enumerate(_by_source(df)):
        d = d.sort_values("size_bytes")
        fig.add_scatter(
            x=d["size_bytes"],
            y=d["gbs"] / 1e3,
            mode="lines+markers",
            name=f"copy ({src})",
            marker=dict(symbol=SYMBOLS.get(src, "circle"), size=9),
            line=dict(color=PALETTE[i]),
        )
    fig.add_hline(
        y=peak_tbs,
        line_dash="dash",
        line_color="black",
        annotation_text=f"datasheet {peak_tbs:g} TB/s",
        annotation_position="bottom right",
    )
    return fig


def half_bandwidth_size(sizes, bws) -> float | None:
    """Smallest message size reaching half the peak bandwidth (Hockney's n½): below it a collective
    is latency-bound, above it bandwidth-bound. None if no size qualifies."""
    pairs = sorted(zip(sizes, bws))
    if not pairs:
        return None
    half = max(b for _, b in pairs) / 2
    return next((float(s) for s, b in pairs if b >= half), None)


BANDWIDTHS = {"busbw_gbs": "bus bandwidth (GB/s)", "algbw_gbs": "algorithm bandwidth (GB/s)"}


def bandwidth_vs_size(df, y: str = "busbw_gbs", title: str = "NCCL bus bandwidth") -> go.Figure:
    """Log-log bus bandwidth against message size (columns op, gpus, size_bytes, `y`[, source]),
    one panel per op (titled in words: "all-reduce"), one line per GPU count, the measured peak
    annotated and the latency-bound region (sizes below n½, see `half_bandwidth_size`) shaded."""
    ops = [
        op
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
        if op in set(df["op"])
    ]
    ops += sorted(set(df["op"]) - set(ops))
    cols = 2 if len(ops) > 1 else 1
    rows = math.ceil(len(ops) / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[op.replace("_", "-") for op in ops],
        shared_yaxes=True,
        horizontal_spacing=0.06,
        vertical_spacing=0.14,
    )
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
                fig.add_scatter(
                    x=d["size_bytes"],
                    y=d[y],
                    mode="lines+markers",
                    row=r,
                    col=c,
                    name=f"{n} GPUs ({src})",
                    legendgroup=f"{n}-{src}",
                    showlegend=k == 0,
                    marker=dict(symbol=SYMBOLS.get(src, "circle"), size=7),
                    line=dict(color=PALETTE[j % len(PALETTE)]),
                )
        best = d_op.iloc[int(d_op[y].to_numpy().argmax())]
        fig.add_annotation(
            x=math.log10(best["size_bytes"]),
            y=math.log10(best[y]),
            row=r,
            col=c,
            text=f"peak {best[y]:.0f} GB/s<br>({int(best['gpus'])} GPUs)",
            showarrow=True,
            # below the curves' flat end: clear of them
            arrowhead=2,
            ax=0,
            ay=80,
            xanchor="right",
        )
        n_half = half_bandwidth_size(d_op["size_bytes"], d_op[y])
        if n_half:
            fig.add_vrect(
                x0=d_op["size_bytes"].min(),
                x1=n_half,
                fillcolor="gray",
                opacity=0.12,
                line_width=0,
                row=r,
                col=c,
            )
            # a log axis places annotations at log10 of the value (add_vrect's own label would not)
            fig.add_annotation(
                x=math.log10(n_half),
                y=math.log10(d_op[y].min()),
                row=r,
                col=c,
                showarrow=False,
                text=f"latency-bound:<br>below n½ = {_bytes(n_half)}",
                xanchor="right",
                yanchor="bottom",
                align="right",
            )
    fig.update_xaxes(type="log", title_text="message size (bytes)", row=rows)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text=BANDWIDTHS.get(y, y), col=1)
    return fig


def _bytes(n: float) -> str:
    """A message size in words: 16 MiB, 512 KiB, 1 GiB."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def roofline(peak_tflops: float, bw_tbs: float, title: str = "Roofline") -> go.Figure:
    """The roofline model: attainable TFLOP/s = min(peak, intensity × memory bandwidth), log-log,
    with the ridge point (peak / bandwidth FLOP per byte) marked."""
    ridge = peak_tflops / bw_tbs
    xs = [ridge / 100 * 10 ** (i / 20) for i in range(81)]
    fig = _figure(
        title,
        xaxis_title="arithmetic intensity (FLOP per byte of HBM traffic)",
        yaxis_title="attainable TFLOP/s",
        xaxis_type="log",
        yaxis_type="log",
    )
    fig.add_scatter(
        x=xs,
        y=[min(peak_tflops, x * bw_tbs) for x in xs],
        mode="lines",
        name="roofline",
        line=dict(color=PALETTE[0], width=3),
    )
    fig.add_vline(x=ridge, line_dash="dot", line_color="gray")
    fig.add_annotation(
        x=math.log10(ridge),
        y=math.log10(peak_tflops),
        text=f"ridge {ridge:.0f} FLOP/B",
        showarrow=True,
        arrowhead=2,
        ax=50,
        ay=40,
    )
    fig.add_annotation(
        x=math.log10(xs[8]),
        y=math.log10(xs[8] * bw_tbs),
        text="memory-bound",
        showarrow=False,
        yshift=20,
        textangle=-30,
    )
    fig.add_annotation(
        x=math.log10(xs[-10]),
        y=math.log10(peak_tflops),
        text="compute-bound",
        showarrow=False,
        yshift=12,
    )
    return fig
