"""charts.parity: loss curves against the reference inside a tolerance band."""
import pytest

from megalab import charts


def test_loss_parity_band_around_reference():
    s = {"step": [0, 1, 2], "loss": [10.0, 9.0, 8.0]}
    fig = charts.loss_parity({"dp4": s, "tp2": s}, band=0.05)
    assert [t.name for t in fig.data] == ["±0.05 around dp4", "dp4", "tp2"]
    assert max(fig.data[0].y) == pytest.approx(10.05)
