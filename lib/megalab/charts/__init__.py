"""The book's figures: each function takes plain data and returns a `plotly.graph_objects.Figure`.

Nothing here calls `.show()`: a notebook cell ends with the figure and the renderer set by
`setup_notebook()` displays it (see `_style` for why the book needs its own renderer). One template
(`TEMPLATE`) gives every figure the same look. Points a reader measured sit beside the reference
records: a `source` column ("reference" or "yours") picks the marker (`SYMBOLS`).

    charts.setup_notebook()                              # first cell of every chapter
    charts.matmul_vs_size(bench.load("matmul"), peak=989)

Figures by kind, one module each; every public name is re-exported here, so notebooks call
`charts.<name>(...)` without knowing the module:

    machine     know your machine: matmul, HBM, NCCL bandwidth against size; the roofline
    breakdown   what a step is made of: memory per GPU, step time (stacked parts)
    scaling     a metric against a swept setting: scaling with the ideal line, metric_vs
    compare     choices side by side: grouped bars, a ratio against 1, the trade-off frontier
    spread      how measurements scatter: histogram against a target, step time across runs,
                predicted
                against measured
    parity      loss curves against the reference inside a tolerance band
    timeline    who runs when: kernels on CUDA streams, Gantt charts of pipeline stages or ranks,
                the bubble
    matrix      a matrix as coloured cells (tokens per expert per layer)
"""

from megalab.charts._style import PALETTE, RENDERER, SYMBOLS, TEMPLATE, setup_notebook
from megalab.charts.breakdown import PARTS, memory_breakdown, step_time_breakdown
from megalab.charts.compare import frontier, grouped_bars, ratio_bars
from megalab.charts.matrix import heatmap
from megalab.charts.machine import (
    bandwidth_vs_size,
    half_bandwidth_size,
    hbm_vs_size,
    matmul_vs_size,
    roofline,
)
from megalab.charts.parity import loss_difference, loss_parity
from megalab.charts.scaling import metric_vs, scaling
from megalab.charts.spread import distribution, predicted_vs_measured, step_time_spread
from megalab.charts.timeline import gantt, kernel_timeline, pipeline_bubble, pipeline_schedule

__all__ = [
    "PALETTE",
    "RENDERER",
    "SYMBOLS",
    "TEMPLATE",
    "PARTS",
    "setup_notebook",
    "matmul_vs_size",
    "hbm_vs_size",
    "half_bandwidth_size",
    "bandwidth_vs_size",
    "roofline",
    "memory_breakdown",
    "step_time_breakdown",
    "scaling",
    "metric_vs",
    "grouped_bars",
    "ratio_bars",
    "frontier",
    "distribution",
    "step_time_spread",
    "predicted_vs_measured",
    "loss_difference",
    "loss_parity",
    "kernel_timeline",
    "gantt",
    "pipeline_schedule",
    "pipeline_bubble",
    "heatmap",
]
