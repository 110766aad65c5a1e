"""The planner page's calibrated estimate, read from the committed results store."""

import pytest

from megalab.book import widgets
from megalab.runs import presets


def test_estimate_puts_the_calibrated_terms_in_words_and_they_add_up():
    cfg = presets.get("gpt-1.2b").replace(gpus=4, tp=2, pp=2, mbs=4, gbs=32)
    table, line = widgets.estimate(cfg, gpu="H200")
    assert list(table.columns) == ["term", "ms", "share of the step"]
    assert list(table["term"]) == list(widgets.TERMS.values())
    parts, step = table["ms"].iloc[:-1].sum(), table["ms"].iloc[-1]
    assert parts == pytest.approx(step, rel=0.01)
    assert table["share of the step"].iloc[-1] == pytest.approx(1)
    assert "held out" in line and "MFU" in line
