"""Chapter 06's tables: theory per layout, the comparison group's rows (a frame made here, as
timings.group returns it), the series it is set beside, and the routing statistics over the
committed EP 2 records."""

import math

import numpy as np
import pandas as pd
import pytest

import megalab
from megalab.book import chapters
from megalab.book.chapters import ch06_analysis as ch06
from megalab.runs import presets


@pytest.fixture(scope="module")
def two():
    return chapters.runs("ch06", 2)["layouts"][2]


@pytest.fixture(scope="module")
def balance(two):
    """The three EP 2 routing records: auxiliary loss, forced balance, none."""
    runs = {"auxiliary loss": two["ep"][0], **two["routing"]}
    return {k: megalab.run(c, "cached", quiet=True).record for k, c in runs.items()}


def test_the_layout_in_words_leaves_cuda_graphs_unsaid():
    base = presets.get("olmoe-like").replace(gpus=2, mbs=4, gbs=8, cuda_graphs="te")
    assert ch06.layout(base) == "DP 2"
    assert ch06.layout(base.replace(dist_opt=True)) == "DP 2 + distributed optimizer"
    assert ch06.layout(base.replace(ep=2, moe_dispatcher="allgather")).startswith("EP 2")


def test_predicted_counts_every_expert_but_k_active():
    ch = chapters.runs("ch06", 2)
    p = ch06.predicted({"dense": ch["dense_equal_active"], "64": ch["one_gpu"][64]}, "H200")
    dense, moe = p.set_index("model").loc["dense"], p.set_index("model").loc["64"]
    assert moe["tflop"] == pytest.approx(dense["tflop"], rel=0.05)  # equal active compute
    assert moe["params_b"] > 4 * dense["params_b"] and moe["active_b"] < moe["params_b"] / 4


def test_layouts_put_the_tokens_on_their_collective():
    base = presets.get("olmoe-like").replace(gpus=2, mbs=4, gbs=8)
    bw = {"all_reduce": 100.0, "all_gather": 200.0, "all_to_all": 50.0}
    t = ch06.layouts({"DP": base, "EP": base.replace(ep=2)}, "H200", bw).set_index("layout")
    assert t.loc["DP", "token_gb"] == 0 and t.loc["EP", "token_gb"] > 0
    assert t.loc["EP", "token_ms"] == pytest.approx(t.loc["EP", "token_gb"] * 1e3 / 50.0)
    assert t.loc["DP", "grad_ms"] == pytest.approx(t.loc["DP", "grad_gb"] * 1e3 / 100.0)
    assert t.loc["EP", "total"] < t.loc["DP", "total"]  # EP shards the experts
    assert t.loc["EP", "expert_gemms"] == t.loc["DP", "expert_gemms"] / 2


def test_the_group_reads_speedup_over_dp():
    """A frame as timings.group returns it: EP at 300 ms against DP's 400 ms is 1.33×."""
    group = chapters.runs("ch06", 2)["groups"]["ep"]
    cfgs = list(group.configs)
    g = pd.DataFrame(
        {
            "cfg": cfgs,
            "median_ms": [400.0, 390.0, 300.0, 320.0],
            "lo_ms": [398.0, 388.0, 298.0, 318.0],
            "hi_ms": [402.0, 392.0, 302.0, 322.0],
            "mfu": [0.1, 0.1, 0.13, 0.12],
            "gpu_busy": [np.nan, np.nan, 0.8, np.nan],
        }
    )
    g.attrs.update(name="ch06.ep", gpu_busy=0.8, host="h")
    t = ch06.ep_group(g)
    assert list(t["layout"]) == [
        "DP 2",
        "DP 2 + distributed optimizer",
        "EP 2",
        "EP 2, allgather dispatcher",
    ]
    assert t["speedup"].iloc[2] == pytest.approx(4 / 3) and t["speedup"].iloc[0] == 1.0
    # 4 sequences of 4096 tokens per GPU in 0.3 s
    assert t["tokens_s"].iloc[2] == pytest.approx(4 * 4096 / 0.3)
    assert t.attrs["gpu_busy"] == 0.8
    bars = ch06.beside_series(t)
    assert list(bars["who"].unique()) == [ch06.MEASURED, ch06.SERIES_NAME]
    assert bars["speedup"].iloc[2] == pytest.approx(390 / 300)
    assert bars["speedup"].iloc[-1] == pytest.approx(337 / 256)
    with pytest.raises(LookupError, match="no DP run"):
        ch06.ep_group(g.iloc[2:])


