"""Chapter 01's tables: weak scaling from its comparison group, the all-reduce's predicted cost,
memory per DP degree against theory, gradient accumulation's memory and the largest micro-batch,
from the committed records."""

import pandas as pd
import pytest

import megalab
from run_records import group_frame
from megalab.book import chapters
from megalab.book.chapters import ch01_analysis as ch01
from megalab.records import timings

CH = chapters.data_parallel(4)


def _group(dps=(1, 2, 4), ms=(400.0, 410.0, 420.0)):
    """gpt2-xl at 16 sequences per GPU, as timings.group gives it; the widest row profiled."""
    return group_frame([c for c in CH["weak"] if c.dp in dps], list(ms))


def test_weak_scaling_reads_efficiency_as_the_one_gpu_step_over_each_step():
    reduce = pd.DataFrame({"all-reduce (ms)": [10.0, 20.0]}, index=pd.Index([2, 4], name="GPUs"))
    # any order in, fewest GPUs first out
    df = ch01.weak_scaling(_group().iloc[::-1], reduce)
    assert list(df["GPUs"]) == [1, 2, 4]
    assert df["efficiency"].tolist() == pytest.approx([1.0, 400 / 410, 400 / 420])
    assert df["predicted step (ms)"].tolist() == [400.0, 410.0, 420.0]
    assert df["tokens per second"].iloc[2] == pytest.approx(4 * 16 * 1024 / 0.42)
    assert df["GPU busy"].iloc[2] == 0.95 and df["GPU busy"].iloc[:2].isna().all()
    with pytest.raises(ValueError, match="one-GPU run"):
        ch01.weak_scaling(_group(dps=(2, 4), ms=(410.0, 420.0)))


def test_the_recorded_group_scales_at_over_90_percent_and_one_all_reduce_explains_the_cost():
    """ch01.dp-weak: each DP step is the one-GPU step plus about one predicted all-reduce (within 3
    ms), the GPU busy at least 70% of the profiled step: the lesson is GPU-bound."""
    group = timings.group(None, "ch01.dp-weak", "H200")
    reduce = ch01.reduce_cost(CH["weak"])
    assert list(reduce.index) == [2, 4] and (reduce["GB per GPU"] > 6).all()
    df = ch01.weak_scaling(group, reduce)
    assert (df["efficiency"].iloc[1:] > 0.9).all() and df["GPU busy"].iloc[-1] >= 0.7
    assert (df["step (ms)"] - df["predicted step (ms)"]).abs().max() < 3.0


def test_memory_by_dp_matches_theory_within_a_few_percent_and_shards_the_optimizer():
    runs = [megalab.run(c, "cached") for c in [*CH["weak"], *CH["dist_opt"]]]
    df = ch01.memory_by_dp(runs)
    assert list(df["optimizer"]) == ["replicated"] * 3 + ["distributed"] * 2
    assert df["error"].abs().max() < 0.02 and (df["reserved (GiB)"] > df["measured (GiB)"]).all()
    sharded = df[df["optimizer"] == "distributed"].set_index("GPUs")["measured (GiB)"]
    assert sharded[4] < sharded[2] < df["measured (GiB)"].iloc[0]
    bars = ch01.memory_bars(df, [CH["dist_opt"][-1].replace(gpus=8, gbs=128)])
    assert "8 (predicted)" in set(bars["GPUs"])
    assert list(bars["bar"].cat.categories)[0] == "replicated optimizer, predicted"
    assert len(bars) == 2 * len(df) + 1


def test_accumulation_keeps_the_memory_of_one_micro_batch():
    df = ch01.accumulation_memory([megalab.run(c, "cached") for c in CH["accumulation"]])
    assert list(df["micro-batches"]) == [1, 2, 4, 8] and list(df["sequences per step"]) == [
        4,
        8,
        16,
        32,
    ]
    assert df["measured (GiB)"].max() - df["measured (GiB)"].min() < 0.1
    assert df["predicted (GiB)"].nunique() == 1
    long = ch01.measured_and_predicted(df, "micro-batches")
    assert (
        set(long["kind"]) == {"measured", "predicted"}
        and len(long) == 8
        and long["micro-batches"].iloc[0] == "1"
    )


def test_largest_micro_batch_table():
    fits = {(1, "replicated"): (CH["fit_mbs"], CH["fit_mbs"].run("cached"))}
    fits |= {(f.cfg.dp, "distributed"): (f, f.run("cached")) for f in CH["fit_mbs_dist_opt"]}
    df = ch01.largest_micro_batch(fits)
    assert list(df["GPUs"]) == [1, 2, 4] and df["largest micro-batch"].is_monotonic_increasing
    assert (df["largest micro-batch"] - df["predicted"]).abs().max() <= 2


def test_eager_timings_name_each_run_and_whether_it_ran_alone():
    df = ch01.eager_timings({"weak, micro-batch 4": [megalab.run(c, "cached") for c in CH["weak"]]})
    assert list(df["layout"]) == ["1 GPU", "DP 2", "DP 4"] and list(df["sequences per step"]) == [
        16,
        32,
        64,
    ]
    assert set(df["alone on its host"]) <= {"yes", "no"} and (df["step (ms)"] > 100).all()


def test_parity_curves_are_named_in_words():
    curves = ch01.parity_curves(CH["parity"].run("cached"))
    assert list(curves) == ["1 GPU, 4 micro-batches of 4", "DP 4 + distributed optimizer"]
    assert all(len(c["loss"]) == len(c["step"]) > 0 for c in curves.values())


def test_evidence_tables_of_the_group_and_of_every_eager_run():
    runs = ch01.group_runs_table(timings.group(None, "ch01.dp-weak", "H200"))
    assert list(runs["layout"]) == ["1 GPU, CUDA graphs", "DP 2, CUDA graphs", "DP 4, CUDA graphs"]
    assert (runs["runs"] >= 2).all() and runs["each run (ms)"].str.count(",").ge(1).all()
    assert runs["95% interval (±%)"].max() < 2 and runs["GPU busy"].iloc[-1] >= 0.7
    every = ch01.every_run(CH["weak"][:1])
    # eager repeats differ
    assert len(every) >= 2 and every["step (ms)"].max() / every["step (ms)"].min() > 1.1


def test_show_heads_every_table_in_words():
    reduce = ch01.reduce_cost(CH["weak"])
    html = ch01.show(reduce, "reduce").to_html()
    assert "All-reduce (ms)" in html and "all-reduce (ms)" not in html
    for kind, (columns, _) in ch01.SHOWN.items():
        assert all(
            isinstance(h, str) and not h[0].islower()
            for h in (spec if isinstance(spec, str) else spec[0] for spec in columns.values())
        ), kind


def test_parity_difference_draws_the_band_and_each_layout_minus_the_reference():
    curves = {
        "1 GPU": {"step": [0, 1, 2], "loss": [10.0, 9.0, 8.0]},
        "DP 4": {"step": [0, 1, 2], "loss": [10.0, 9.01, 7.99]},
    }
    fig = ch01.parity_difference(curves, 0.02, "t")
    band, dp4 = fig.data
    assert max(band.y) == 0.02 and min(band.y) == -0.02
    assert dp4.name == "DP 4" and [round(v, 3) for v in dp4.y] == [0.0, 0.01, -0.01]
    assert ch01.interval_text([1.04], [2.26]) == ["1.0 – 2.3"]
