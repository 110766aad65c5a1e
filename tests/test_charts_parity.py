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


def test_loss_difference_draws_each_layout_minus_its_reference_inside_the_band():
    ref = {"step": [0, 1, 2], "loss": [10.0, 9.0, 8.0]}
    fig = charts.loss_difference(
        {"1 GPU": ref, "TP 2": {"step": [0, 1, 2], "loss": [10.0, 9.01, 7.99]}}, band=0.02
    )
    band, tp2 = fig.data
    assert band.name == "allowed band, ±0.02" and (max(band.y), min(band.y)) == (0.02, -0.02)
    assert tp2.name == "TP 2" and [round(v, 3) for v in tp2.y] == [0.0, 0.01, -0.01]
    assert fig.layout.yaxis.range == (-0.03, 0.03)
    assert "difference" in fig.layout.yaxis.title.text and fig.layout.xaxis.title.text == "step"
    assert fig.layout.legend.yanchor == "top" and fig.layout.legend.y < -0.2  # clears "step"


def test_loss_difference_pairs_each_curve_with_its_own_reference_and_band():
    def curve(*loss, **extra):
        return {"step": [0, 1], "loss": list(loss), **extra}

    fig = charts.loss_difference(
        {
            "1 GPU, 4k": curve(10.0, 9.0),
            "CP 4, 4k": curve(10.0, 9.005),
            "1 GPU, 16k": curve(11.0, 10.0),
            "CP 2, 16k": curve(11.0, 9.99, source="yours"),
        },
        band={"1 GPU, 4k": 0.02, "1 GPU, 16k": 0.05},
        references={"CP 4, 4k": "1 GPU, 4k", "CP 2, 16k": "1 GPU, 16k"},
    )
    assert [t.name for t in fig.data] == [
        "allowed band, ±0.05 (against 1 GPU, 16k)",
        "allowed band, ±0.02 (against 1 GPU, 4k)",
        "CP 4, 4k",
        "CP 2, 16k (yours)",
    ]
    assert [round(v, 3) for v in fig.data[3].y] == [0.0, -0.01]
    assert fig.data[3].line.dash == "dash" and fig.data[2].mode == "lines"