def test_the_series_runs_gelu_experts_and_the_same_tokens_per_gpu():
    """vuiseng9/megatron-tutorials 05-ep-moe.md: DP 8 + ZeRO-2 337 ms, EP 8 256 ms on 8 H100s at
    micro-batch 4, global batch 32 (16,384 tokens per GPU per step, as the group's 2 GPUs at global
    batch 8); Megatron-LM's defaults: a GELU MLP, 2·h·f weights an expert against SwiGLU's 3·h·f."""
    s = ch06.series().set_index("layout")
    assert s.loc["EP 8", "speedup"] == pytest.approx(337 / 256)
    assert s.loc["EP 8", "tokens_s"] == pytest.approx(32 * 4096 / 8 / 0.256)
    assert 0.15 < s.loc["EP 8", "mfu"] < 0.2  # "about 18%" (issue 44)
    cfg = ch06.series_configs()["EP 8"]
    assert (cfg.activation, cfg.norm, cfg.gbs * cfg.seq // cfg.gpus) == ("gelu", "LayerNorm", 16384)
    assert ch06.expert_weight_ratio(presets.get("olmoe-like"), cfg) == 1.5
    assert s.loc["EP 8", "expert_b"] == pytest.approx(16 * 64 * 2 * 1024 * 1024 / 1e9)


def test_a_multinomial_router_is_nearly_balanced_on_a_large_batch():
    """E[max of 64 standard normals] is 2.34; 32,768 tokens, top-8 of 64: the busiest expert gets
    3.4% more than the mean, and the Monte Carlo agrees with the normal approximation."""
    assert ch06.expected_max_normal(64) == pytest.approx(2.343, abs=0.005)
    assert ch06.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-3)
    approx = ch06.multinomial_max_over_mean(32768, 64, 8)
    assert approx == pytest.approx(1.034, abs=0.002)
    assert ch06.random_router(32768, 64, 8, trials=4) == pytest.approx(approx, abs=0.01)
    # a smaller batch is less balanced; a shared part of the logits unbalances any batch
    assert ch06.multinomial_max_over_mean(512, 64, 8) > 1.2
    assert ch06.random_router(4096, 64, 8, shared=0.2, trials=2) > 3
    assert ch06.random_router(4096, 64, 8, shared=0.999, trials=1) == pytest.approx(8, abs=0.1)


def test_forced_balance_is_the_multinomial_router(balance):
    """Megatron's forced balance routes by random logits: its busiest expert sits where the
    multinomial router's does, every step."""
    force = ch06.step_imbalance({"force": balance["force"]})["max_over_mean"]
    assert force.between(1.0, 1.06).all()


def test_one_step_and_all_steps_are_different_statistics(balance):
    """With the auxiliary loss one expert gets nearly every token in a step (close to E/k = 8) while
    over all measured steps none gets 3× the mean: the busiest expert changes, at least 4 in turn in
    most layers; without balancing the same expert stays busiest (its sum is every step's ratio)."""
    aux, none = ch06.over_steps(balance["auxiliary loss"]), ch06.over_steps(balance["none"])
    assert aux["per_step"].max() > 7.5 and aux["summed"].max() < 3
    assert (aux["fewest_hot"] >= np.ceil(aux["per_step"] / aux["summed"] - 1e-9)).all()
    assert aux["fewest_hot"].median() >= 4
    assert none["summed"].max() > 7.5 and (none["summed"] / none["per_step"]).median() > 0.99


