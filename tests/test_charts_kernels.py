"""charts.kernels: a profiled step's kernel time by kind, and the GPU's idle time, as stacked
bars."""

import plotly.graph_objects as go

from megalab.charts.kernels import KIND_COLOURS, kernel_time


def test_kernel_time_stacks_kinds_and_idle_per_label():
    parts = {
        "none": {"gemm": 77.0, "attention": 31.0, "other": 45.0, "nccl": 0.0, "idle": 133.0},
        "full": {"gemm": 100.0, "attention": 43.0, "other": 52.0, "nccl": 0.0, "idle": 315.0},
    }
    fig = kernel_time(parts, title="t")
    assert isinstance(fig, go.Figure) and fig.layout.barmode == "stack"
    # nccl: zero everywhere
    assert [t.name for t in fig.data] == ["gemm", "attention", "other", "idle"]
    assert list(fig.data[0].y) == ["none", "full"] and list(fig.data[0].x) == [77.0, 100.0]
    assert (
        fig.data[3].marker.color == KIND_COLOURS["idle"] and fig.data[3].marker.pattern.shape == "/"
    )
    assert fig.layout.xaxis.title.text == "ms per step" and fig.layout.yaxis.autorange == "reversed"


def test_a_kind_missing_from_one_label_counts_as_zero():
    fig = kernel_time({"a": {"gemm": 1.0}, "b": {"gemm": 2.0, "other": 3.0}}, y_title="choice")
    assert list(fig.data[1].x) == [0.0, 3.0] and fig.layout.yaxis.title.text == "choice"


def test_kinds_in_timeline_order_idle_last():
    fig = kernel_time(
        {"a": {"idle": 1.0, "other": 1.0, "attention": 1.0, "extra": 1.0, "gemm": 1.0}}
    )
    assert [t.name for t in fig.data] == ["gemm", "attention", "other", "extra", "idle"]
