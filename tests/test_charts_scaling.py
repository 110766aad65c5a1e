"""charts.scaling: throughput against GPUs with the ideal line, any metric against a swept
setting."""

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
    df = pd.DataFrame(
        {"mbs": [1, 2, 4, 4], "mfu": [0.2, 0.3, 0.45, 0.44], "dropout": [0.0, 0.0, 0.0, 0.1]}
    )
    fig = charts.metric_vs(df, "mbs", "mfu", by="dropout", peer={4: 0.45}, peer_name="Megatron-LM")
    assert [t.name for t in fig.data] == ["dropout = 0.0", "dropout = 0.1", "Megatron-LM"]
    assert list(fig.data[0].x) == [1, 2, 4] and fig.data[2].marker.symbol == "star"
    assert fig.layout.yaxis.tickformat == ".0%" and fig.layout.xaxis.title.text == "mbs"


def test_metric_vs_draws_a_readers_own_points_apart():
    df = pd.DataFrame(
        {
            "seq": [2048, 4096, 2048, 4096],
            "GiB": [20.0, 30.0, 21.0, 31.5],
            "kind": ["measured"] * 4,
            "source": ["reference", "reference", "yours", "yours"],
        }
    )
    fig = charts.metric_vs(df, "seq", "GiB", by="kind")
    assert [t.name for t in fig.data] == ["kind = measured", "kind = measured (yours)"]
    book, mine = fig.data
    assert list(book.y) == [20.0, 30.0] and list(mine.y) == [21.0, 31.5]
    assert mine.marker.symbol == charts.SYMBOLS["yours"] != book.marker.symbol
    assert mine.marker.color == book.marker.color  # same group, same colour
    only_book = charts.metric_vs(df[df["source"] == "reference"], "seq", "GiB", by="kind")
    # recorded only: drawn as before
    assert [t.name for t in only_book.data] == ["kind = measured"]