def test_step_zero_is_not_sampling_noise(balance, two):
    """Before any update the busiest expert is 1.2× the mean at layer 1 and about 3-4× deeper; a
    random router over the step's independent tokens gives 1.04: the tokens share part of their
    logits, more with depth."""
    init = ch06.at_init(balance["auxiliary loss"], two["ep"][0], grid=9)
    assert init["independent"].iloc[0] == pytest.approx(1.035, abs=0.01)
    assert init["measured"].iloc[0] < 1.3 and init["measured"].mean() > 3
    assert (init["shared"] > 0).all() and init["shared"].iloc[-1] > init["shared"].iloc[0]


def test_the_heatmap_keeps_the_quantitys_range(balance):
    fig = ch06.routing_heatmap(balance["auxiliary loss"], "t")
    (trace,) = fig.data
    assert (trace.zmin, trace.zmax) == (1.0, 8.0) and trace.zmid is None


def test_micro_batches_and_fits_are_rows():
    ch = chapters.runs("ch06", 2)
    runs = {
        ("64 experts", m): megalab.run(c, "cached", quiet=True)
        for m, c in ch["micro_batch"].items()
    }
    mb = ch06.micro_batches(runs)
    assert list(mb["mbs"]) == [1, 2, 4] and mb["step_s"].is_monotonic_decreasing
    four = ch["layouts"][4]["fit_experts"]
    found = {4: {k: f.run("cached", quiet=True) for k, f in four.items()}}
    rows = ch06.fits(found, {4: four}).set_index(["layout", "what"])["experts"]
    assert rows[("EP, 4 GPUs", "measured")] == 576
    assert rows[("EP, 4 GPUs", "predicted")] == four["EP"].predicted


def test_run_rows_keep_a_failed_run(two):
    runs = {n: megalab.run(c, "cached", quiet=True) for n, c in two["experts_dp"].items()}
    rows = ch06.run_rows(runs, "H200").set_index("run")
    assert rows.loc[64, "status"] == "ok" and rows.loc[64, "step_ms"] > 0
    assert rows.loc[256, "status"] != "ok" and rows.loc[256, "predicted_gib"] > 141
    assert (rows["token_gb"] == 0).all()  # DP sends no tokens


def test_parity_curves_are_named_in_words():
    par = chapters.runs("ch06", 2)["layouts"][4]["parity"][0].run("cached", quiet=True)
    assert list(ch06.parity_curves([par])) == ["1 GPU", "EP 4"]


def test_worded_drops_column_names_and_the_axis_title():
    import plotly.graph_objects as go

    fig = go.Figure().add_scatter(x=[1], y=[1], name="balancing = No balancing")
    fig.update_xaxes(title_text="layout")
    out = ch06.worded(fig, x_title="")
    assert out.data[0].name == "No balancing" and out.layout.xaxis.title.text is None


def test_summed_heatmaps_one_panel_per_record(balance):
    fig = ch06.summed_heatmaps({k: balance[k] for k in ("auxiliary loss", "none")}, "t")
    assert len(fig.data) == 2 and fig.data[0].zmax == 8 and fig.data[1].showscale


def test_without_balancing_a_set_of_about_k_experts_takes_the_tokens(balance):
    """Without balancing, from layer 3 on, 7 to 9 experts each got over half the tokens and the 8
    busiest most of the copies; with forced balance none did and the 8 busiest hold about 8/64."""
    none, force = ch06.hot_experts(balance["none"]), ch06.hot_experts(balance["force"])
    assert none["hot"].iloc[2:].between(7, 9).all() and none["top_k_share"].iloc[2:].min() > 0.7
    assert (force["hot"] == 0).all() and force["top_k_share"].between(0.12, 0.13).all()


def test_the_small_moe_parity_curves_name_plain_layers():
    pars = [p.run("cached", quiet=True) for p in chapters.runs("ch06", 2)["parity"]]
    names = list(ch06.parity_curves(pars))
    assert names[0] == "1 GPU" and all("plain (non-TE) layers" in n for n in names[1:])
    assert not any("local" in n for n in names)


