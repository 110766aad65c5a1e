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
    keys = {c.key for c in table["cfg"]}
    assert recorded and all(c.cfg.key in keys for c in recorded)
    for c in recorded:
        row = table[[k == c.cfg.key for k in (x.key for x in table["cfg"])]].iloc[0]
        assert row["measured"] and row["measured_ms"] == pytest.approx(c.measured_s * 1e3)
    assert table.loc[~table["measured"], "measured_ms"].isna().all()
    assert lines[0].startswith("gpt-1.2b on 1 × H200, global batch 8, sequence 1024: ")
    assert "eager steps" in lines[1] and "median error" in lines[1]
    assert (
        lines[2].startswith("Predicted and recorded steps are eager") and widgets.EAGER in lines[2]
    )


def test_selective_recomputation_twins_are_left_out_and_the_rest_ranked_again():
    cfg = presets.get("gpt-1.2b").replace(gpus=4, gbs=32, seq=1024)
    table, lines = widgets.ranking(cfg, gpu="H200", top=10)
    assert list(table["rank"][:10]) == list(range(1, 11))
    top = table.head(10)
    same = top.assign(base=[c.replace(recompute="none").key for c in top["cfg"]])
    assert not same.duplicated(["base", "predicted_ms", "mem_gib"]).any()
    assert "with selective recomputation left out" in lines[0]


def test_ranking_html_bolds_recorded_rows_and_leaves_the_others_blank():
    table, lines = widgets.ranking(GPT12_1GPU, gpu="H200", top=5)
    html = widgets.ranking_html(table, lines)
    assert html.count("font-weight:bold") == int(table["measured"].sum()) >= 1
    first = table.iloc[0]
    assert (
        f"{first['predicted_ms']:.1f}" in html
        and "Why not first" in html
        and "median error" in html
    )
    assert "TP(" not in html and "Predicted eager step (ms)" in html
    assert "Prediction error" not in html  # eager records of no comparison group: no calibration
    recorded = table[table["measured"] & table["measured_ms"].notna()].iloc[0]
    assert f"{recorded['measured_ms']:.1f}" in html


def test_the_roofline_ranks_and_says_so_without_enough_records(tmp_path):
    # calibrate raised NotRecorded
    assert calibration.for_search("H200", Store(tmp_path)) is None
    table, lines = widgets.ranking(GPT12_1GPU, gpu="H200", top=3, store=Store(tmp_path))
    assert len(table) == 3 and not table["measured"].any()
    assert lines[-1] == search.CAVEAT


def test_a_model_that_fits_nowhere_says_so():
    table, lines = widgets.ranking(presets.get("gpt-175b").replace(gpus=1, gbs=8), gpu="H200")
    assert table.empty and lines[1].startswith("no layout of gpt-175b is predicted to fit")


def test_the_planner_shows_the_ranking_live_and_static():
    p = widgets.planner("gpt-1.2b", gpu="H200", gpus=1, mbs=8, gbs=8, seq=1024)
    assert "Recorded eager step (ms)" in p._rank.value and "font-weight:bold" in p._rank.value
    assert p._rank.value in p._repr_mimebundle_()["text/html"]
    before = p._ranked
    p._c["recompute"].value = "full"  # a layout change does not search again
    assert p._ranked is before
    p._c["gpus"].value = 2  # a GPU count does
    assert "on 2 × H200" in p._rank.value


def test_rank_of_finds_the_layout_and_says_why_it_is_not_first():
    """The planner's starting layout (gpt-1.2b, TP 2 × PP 2, micro-batch 4, 4 GPUs, gbs 32) is
    ranked, behind the first, with the reason the ranking table gives it; the first is rank 1."""
    from megalab import presets

    cfg = presets.get("gpt-1.2b").replace(gpus=4, tp=2, pp=2, mbs=4, gbs=32)
    where = widgets.rank_of(cfg)
    assert 1 < where["rank"] <= where["of"] and where["why"].endswith("in all")
    first = widgets.best(cfg)
    assert where["first"].key == first.key and widgets.rank_of(first)["rank"] == 1
    with pytest.raises(LookupError, match="not among"):
        widgets.rank_of(cfg.replace(mbs=3))
