"""charts.spread: a histogram against a target, step-time boxes across recorded runs."""
from megalab import charts


def test_distribution_histogram_with_target_line():
    fig = charts.distribution([15.0, 21.0, 25.0], target=20, x_title="seconds")
    assert fig.data[0].type == "histogram" and list(fig.data[0].x) == [15.0, 21.0, 25.0]
    assert fig.layout.shapes[0].x0 == 20 and fig.layout.xaxis.title.text == "seconds"


def test_step_time_spread_drops_warmup_steps():
    recs = [{"config": {"gpus": 1, "gbs": 16}, "series": {"step_time_s": [9.0, 9.0, 9.0, 0.8, 0.9]}, "tags": []},
            {"config": {"gpus": 1, "gbs": 16}, "series": {"step_time_s": [9.0, 9.0, 9.0, 0.7, None]}, "tags": ["packed"]}]
    fig = charts.step_time_spread(recs)
    assert list(fig.data[0].y) == [0.8, 0.9] and list(fig.data[1].y) == [0.7]   # warm-up steps dropped