def test_the_aux_group_prices_the_learned_routing_per_layout():
    """ch06.ep-aux as timings.group returns it: EP 2 at 330 ms with the auxiliary loss against 300
    forced is a 10% cost; layouts timed one way only have no cost; the policy reads in words."""
    group = chapters.runs("ch06", 2)["groups"]["ep_aux"]
    cfgs = list(group.configs)
    ms = [400.0, 330.0, 280.0, 550.0, 300.0, 400.0]
    g = pd.DataFrame(
        {
            "cfg": cfgs,
            "median_ms": ms,
            "lo_ms": [m - 5 for m in ms],
            "hi_ms": [m + 5 for m in ms],
            "run_ms": [[m - 10, m + 10] for m in ms],
            "mfu": [0.1] * 6,
            "gpu_busy": [np.nan, np.nan, np.nan, 0.97, np.nan, np.nan],
        }
    )
    g.attrs.update(name="ch06.ep-aux", gpu_busy=0.97, host="h")
    t = ch06.aux_group(g)
    assert t["balancing"].tolist() == ["auxiliary loss"] * 4 + ["forced balance"] * 2
    assert t["run_lo_ms"].tolist() == [m - 10 for m in ms]
    assert t.attrs["gpu_busy"] == 0.97
    cost = ch06.routing_cost(t)
    assert cost.index.tolist() == ["EP 2", "ETP 2 × DP 2"]
    assert cost.loc["EP 2", "cost"] == pytest.approx(0.1)
    assert cost.loc["ETP 2 × DP 2", "cost"] == pytest.approx(0.375)
    assert cost.loc["EP 2", "cost_lo"] == pytest.approx(320 / 310 - 1)
    assert cost.loc["EP 2", "cost_hi"] == pytest.approx(340 / 290 - 1)
    assert cost.loc["EP 2", "range"] == "3%–17%"
    with pytest.raises(LookupError, match="both"):
        ch06.routing_cost(t[t["balancing"] == "forced balance"])


def test_the_routing_lesson_collapses_then_recovers_with_the_auxiliary_loss():
    """The committed 300-step EP 2 runs: every policy starts at the same step-0 imbalance (same
    weights, same tokens) and collapses; with the auxiliary loss at 0.01 or 0.1 the busiest expert
    is back under 1.5× the mean before step 200 and ends near 1.07; without it, it stays above 6."""
    lesson = chapters.runs("ch06", 2)["lessons"]["routing"].configs
    names = [ch06.routing_name(c) for c in lesson]
    assert names == ["auxiliary loss 0.01", "auxiliary loss 0.1", "no balancing"]
    recs = {n: megalab.run(c, "cached", quiet=True).record for n, c in zip(names, lesson)}
    rec = ch06.recovery(recs)
    assert rec["at_start"].nunique() == 1 and (rec["peak"] > 6).all()
    assert (rec.loc[names[:2], "settled_at"] < 200).all() and (
        rec.loc[names[:2], "last"] < 1.1
    ).all()
    assert pd.isna(rec.loc["no balancing", "settled_at"]) and rec.loc["no balancing", "last"] > 6


def test_recovery_settles_at_the_first_step_it_stays_below():
    """A made-up record: 8, 2, 1.2, 1.6, 1.1, 1.0 settles (below 1.5) at step 4; one never below
    does not settle; one always below settles at step 0."""

    def record(series):
        return {"routing": {"max_over_mean": [[v] for v in series], "tokens_per_expert": [[1]]}}

    rec = ch06.recovery(
        {"a": record([8, 2, 1.2, 1.6, 1.1, 1.0]), "b": record([8, 7]), "c": record([1.1, 1.2])},
        tail=2,
    )
    assert rec.loc["a", "settled_at"] == 4 and rec.loc["a", "last"] == pytest.approx(1.05)
    assert pd.isna(rec.loc["b", "settled_at"]) and rec.loc["c", "settled_at"] == 0
    assert rec.loc["a", "peak_step"] == 0
