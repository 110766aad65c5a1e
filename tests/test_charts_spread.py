"""charts.spread: a histogram against a target, step-time boxes across recorded runs."""

from megalab import charts


def test_distribution_histogram_with_target_line():
    fig = charts.distribution([15.0, 21.0, 25.0], target=20, x_title="seconds")
    assert fig.data[0].type == "histogram" and list(fig.data[0].x) == [15.0, 21.0, 25.0]
    assert fig.layout.shapes[0].x0 == 20 and fig.layout.xaxis.title.text == "seconds"


def test_step_time_spread_drops_warmup_steps():
    recs = [
        {
            "config": {"gpus": 1, "gbs": 16},
            "series": {"step_time_s": [9.0, 9.0, 9.0, 0.8, 0.9]},
            "tags": [],
        },
        {
            "config": {"gpus": 1, "gbs": 16},
            "series": {"step_time_s": [9.0, 9.0, 9.0, 0.7, None]},
            "tags": ["packed"],
        },
    ]
    fig = charts.step_time_spread(recs)
    # warm-up steps dropped
    assert list(fig.data[0].y) == [0.8, 0.9] and list(fig.data[1].y) == [0.7]


def test_predicted_vs_measured_log_axes_line_and_markers():
    import pandas as pd

    df = pd.DataFrame(
        {
            "label": ["a", "b", "c"],
            "family": ["DP", "DP", "TP"],
            "set": ["fit", "held out", "fit"],
            "measured_s": [0.1, 1.0, 2.0],
            "predicted_s": [0.12, 0.9, 3.0],
        }
    )
    fig = charts.predicted_vs_measured(df)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    line, *points = fig.data
    assert list(line.x) == list(line.y)  # the y = x line
    assert [p.name for p in points] == ["DP, fit", "DP, held out", "TP, fit"]
    assert points[0].marker.symbol == "circle" and points[1].marker.symbol == "circle-open"
    assert (
        list(points[1].x) == [1.0] and list(points[1].y) == [0.9] and list(points[1].text) == ["b"]
    )
