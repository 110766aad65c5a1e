"""charts.breakdown: memory per GPU and step time as stacked parts."""

import plotly.graph_objects as go

from megalab import charts


def test_memory_breakdown_stacks_prediction_beside_measurement():
    pred = {"weights": 2.0, "grads": 2.0, "optimizer": 12.0, "activations": 5.0, "total": 21.0}
    fig = charts.memory_breakdown(pred, {"allocated": 20.1}, capacity_gib=80)
    assert isinstance(fig, go.Figure)
    assert [t.name for t in fig.data] == [
        "weights",
        "gradients",
        "optimizer state",
        "activations",
        "measured allocated",
    ]
    assert fig.layout.barmode == "stack"
    assert fig.layout.xaxis.title.text == "GiB per GPU"
    assert fig.layout.shapes[0].x0 == 80
    assert fig.data[3].text == ("21.0 GiB",)


def test_step_time_breakdown_has_three_parts():
    fig = charts.step_time_breakdown({"pp4": {"compute_s": 1.0, "bubble_s": 0.3, "comm_s": 0.1}})
    assert [t.name for t in fig.data] == ["compute", "pipeline bubble", "communication"]
    assert fig.data[1].x == (300.0,) and fig.layout.xaxis.title.text == "ms per step"
