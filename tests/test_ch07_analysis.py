"""ch07_analysis: the ranking's test on the case runs, the graphed groups beside both models, a
ranking with its error bars, and the commands of a pick (on the repository's records)."""

import argparse
import math
import shlex

import pandas as pd
import pytest

from megalab import presets, search, timings
from megalab.book.chapters import ch07_analysis as ch07
from megalab.predict import calibration
from megalab.runs.flags import add_config_args, config_from_args


@pytest.fixture(scope="module")
def cal():
    return calibration.calibrate()


@pytest.fixture(scope="module")
def refit(cal):
    host = timings.group(None, ch07.GROUPS[1], "H200").attrs["host"]
    return calibration.calibrate_host(host=host, graphs=True, start=cal)


def _parsed(line: str):
    words = shlex.split(line)
    assert words[:2] == ["megalab", "run"] and words[-2:] == ["--mode", "live"]
    return config_from_args(add_config_args(argparse.ArgumentParser()).parse_args(words[2:-2]))


@pytest.mark.parametrize(
    "cfg, short",
    [
        (presets.get("llama3-8b").replace(gpus=4, seq=4096, gbs=32, dist_opt=True), True),
        (presets.get("gpt-1.2b").replace(gpus=4, tp=2, pp=2, vpp=2, mbs=2, gbs=16, sp=True), True),
        (presets.get("olmoe-1b-7b").replace(gpus=2, ep=2, mbs=8, gbs=32, cuda_graphs="te"), True),
        # a flag the preset sets (--untied) cannot be unset after --preset: every flag instead
        (presets.get("llama3-8b").replace(tied_embeddings=True), False),
    ],
)
def test_the_megalab_line_parses_back_to_the_config(cfg, short):
    line = ch07.megalab_command(cfg)
    assert _parsed(line) == cfg and "--gpus" in line and ("--preset" in line) == short


def test_the_default_jobs_line_is_short():
    cfg = presets.get("llama3-8b").replace(gpus=4, seq=4096, gbs=32, dist_opt=True)
    assert ch07.megalab_command(cfg) == (
        "megalab run --preset llama3-8b --seq 4096 --gpus 4 --dist-opt --gbs 32 --mode live"
    )


def test_ranking_tests_read_the_first_pick_and_the_runs_that_trained():
    picks = pd.DataFrame(
        {
            "case": ["a"] * 3 + ["b"] * 3,
            "gpus": [2] * 6,
            "layout": ["x", "y", "z"] * 2,
            "predicted_s": [1.0, 2.0, 3.0, 1.0, 2.0, 3.0],
            "status": ["ok", "ok", "ok", "oom", "ok", "ok"],
            "measured_s": [1.1, 1.0, 3.3, math.nan, 2.0, 2.5],
        }
    ).assign(error=lambda d: d["predicted_s"] / d["measured_s"] - 1)
    t = ch07.ranking_tests(picks).set_index("case")
    assert t.loc["a", "first_x"] == pytest.approx(1.1) and t.loc["a", "trained"] == 3
    assert t.loc["a", "rank_corr"] == pytest.approx(0.5)
    assert t.loc["b", "first_status"] == "out of memory" and math.isnan(t.loc["b", "first_x"])
    assert t.loc["b", "err_lo"] == pytest.approx(0.0) and t.loc["b", "err_hi"] == pytest.approx(0.2)


def test_case_picks_test_the_model_on_the_frozen_runs(cal):
    picks = ch07.case_picks(cal, 2)
    assert len(picks) == 24 and set(picks["case"]) == set(ch07.CASE_WORDS.values())
    oom = picks[picks["status"] == "oom"]
    assert oom["measured_s"].isna().all() and oom["case"].str.startswith("OLMoE").all()
    assert not picks["layout"].str.contains("_tp").any()  # words, not run keys
    tests = ch07.ranking_tests(picks)
    assert list(tests["trained"]) == [8, 3, 8]


def test_graphed_check_sets_both_models_beside_the_groups(cal, refit):
    g = ch07.graphed_check(cal, refit)
    assert set(g["group"]) == set(ch07.GROUPS)
    graphed, eager = g[g["launch"] == "CUDA graphs"], g[g["launch"] == "eager"]
    assert (graphed["eager_err"] > 0).all() and graphed["refit_err"].abs().max() < 0.2
    assert len(eager) == 1 and eager["refit_ms"].isna().all() and (eager["refit_set"] == "–").all()
    assert set(graphed["refit_set"]) <= {"fit", "held out"}
    points = ch07.graphed_points(g)
    assert len(points) == 2 * len(graphed) and points["predicted_s"].notna().all()
    eager_pts = points[points["model"] == "eager model"]
    assert (eager_pts["predicted_s"] > eager_pts["measured_s"]).all()


def test_a_ranking_carries_its_error_bars(cal):
    found = search.search(presets.get("gpt-1.2b").replace(seq=1024, gbs=16), 2, top=4, model=cal)
    t = ch07.ranked(found, cal, 0.8)
    assert list(t["rank"]) == [1, 2, 3, 4] and (t["lo_s"] < t["predicted_s"]).all()
    assert (t["predicted_s"] < t["hi_s"]).all() and t.loc[0, "why"] == "predicted fastest"
    fig = ch07.ranking_figure(t, "a title")
    bar = fig.data[0]
    assert list(bar.x) == list(t["predicted_s"]) and min(bar.error_x.array) >= 0
    assert all(name.startswith("#") and "_" not in name for name in bar.y)


def test_constants_table_sets_calibrations_side_by_side(cal, refit):
    t = ch07.constants_table({"eager": cal, "graphs": refit}).set_index("constant")
    host = ch07.CONSTANT_WORDS["host_layer"]
    assert t.loc[host, "graphs"] < t.loc[host, "eager"] and t.loc[host, "records_graphs"] > 0
    gemm = ch07.CONSTANT_WORDS["gemm_eff"]
    assert t.loc[gemm, "graphs"] == t.loc[gemm, "eager"] and t.loc[gemm, "records_graphs"] == 0


def test_why_not_first_and_constants_read_as_words():
    assert (
        ch07._why_words("PP send/recv +78 ms, +44 ms in all")
        == "PP send/recv 78 ms more than #1; step 44 ms more"
    )
    assert ch07._why_words("bubble +83 ms") == "bubble 83 ms more than #1"
    assert ch07._why_words("ties with #1") == "ties with #1"
    assert [ch07._three_figures(x) for x in (1240.85, 451.84, 28.72, 0.5093)] == [
        "1,240",
        "452",
        "28.7",
        "0.509",
    ]


def test_a_job_too_big_for_the_gpus_is_ranked_on_the_fewest_that_hold_it(cal, capsys):
    """The page's default job (llama3-8b, gbs 32, seq 4096) on one H200, as a reproduction on one
    GPU asks: ranked on 2, said in one line; a model that fits nowhere is refused with what to
    change."""
    base = presets.get("llama3-8b").replace(seq=4096, gbs=32)
    ranking = ch07.fitting_search(base, 1, gpu="H200", top=3, model=cal)
    assert ranking.gpus == 2 and len(ranking) == 3
    assert "fits no layout on 1 GPU(s); ranked on 2" in capsys.readouterr().out
    assert ch07.fitting_search(base, 4, gpu="H200", top=3, model=cal).gpus == 4
    with pytest.raises(ValueError, match="lower gbs or seq, or pick a smaller preset"):
        ch07.fitting_search(base.replace(seq=1 << 20, gbs=1), 1, most=2, gpu="H200", top=1)
