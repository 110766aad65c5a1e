"""Chapter 03's tables (book.chapters.ch03_memory): over the committed records the chapter reads,
and over small hand-made runs whose answers are known."""

from types import SimpleNamespace

import pandas as pd
import pytest

import megalab
from megalab import theory
from megalab.book import chapters
from megalab.book.chapters import ch03_memory as mem
from megalab.runs import presets

GIB, MIB = mem.GIB, mem.MIB


@pytest.fixture(scope="module")
def ch():
    return chapters.runs("ch03", 4)


def _run(cfg, **summary):
    return SimpleNamespace(config=cfg, summary=summary, record={})


def _read(cfgs):
    return [megalab.run(c, "cached", quiet=True) for c in cfgs]


def test_per_layer_is_the_difference_over_the_layers():
    cfg = presets.get("gpt-1.2b").replace(seq=2048, mbs=1, gbs=1, dropout=0.1)
    lo, hi = _run(cfg.replace(layers=4), act_gib=1.0), _run(cfg.replace(layers=8), act_gib=1.5)
    row = mem.per_layer({"te": (lo, hi)}).loc["te"]
    assert row["measured"] == pytest.approx(0.5 * 1024 / 4)
    assert row["formula"] == pytest.approx(theory.activation_bytes_per_layer(lo.config) / MIB)
    # TE keeps no scores; Table 2 counts them
    assert row["table2"] > row["formula"]
    assert row["layout"] == "1 GPU, TE attention" and row["tp"] == 1


def test_per_layer_of_the_records_follows_the_formulas(ch):
    pairs = {name: _read(pair) for name, pair in ch["per_layer"].items()}
    pairs |= {
        f"tp{t}_{n}": _read(pair)
        for t, found in ch["per_layer_tp"].items()
        for n, pair in found.items()
    }
    layer = mem.per_layer(pairs)
    # the local spec keeps 7 bytes per score, not 5
    te = layer.drop(index="local")
    assert ((te["ratio"] - 1).abs() < 0.05).all()
    assert layer.at["local", "ratio"] > 1.2
    assert not layer["layout"].str.contains("_tp|mbs").any()  # words, no run keys
    points = mem.per_gpu_vs_t(ch["per_layer"]["te"][0], layer)
    assert set(points["series"]) == {
        f"{a}, {b}" for a in ("TP", "TP + SP") for b in ("predicted", "measured")
    }
    assert sorted(points.loc[points["series"] == "TP + SP, measured", "t"]) == [1, 2, 4]
    assert points.loc[points["series"].str.endswith("predicted"), "t"].max() == 8


def test_fits_read_the_searches_and_theory_is_one_too_many_without_full_recomputation(ch):
    fs = ch["fit_mbs"][2]
    table = mem.fits({n: f.run("cached", quiet=True) for n, f in fs.items()}, fs, "H200")
    assert list(table["layout"]) == [
        "TP 2",
        "TP 2 + SP",
        "TP 2 + SP + selective recomputation",
        "TP 2 + full recomputation",
    ]
    no_full = table.drop(index="tp_full")
    assert (no_full["predicted"] == no_full["largest"] + 1).all() and (
        no_full["oom"] == no_full["predicted"]
    ).all()
    assert table.at["tp_full", "largest"] > 7 * table.at["tp_sp", "largest"]


def test_the_full_recompute_budget_adds_up_and_names_what_theory_misses(ch):
    best = ch["fit_mbs_1gpu"]["full"].run("cached", quiet=True).best
    b = mem.full_recompute_budget(best, layer_input_mib=6.0)
    parts = b.drop(index="total")
    assert parts["theory"].sum() == pytest.approx(b.at["total", "theory"])
    assert parts["measured"].sum() == pytest.approx(b.at["total", "measured"])
    assert b.at["total", "theory"] == pytest.approx(152.7, abs=0.1) and b.at[
        "total", "measured"
    ] == pytest.approx(101.2, abs=0.1)
    rest = b.at["logits and the rest of the forward", "measured"]
    assert abs(rest / mem.logits_gib(best.config, 2) - 1) < 0.15  # about the bf16 logits
    assert (
        b.at["the layer the backward re-runs", "measured"]
        < 3
        < b.at["the layer the backward re-runs", "theory"]
    )
    with pytest.raises(ValueError, match="full recomputation"):
        mem.full_recompute_budget(_run(best.config.replace(recompute="none")), 6.0)


def test_logits_bytes():
    cfg = presets.get("gpt-1.2b").replace(seq=2048, mbs=2, gbs=2, gpus=2, tp=2)
    assert mem.logits_gib(cfg, 4) == pytest.approx(4 * 2048 * 2 * cfg.vocab / 2 / GIB)


@pytest.fixture
def big():
    return presets.get("gpt-8.3b").replace(
        seq=2048, dropout=0.1, gpus=2, tp=2, sp=True, mbs=16, gbs=16
    )


