"""charts.compare: bars per choice, and the trade-off scatter with its Pareto frontier."""
import pandas as pd
import plotly.graph_objects as go

from megalab import charts


def test_grouped_bars_one_trace_per_colour():
    df = pd.DataFrame({"tp": [1, 2, 1, 2], "GiB": [37.6, 21.5, 37.9, 21.3], "kind": ["measured"] * 2 + ["predicted"] * 2})
    fig = charts.grouped_bars(df, "tp", "GiB", color="kind")
    assert [t.name for t in fig.data] == ["measured", "predicted"]


def _recompute():
    return pd.DataFrame({"recompute": ["none", "selective", "full", "offload", "worse"],
                         "mem_peak_gib": [60.0, 40.0, 25.0, 20.0, 45.0],
                         "step_time_s": [1.0, 1.05, 1.3, 1.6, 1.4]})


def test_frontier_points_and_pareto_line():
    fig = charts.frontier(_recompute(), "mem_peak_gib", "step_time_s", "recompute")
    assert isinstance(fig, go.Figure)
    assert [t.name for t in fig.data] == ["choices", "Pareto frontier"]
    points, line = fig.data
    assert list(points.text) == ["none", "selective", "full", "offload", "worse"]
    assert list(line.x) == [20.0, 25.0, 40.0, 60.0] and list(line.y) == [1.6, 1.3, 1.05, 1.0]
    assert points.marker.color[-1] != points.marker.color[0]   # "worse" is off the frontier
    assert fig.layout.xaxis.title.text == "mem_peak_gib"


def test_frontier_maximize_flips_an_axis():
    df = _recompute().assign(tokens_per_s=lambda d: 1e5 / d["step_time_s"])
    fig = charts.frontier(df, "mem_peak_gib", "tokens_per_s", "recompute", maximize=("tokens_per_s",))
    assert list(fig.data[1].x) == [20.0, 25.0, 40.0, 60.0]   # same choices: more tokens/s is better
