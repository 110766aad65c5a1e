"""Chapter 03's comparison groups as tables (book.chapters.ch03_groups): over the committed records
of ch03.sp-vs-full and ch03.recompute, and over a small made-up group whose answers are known."""

import pandas as pd
import pytest

from megalab import theory
from megalab.book import chapters
from megalab.book.chapters import ch03_groups as ch03g
from megalab.records import timings
from megalab.runs import presets


@pytest.fixture(scope="module")
def groups():
    return chapters.runs("ch03", 4)["groups"]


@pytest.fixture(scope="module")
def sp_vs_full():
    return timings.group(None, "ch03.sp-vs-full", "H200")


@pytest.fixture(scope="module")
def recompute():
    return timings.group(None, "ch03.recompute", "H200")


def test_the_groups_are_the_chapters(groups, sp_vs_full, recompute):
    for key, found in (("sp_vs_full", sp_vs_full), ("recompute", recompute)):
        assert [c.key for c in found["cfg"]] == [c.key for c in groups[key].configs]
        assert all(c.cuda_graphs == "none" for c in found["cfg"])  # eager, as the chapter says


def test_throughput_puts_sp_first_and_measures_its_gain(sp_vs_full):
    vs = ch03g.throughput(sp_vs_full, "H200")
    assert list(vs["layout"]) == ["TP 2 + SP", "TP 2 + full recomputation"]
    assert list(vs["mbs"]) == [8, 63] and list(vs["model"]) == ["gpt-8.3b"] * 2
    # samples per second: the global batch over the median step
    assert vs["samples_s"].iloc[0] == pytest.approx(8 / (sp_vs_full["median_ms"].iloc[0] / 1e3))
    assert (vs["tokens_s"] == vs["samples_s"] * 2048).all()
    gain = vs["samples_s"].iloc[0] / vs["samples_s"].iloc[1]
    assert vs.attrs["gain"] == pytest.approx(gain) and 1.2 < gain < 1.3
    # theory's gain within 10% of the measured one
    assert abs(vs.attrs["predicted_gain"] / gain - 1) < 0.1
    assert vs.attrs["gpu_busy"] >= 0.7 and not vs.attrs["wide"]
    assert vs["extra_flops"].iloc[0] == 0 and 0.3 < vs["extra_flops"].iloc[1] < 0.36


def test_gain_bars_add_the_predicted_only_pairs(sp_vs_full):
    vs = ch03g.throughput(sp_vs_full, "H200")
    big = presets.get("gpt-22b").replace(seq=2048, dropout=0.1, gpus=4, tp=4)
    pair = (big.replace(sp=True, mbs=8, gbs=8), big.replace(recompute="full", mbs=30, gbs=30))
    bars = ch03g.gain_bars(vs, [pair], "H200")
    assert list(bars["kind"]) == ["measured", "predicted", "predicted"]
    assert list(bars["label"]) == ["gpt-8.3b, TP 2"] * 2 + ["gpt-22b, TP 4 (predicted only)"]
    assert bars["gain"].iloc[0] == pytest.approx(vs.attrs["gain"])
    assert bars["gain"].iloc[1] == pytest.approx(vs.attrs["predicted_gain"])
    assert (bars["gain"] > 1).all()


def test_tradeoff_of_the_recompute_group(recompute):
    rc = ch03g.tradeoff(recompute).set_index("choice")
    assert list(rc.index) == list(ch03g.CHOICES.values())
    assert rc.at["no recomputation", "extra_time"] == 0 and rc["extra_time"].is_monotonic_increasing
    sel, mlp, full = "selective: core attention", "selective: MLP", "full: every layer"
    # fused attention keeps no scores: selective recomputation of it frees almost nothing
    assert rc.at[sel, "saved_gib"] < 1 and 0.02 < rc.at[sel, "extra_time"] < 0.06
    assert 20 < rc.at[mlp, "saved_gib"] < rc.at[full, "saved_gib"]
    for name in (mlp, full):  # the MLP and the layer cost about their extra FLOPs
        assert rc.at[name, "extra_time"] == pytest.approx(rc.at[name, "extra_flops"], abs=0.05)
    assert rc.attrs["gpu_busy"] >= 0.7


def _made_up(recomputes):
    """A group frame of gpt-1.2b at TP 2 + SP, one row per (recompute, modules), 100 ms and 50 GiB
    less 10 of each per row."""
    cfg = presets.get("gpt-1.2b").replace(gpus=2, tp=2, sp=True, mbs=8, gbs=8)
    cfgs = [cfg.replace(recompute=r, recompute_modules=m) for r, m in recomputes]
    ms = [100.0 + 10 * i for i in range(len(cfgs))]
    return pd.DataFrame(
        {
            "cfg": cfgs,
            "median_ms": ms,
            "lo_ms": [m - 1 for m in ms],
            "hi_ms": [m + 1 for m in ms],
            "peak_gib": [50.0 - 10 * i for i in range(len(cfgs))],
            "mfu": [0.4] * len(cfgs),
        }
    )


def test_tradeoff_on_a_made_up_group():
    g = _made_up([("none", "core_attn"), ("selective", "mlp"), ("full", "core_attn")])
    rc = ch03g.tradeoff(g)
    assert list(rc["choice"]) == ["no recomputation", "selective: MLP", "full: every layer"]
    assert list(rc["extra_time"]) == pytest.approx([0, 0.1, 0.2])
    assert list(rc["saved_gib"]) == [0, 10, 20]
    full = g["cfg"].iloc[-1]
    assert rc["extra_flops"].iloc[-1] == pytest.approx(
        theory.hardware_flops(full) / theory.model_flops(full) - 1
    )
    with pytest.raises(ValueError, match="without recomputation first"):
        ch03g.tradeoff(g.iloc[1:])


def test_a_choice_not_named_is_described():
    cfg = presets.get("gpt-1.2b").replace(
        gpus=2, tp=2, sp=True, recompute="selective", recompute_modules="layernorm"
    )
    assert ch03g.choice(cfg) == "TP 2 + SP + selective recomputation (norms)"


def test_provenance_names_each_configuration_in_words(sp_vs_full, recompute):
    for g in (sp_vs_full, recompute):
        rows = ch03g.provenance(g)
        assert len(rows) == len(g) and (rows["runs"] >= 2).all()
        assert all(c.startswith("gpt-8.3b, TP 2") for c in rows["configuration"])
        assert not any("_tp" in c or "mbs" in c for c in rows["configuration"])
    assert list(ch03g.provenance(sp_vs_full)["configuration"].str.split(", ").str[-1]) == [
        "micro-batch 8",
        "micro-batch 63",
    ]


def test_the_series_full_recomputation_cost_is_its_c3_over_c2():
    """megatron-tutorials' GPT-22B TP 8 columns (copied): full recomputation 570 ms and 57.6 GB
    against SP's 427 ms and 62.0 GB."""
    from megalab.book.chapters import ch03_groups

    got = ch03_groups.series_full_cost()
    assert got["extra_time"] == pytest.approx(570 / 427 - 1)
    assert got["saved_gb"] == pytest.approx(4.4)