def test_partial_recompute_ends_at_none_and_full(big):
    none, full = theory.memory(big)["total"], theory.memory(big.replace(recompute="full"))["total"]
    assert mem.partial_recompute(big, "block", 0)["total_gib"] == pytest.approx(none)
    assert mem.partial_recompute(big, "uniform", 1)["total_gib"] == pytest.approx(full)
    assert mem.partial_recompute(big, "block", big.layers)["total_gib"] == pytest.approx(full)
    extra = theory.hardware_flops(big.replace(recompute="full")) / theory.model_flops(big) - 1
    assert mem.partial_recompute(big, "block", big.layers // 2)["extra_flops"] == pytest.approx(
        extra / 2
    )
    assert mem.partial_recompute(big, "uniform", 8)["extra_flops"] == pytest.approx(extra)
    for method, n in (("block", big.layers + 1), ("uniform", 0), ("stripes", 2)):
        with pytest.raises(ValueError):
            mem.partial_recompute(big, method, n)


def test_uniform_with_more_layers_per_checkpoint_holds_more():
    cfg = presets.get("gpt-1.2b").replace(seq=2048, mbs=64, gbs=64)
    held = [mem.partial_recompute(cfg, "uniform", n)["activations_gib"] for n in (1, 2, 4, 8)]
    # 2L/n + 34n units: least near n = sqrt(L/17)
    assert held[0] < held[2] < held[3]


def test_fewest_block_layers_is_the_first_that_fits(big):
    n = mem.fewest_block_layers(big, 136)
    assert 0 < n < big.layers
    assert (
        mem.partial_recompute(big, "block", n)["total_gib"]
        <= 136
        < mem.partial_recompute(big, "block", n - 1)["total_gib"]
    )
    assert mem.fewest_block_layers(big, 10) is None
    table = mem.partial_table(big, [0, n, big.layers])
    assert table["total_gib"].is_monotonic_decreasing and list(table["recomputed layers"]) == [
        0,
        n,
        big.layers,
    ]


def test_kernels_against_flops():
    ms = pd.DataFrame(
        {"none": [10.0, 2.0, 12.0], "full": [13.0, 3.0, 16.0]},
        index=["gemm", "attention", "all kernels"],
    )
    flops = pd.DataFrame({"full": [1.33, 1.5, 1.33]}, index=["gemm", "attention", "all kernels"])
    rows = mem.kernels_vs_flops(ms, flops).set_index("kind")
    assert (
        rows.at["gemm", "time_x"] == pytest.approx(1.3) and rows.at["attention", "flops_x"] == 1.5
    )
    assert set(rows["choice"]) == {"full"}


def test_busy_share_is_the_union_of_kernels_over_the_span():
    record = {
        "profile": {
            "timeline": {
                "columns": ["name", "start_ms", "duration_ms"],
                "step": 7,
                "kernels": [["a", 0.0, 2.0], ["b", 1.0, 2.0], ["c", 5.0, 1.0]],
            }
        }
    }
    assert mem.busy_share(record) == pytest.approx(4 / 6)


def test_recompute_timings_and_one_recording(ch):
    timed = {t: _read(cs) for t, cs in ch["recompute_tp"].items()}
    rt = mem.recompute_timings(timed)
    assert rt["one_recording"].all() and (rt.groupby("tp")["extra_time"].first() == 0).all()
    assert not mem.one_recording([timed[2][0], timed[4][0]])  # two hosts or trainers


def test_predicted_rates_put_sp_ahead_of_full_recomputation(big):
    rates = mem.predicted_rates(
        {
            "sp": big.replace(mbs=8, gbs=8),
            "full": big.replace(sp=False, recompute="full", mbs=63, gbs=63),
        },
        "H200",
    )
    assert rates.at["sp", "relative"] == 1 and 0.7 < rates.at["full", "relative"] < 0.85


def test_parity_curves_are_named_in_words(ch):
    curves = mem.parity_curves(
        [p.run("cached", quiet=True) for p in [*ch["parity"], *ch["parity_selective"]]]
    )
    assert list(curves)[0] == "1 GPU"
    assert {"TP 2 + SP", "TP 4 + SP", "1 GPU + selective recomputation"} <= set(curves)


def test_parity_figure_draws_each_layout_minus_its_own_reference(ch):
    pars = [p.run("cached", quiet=True) for p in [*ch["parity"], *ch["parity_selective"]]]
    fig = mem.parity_figure(pars, "parity")
    lines = [t for t in fig.data if not t.name.startswith("allowed band")]
    assert {t.name for t in lines} == {mem.frame.describe(p.layout.config) for p in pars}
    assert all(abs(v) <= max(p.max_abs_diff for p in pars) + 1e-9 for t in lines for v in t.y)


def test_long_and_legend():
    df = pd.DataFrame({"layout": ["TP 2"], "a": [1.0], "b": [2.0]})
    rows = mem.long(df, "layout", {"a": "measured", "b": "formula"}, "MiB")
    assert list(rows["kind"]) == ["measured", "formula"] and list(rows["MiB"]) == [1.0, 2.0]
    from megalab import charts

    fig = charts.metric_vs(
        pd.DataFrame({"t": [1, 2], "y": [1, 2], "series": ["TP, predicted"] * 2}),
        "t",
        "y",
        by="series",
    )
    assert [tr.name for tr in mem.legend_in_words(fig).data] == ["TP, predicted"]
