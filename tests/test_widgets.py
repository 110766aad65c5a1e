"""widgets.py: the planner's ranking of layouts, read from the committed results store."""

import pytest

from megalab.predict import calibration, search
from megalab.runs import presets
from megalab.book import widgets
from megalab.jobs.running import Store

# recorded on the reference machine (1 H200, mbs 8): the search must find that record
GPT12_1GPU = presets.get("gpt-1.2b").replace(gpus=1, gbs=8, seq=1024)


def test_ranking_marks_the_recorded_layout_with_its_step_time():
    table, lines = widgets.ranking(GPT12_1GPU, gpu="H200", top=5)
    found = search.search(GPT12_1GPU, 1, gpu="H200", top=None, model=calibration.for_search("H200"))
    assert list(table["rank"][:5]) == [1, 2, 3, 4, 5]
    assert table["predicted_ms"].is_monotonic_increasing
    recorded = [c for c in found if c.measured]
    assert recorded and all(c.rank <= 5 or c.rank in set(table["rank"]) for c in recorded)
    for c in recorded:
        row = table[table["rank"] == c.rank].iloc[0]
        assert row["measured"] and row["measured_ms"] == pytest.approx(c.measured_s * 1e3)
    assert table.loc[~table["measured"], "measured_ms"].isna().all()
    assert lines == [found.summary(), search.CALIBRATED] and "held-out median" in lines[0]


def test_ranking_html_bolds_recorded_rows_and_leaves_the_others_blank():
    table, lines = widgets.ranking(GPT12_1GPU, gpu="H200", top=5)
    html = widgets.ranking_html(table, lines)
    assert html.count("font-weight:bold") == int(table["measured"].sum()) >= 1
    first = table.iloc[0]
    assert (
        f"{first['predicted_ms']:.1f}" in html
        and "Why not first" in html
        and "held-out median" in html
    )
    assert "TP(" not in html and "Predicted step (ms)" in html and "Prediction error" in html
    recorded = table[table["measured"] & table["measured_ms"].notna()].iloc[0]
    err = (recorded["predicted_ms"] - recorded["measured_ms"]) / recorded["measured_ms"]
    assert f"{err:+.0%}" in html


def test_the_roofline_ranks_and_says_so_without_enough_records(tmp_path):
    # calibrate raised NotRecorded
    assert calibration.for_search("H200", Store(tmp_path)) is None
    table, lines = widgets.ranking(GPT12_1GPU, gpu="H200", top=3, store=Store(tmp_path))
    assert len(table) == 3 and not table["measured"].any()
    assert lines[1] == search.CAVEAT


def test_a_model_that_fits_nowhere_says_so():
    table, lines = widgets.ranking(presets.get("gpt-175b").replace(gpus=1, gbs=8), gpu="H200")
    assert table.empty and lines[1].startswith("no layout of gpt-175b is predicted to fit")


def test_the_planner_shows_the_ranking_live_and_static():
    p = widgets.planner("gpt-1.2b", gpu="H200", gpus=1, mbs=8, gbs=8, seq=1024)
    assert "Recorded step (ms)" in p._rank.value and "font-weight:bold" in p._rank.value
    assert p._rank.value in p._repr_mimebundle_()["text/html"]
    before = p._ranked
    p._c["recompute"].value = "full"  # a layout change does not search again
    assert p._ranked is before
    p._c["gpus"].value = 2  # a GPU count does
    assert "on 2x H200" in p._rank.value
