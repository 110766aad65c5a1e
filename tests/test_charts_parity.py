"""charts.parity: loss curves against the reference inside a tolerance band."""

import pytest

from megalab import charts


def test_loss_parity_band_around_reference():
    s = {"step": [0, 1, 2], "loss": [10.0, 9.0, 8.0]}
    fig = charts.loss_parity({"dp4": s, "tp2": s}, band=0.05)
    assert [t.name for t in fig.data] == ["±0.05 around dp4", "dp4", "tp2"]
    assert max(fig.data[0].y) == pytest.approx(10.05)


def test_loss_parity_readers_own_curves_apart():
    s = {"step": [0, 1, 2], "loss": [10.0, 9.0, 8.0]}
    fig = charts.loss_parity(
        {
            "1 GPU": s,
            "tp2": s,
            "tp2 (yours)": {**s, "source": "yours"},
            "1 GPU again": {**s, "source": "yours"},
        },
        band=0.05,
    )
    assert [t.name for t in fig.data] == [
        "±0.05 around 1 GPU",
        "1 GPU",
        "tp2",
        "tp2 (yours)",
        "1 GPU again (yours)",
    ]
    assert fig.data[3].marker.symbol == charts.SYMBOLS["yours"] and fig.data[3].line.dash == "dash"
    assert fig.data[2].mode == "lines" and fig.data[3].mode == "lines+markers"
