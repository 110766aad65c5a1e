"""charts.compare: bars per choice, and the trade-off scatter with its Pareto frontier."""

import pandas as pd
import plotly.graph_objects as go
import pytest

from megalab import charts


def test_grouped_bars_one_trace_per_colour():
    df = pd.DataFrame(
        {
            "tp": [1, 2, 1, 2],
            "GiB": [37.6, 21.5, 37.9, 21.3],
            "kind": ["measured"] * 2 + ["predicted"] * 2,
        }
    )
    fig = charts.grouped_bars(df, "tp", "GiB", color="kind")
    assert [t.name for t in fig.data] == ["measured", "predicted"]


def _recompute():
    return pd.DataFrame(
        {
            "recompute": ["none", "selective", "full", "offload", "worse"],
            "mem_peak_gib": [60.0, 40.0, 25.0, 20.0, 45.0],
            "step_time_s": [1.0, 1.05, 1.3, 1.6, 1.4],
        }
    )


def test_frontier_points_and_pareto_line():
    fig = charts.frontier(_recompute(), "mem_peak_gib", "step_time_s", "recompute")
    assert isinstance(fig, go.Figure)
    assert [t.name for t in fig.data] == ["choices", "Pareto frontier"]
    points, line = fig.data
    assert list(points.text) == ["none", "selective", "full", "offload", "worse"]
    assert list(line.x) == [20.0, 25.0, 40.0, 60.0] and list(line.y) == [1.6, 1.3, 1.05, 1.0]
    assert points.marker.color[-1] != points.marker.color[0]  # "worse" is off the frontier
    assert fig.layout.xaxis.title.text == "mem_peak_gib"


def test_frontier_maximize_flips_an_axis():
    df = _recompute().assign(tokens_per_s=lambda d: 1e5 / d["step_time_s"])
    fig = charts.frontier(
        df, "mem_peak_gib", "tokens_per_s", "recompute", maximize=("tokens_per_s",)
    )
    assert list(fig.data[1].x) == [20.0, 25.0, 40.0, 60.0]  # same choices: more tokens/s is better


def test_grouped_bars_readers_own_bars_beside_the_books():
    df = pd.DataFrame(
        {
            "layout": ["1 GPU", "EP 4", "1 GPU", "EP 4"],
            "step_time_s": [0.5, 0.2, 0.55, 0.21],
            "source": ["reference", "reference", "yours", "yours"],
        }
    )
    fig = charts.grouped_bars(df, "layout", "step_time_s")
    assert [t.name for t in fig.data] == ["step_time_s", "step_time_s (yours)"]
    assert list(fig.data[1].y) == [0.55, 0.21] and fig.data[1].marker.pattern.shape == "x"
    assert fig.data[0].marker.pattern.shape is None
    kinds = charts.grouped_bars(df.assign(kind="measured"), "layout", "step_time_s", color="kind")
    assert [t.name for t in kinds.data] == ["measured", "measured (yours)"]


def test_frontier_readers_own_choices_apart():
    df = pd.concat(
        [
            _recompute().assign(source="reference"),
            _recompute().assign(source="yours", step_time_s=lambda d: d["step_time_s"] * 1.1),
        ],
        ignore_index=True,
    )
    fig = charts.frontier(df, "mem_peak_gib", "step_time_s", "recompute")
    assert [t.name for t in fig.data] == [
        "choices",
        "Pareto frontier",
        "choices (yours)",
        "Pareto frontier (yours)",
    ]
    assert len(fig.data[0].x) == len(fig.data[2].x) == 5
    assert (
        fig.data[2].marker.symbol == charts.SYMBOLS["yours"] and fig.data[0].marker.symbol is None
    )
    assert list(fig.data[3].y) == pytest.approx([1.76, 1.43, 1.155, 1.1])
    same = charts.frontier(
        _recompute().assign(source="reference"), "mem_peak_gib", "step_time_s", "recompute"
    )
    assert [t.name for t in same.data] == ["choices", "Pareto frontier"]


def test_ratio_bars_mark_the_bars_above_one_and_draw_the_spread():
    df = pd.DataFrame(
        {
            "config": ["tp2", "cp2"],
            "ratio": [0.81, 1.12],
            "ratio_lo": [0.7, 1.0],
            "ratio_hi": [0.9, 1.2],
        }
    )
    fig = charts.ratio_bars(df, "config", title="ours / peer")
    bar = fig.data[0]
    assert isinstance(bar, go.Bar) and list(bar.y) == [0.81, 1.12]
    assert bar.marker.color[0] != bar.marker.color[1] and bar.marker.color[1] == charts.PALETTE[1]
    assert [round(v, 2) for v in bar.error_y.array] == [0.09, 0.08]
    assert [round(v, 2) for v in bar.error_y.arrayminus] == [0.11, 0.12]
    assert fig.layout.shapes[0].y0 == 1


