"""Chapter 01's strong scaling and overlapped gradient reduce: the tables over made-up groups, then
the recorded groups ch01.dp-strong and ch01.overlap against theory, and the chapter's defining
points (what a quick live reproduction re-measures) holding the groups' configurations."""

import pandas as pd
import pytest
from run_records import group_frame

from megalab.book import chapters
from megalab.book.chapters import ch01_analysis as ch01
from megalab.book.chapters import ch01_scaling
from megalab.book.chapters.ch01_data_parallel import defining
from megalab.book.specs import keys_of
from megalab.records import timings

CH = chapters.data_parallel(4)
REDUCE = pd.DataFrame({"all-reduce (ms)": [10.0, 20.0]}, index=pd.Index([2, 4], name="GPUs"))


def test_strong_scaling_divides_compute_and_keeps_the_all_reduce_and_optimizer():
    # any order in, fewest GPUs first out
    df = ch01_scaling.strong_scaling(
        group_frame(CH["strong"][::-1], [120.0, 200.0, 400.0]), REDUCE, optimizer=16.0
    )
    assert list(df["GPUs"]) == [1, 2, 4]
    assert df["speed-up"].tolist() == pytest.approx([1.0, 2.0, 400 / 120])
    assert df["efficiency"].iloc[-1] == pytest.approx(400 / 120 / 4)
    # (400 - 16) / d + 16 + all-reduce
    assert df["predicted step (ms)"].tolist() == pytest.approx([400.0, 218.0, 132.0])
    assert df["predicted speed-up"].iloc[-1] == pytest.approx(400 / 132)
    assert df["interval (ms)"].iloc[0] == "399.0 – 401.0"
    with pytest.raises(ValueError, match="one global batch"):
        ch01_scaling.strong_scaling(group_frame(CH["weak"], [400.0, 410.0, 420.0]), REDUCE, 16.0)


def test_overlap_steps_put_the_plain_reduce_first_and_say_what_overlap_saved():
    pair = CH["groups"]["overlap"].configs
    df = ch01_scaling.overlap_steps(group_frame(pair[::-1], [380.0, 400.0]))
    assert list(df["overlap"]) == [False, True] and list(df["step (ms)"]) == [400.0, 380.0]
    assert df["saved"].tolist() == pytest.approx([0.0, 0.05])
    assert df["layout"].iloc[1] == "DP 4 + overlap, CUDA graphs"
    with pytest.raises(ValueError, match="without and one with"):
        ch01_scaling.overlap_steps(group_frame(pair[:1], [400.0]))


def test_the_recorded_strong_group_falls_short_of_ideal_for_the_fixed_costs():
    """ch01.dp-strong: speed-up under the GPU count and under compute/d + all-reduce + optimizer,
    within 10% of that prediction; GPU-bound."""
    group = timings.group(None, "ch01.dp-strong", "H200")
    optimizer = ch01_scaling.optimizer_ms(CH["strong"][0])
    assert 5 < optimizer < 40  # Adam over 1.56 B parameters at a few TB/s
    df = ch01_scaling.strong_scaling(group, ch01.reduce_cost(CH["strong"]), optimizer)
    assert (df["speed-up"].iloc[1:] < df["GPUs"].iloc[1:]).all()
    assert (df["speed-up"] <= df["predicted speed-up"] + 1e-9).all()
    assert (df["step (ms)"] / df["predicted step (ms)"]).max() < 1.1
    assert group.attrs["gpu_busy"] >= 0.7 and not group.attrs["wide"]


def test_the_recorded_overlap_saves_less_than_the_all_reduce_as_compute_slows():
    """ch01.overlap against the weak group's profile of the same plain layout: the exposed NCCL
    time falls by about the predicted all-reduce, the compute beside it rises, and the difference
    is about what the timed steps saved."""
    ov = ch01_scaling.overlap_steps(timings.group(None, "ch01.overlap", "H200"))
    saved = ov["step (ms)"].iloc[0] - ov["step (ms)"].iloc[1]
    ar = ch01.reduce_cost(CH["weak"])["all-reduce (ms)"].iloc[-1]
    assert 0 < saved < ar
    plain = timings.group_runs(None, "ch01.dp-weak", "H200")[1]
    over = timings.group_runs(None, "ch01.overlap", "H200")[1]
    assert [plain["key"], over["key"]] == [c.key for c in CH["groups"]["overlap"].configs]
    kern = ch01_scaling.kernels({"plain": plain["profile"], "overlap": over["profile"]})
    assert set(kern["kernels"]) == set(ch01_scaling.KINDS.values()) and len(kern) == 10
    moved = ch01_scaling.shift(kern)
    assert 0.8 < moved["exposed_cut_ms"] / ar < 1.2 and moved["compute_slower_ms"] > 0
    assert abs(moved["exposed_cut_ms"] - moved["compute_slower_ms"] - saved) < 0.5 * saved


def test_shift_reads_the_first_layout_as_before():
    rows = [
        (kind, layout, ms)
        for layout, values in (("a", (100, 10, 50, 30, 0)), ("b", (110, 10, 52, 5, 25)))
        for kind, ms in zip(ch01_scaling.KINDS.values(), values)
    ]
    kern = pd.DataFrame(rows, columns=["kernels", "layout", "ms"])
    assert ch01_scaling.shift(kern) == {"exposed_cut_ms": 25.0, "compute_slower_ms": 12.0}


@pytest.mark.parametrize("gpus", [2, 4])
def test_the_defining_points_hold_every_group_as_recorded(gpus):
    """A quick live reproduction re-measures what the figures read: the memory figure's runs and
    each comparison group's configurations, with their CUDA graphs."""
    points = defining(gpus)
    keys = {k for p in points for k in keys_of(p)}
    groups = CH["groups"] if gpus == 4 else chapters.data_parallel(gpus)["groups"]
    assert {g.name for g in groups.values()} <= {getattr(p, "name", None) for p in points}
    for g in groups.values():
        assert {c.key for c in g.configs} <= keys
        assert all(c.cuda_graphs == "te" for c in g.configs)
    if gpus == 4:
        for name in ("ch01.dp-strong", "ch01.overlap", "ch01.dp-weak"):
            recorded = timings.group(None, name, "H200")["cfg"]
            assert {c.key for c in recorded} <= keys, name


def test_the_series_dp_cost_is_its_table_read_as_dp4_over_dp1():
    """megatron-tutorials' GPT-2 XL rows (copied): DP 4 over DP 1 is 421/393 at micro-batch 15 and
    250/220 at 1; any other micro-batch is refused, naming the two it timed."""
    assert ch01_scaling.series_dp_over(15) == pytest.approx(421 / 393 - 1)
    assert ch01_scaling.series_dp_over(1) == pytest.approx(250 / 220 - 1)
    with pytest.raises(KeyError, match="micro-batches 1 and 15, not 4"):
        ch01_scaling.series_dp_over(4)
