"""charts.scaling: throughput against GPUs with the ideal line, any metric against a swept setting."""
import pandas as pd
import pytest

from megalab import charts


def test_scaling_ideal_line_and_efficiency():
    df = pd.DataFrame({"gpus": [1, 2, 4], "tokens_per_s": [100.0, 190.0, 360.0]})
    fig = charts.scaling(df, kind="strong")
    ideal = next(t for t in fig.data if t.name == "ideal (linear)")
    assert list(ideal.y) == [100.0, 200.0, 400.0]
    eff = next(t for t in fig.data if t.name == "efficiency (reference)")
    assert list(eff.y) == pytest.approx([1.0, 0.95, 0.9])
    assert fig.layout.yaxis2.title.text == "efficiency"
    with pytest.raises(ValueError):
        charts.scaling(df, kind="sideways")


def test_metric_vs_one_line_per_group_and_peer_stars():
    df = pd.DataFrame({"mbs": [1, 2, 4, 4], "mfu": [0.2, 0.3, 0.45, 0.44], "dropout": [0.0, 0.0, 0.0, 0.1]})
    fig = charts.metric_vs(df, "mbs", "mfu", by="dropout", peer={4: 0.45}, peer_name="Megatron-LM")
    assert [t.name for t in fig.data] == ["dropout = 0.0", "dropout = 0.1", "Megatron-LM"]
    assert list(fig.data[0].x) == [1, 2, 4] and fig.data[2].marker.symbol == "star"
    assert fig.layout.yaxis.tickformat == ".0%" and fig.layout.xaxis.title.text == "mbs"