def test_ratio_bars_by_group_put_each_group_in_a_trace_and_hatch_the_bars_above_one():
    df = pd.DataFrame(
        {
            "config": ["tp2", "pp2", "tp2", "pp2"],
            "lease": ["a", "a", "b", "b"],
            "ratio": [0.81, 0.99, 0.87, 1.05],
            "ratio_lo": [0.7, 0.9, 0.8, 0.9],
            "ratio_hi": [0.9, 1.1, 1.0, 1.2],
        }
    )
    fig = charts.ratio_bars(df, "config", group="lease")
    assert [t.name for t in fig.data] == ["a", "b"] and fig.layout.barmode == "group"
    assert list(fig.data[1].y) == [0.87, 1.05] and list(fig.data[1].marker.pattern.shape) == [
        "",
        "/",
    ]
    assert fig.data[0].marker.color != fig.data[1].marker.color


def test_grouped_bars_wrap_long_category_labels_and_keep_their_order():
    labels = [
        "1 GPU, TE attention, no recomputation",
        "TP 4 + SP + full recomputation, micro-batch 63",
        "TP 2",
    ]
    df = pd.DataFrame(
        {"layout": labels * 2, "MiB": [10.0, 20.0, 30.0] * 2, "kind": ["a"] * 3 + ["b"] * 3}
    )
    fig = charts.grouped_bars(df, "layout", "MiB", color="kind")
    ticks = list(fig.layout.xaxis.categoryarray)
    assert [t.replace("<br>", " ") for t in ticks] == labels  # the words kept, in order
    assert all(len(line) <= 28 for t in ticks for line in t.split("<br>"))
    assert "<br>" in ticks[0] and ticks[2] == "TP 2"
    assert (
        list(fig.data[1].x) == ticks
        and fig.layout.xaxis.tickangle == 0
        and fig.layout.xaxis.automargin
    )
    # text over the tallest bar is not cut
    assert all(t.cliponaxis is False for t in fig.data)


def test_grouped_bars_integers_read_as_integers_and_shares_as_percent():
    df = pd.DataFrame({"layout": ["TP 2", "TP 4"], "micro-batch": [7, 59]})
    fig = charts.grouped_bars(df, "layout", "micro-batch")
    assert fig.data[0].texttemplate == "%{y:,d}" and fig.layout.yaxis.tickformat == ",~r"
    fig.update_yaxes(type="log")  # as ch03 does: still 7, not 7.00
    assert fig.layout.yaxis.tickformat == ",~r"
    df = pd.DataFrame({"layout": ["TP 2", "TP 4"], "efficiency": [0.78, 0.91]})
    fig = charts.grouped_bars(df, "layout", "efficiency", y_title="TFLOP/s per GPU over one GPU's")
    assert fig.data[0].texttemplate == "%{y:.0%}" and fig.layout.yaxis.tickformat == ".0%"
    df = pd.DataFrame({"layout": ["TP 2", "TP 4"], "ms": [91.25, 80.0]})
    fig = charts.grouped_bars(df, "layout", "ms", y_title="ms per step")
    assert fig.data[0].texttemplate == "%{y:.3~g}" and not fig.layout.yaxis.tickformat
    fig = charts.grouped_bars(df, "layout", "ms", text_format=",.0f")
    assert fig.data[0].texttemplate == "%{y:,.0f}"
    # a 95% interval is a confidence level, not the unit: ms stay ms
    fig = charts.grouped_bars(df, "layout", "ms", y_title="ms per step (median, 95% interval)")
    assert not fig.layout.yaxis.tickformat
    fig = charts.grouped_bars(df, "layout", "ms", y_title="share of the step (%)")
    assert fig.layout.yaxis.tickformat == ".0%"


def test_grouped_bars_draw_an_interval_around_each_bar():
    """A median's 95% interval: whiskers from lo to hi, the value inside the bar."""
    df = pd.DataFrame(
        {
            "layout": ["EP 2", "ETP 2"],
            "ms": [300.0, 500.0],
            "lo": [290.0, 480.0],
            "hi": [320.0, 510.0],
        }
    )
    fig = charts.grouped_bars(df, "layout", "ms", interval=("lo", "hi"))
    (bar,) = fig.data
    assert list(bar.error_y.array) == [20.0, 10.0] and list(bar.error_y.arrayminus) == [10.0, 20.0]
    assert bar.textposition == "inside" and bar.insidetextanchor == "middle"
    assert charts.grouped_bars(df, "layout", "ms").data[0].error_y.array is None
