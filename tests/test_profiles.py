"""megalab.records.profiles: one profiled step's kernels by kind, and the GPU's idle gaps between
them."""

import json
from pathlib import Path

import pytest

from megalab.records import profiles

COLUMNS = ["category", "start_ms", "duration_ms", "stream"]


def _profile(kernels):
    return {"timeline": {"step": 7, "columns": COLUMNS, "kernels": kernels}}


def test_gaps_are_idle_time_before_each_kernel_overlaps_count_zero():
    # starts while the GEMM runs: no gap
    p = _profile(
        [
            ["gemm", 0.0, 1.0, 7],
            ["nccl", 0.5, 1.0, 23],
            # 1.0 ms after the NCCL kernel ended
            ["attention", 2.5, 0.5, 7],
            ["other", 3.1, 0.1, 7],
        ]
    )  # 0.1 ms
    k = profiles.timeline(p)
    assert list(k["gap_ms"]) == pytest.approx([0.0, 0.0, 1.0, 0.1])


def test_by_kind_counts_time_and_waits():
    p = _profile(
        [
            ["other", 0.0, 0.2, 7],
            ["attention", 1.0, 0.3, 7],
            ["gemm", 1.3, 1.0, 7],
            ["attention", 3.0, 0.3, 7],
            ["other", 3.3, 0.1, 7],
        ]
    )
    t = profiles.by_kind(p)
    assert t.loc["attention"].tolist() == pytest.approx([2, 0.6, 0.8 + 0.7])
    assert t.loc["gemm", "wait_before_ms"] == pytest.approx(0.0)
    assert t.loc["all", "kernels"] == 5 and t.loc["all", "wait_before_ms"] == pytest.approx(1.5)
    span = 3.4
    # one stream
    assert t.loc["all", "kernel_ms"] + t.loc["all", "wait_before_ms"] == pytest.approx(span)


def test_a_recorded_profile_reads():
    """The chapter's profiled step (if the store is here): kinds present, idle time non-negative."""
    path = Path(__file__).resolve().parents[1] / "results" / "runs.jsonl"
    records = [
        json.loads(line) for line in path.read_text().splitlines() if '"kernel_s_per_step"' in line
    ]
    if not records:
        pytest.skip("no profiled record in results/")
    t = profiles.by_kind(records[-1]["profile"])
    assert (t["wait_before_ms"] >= 0).all()
    assert t.loc["all", "kernels"] == len(records[-1]["profile"]["timeline"]["kernels"])


def test_kernel_ms_and_extra_over_a_baseline():
    import pandas as pd

    rec = lambda g, a: {
        "profile": {"kernel_s_per_step": {"nccl": 0.0, "gemm": g, "attention": a, "other": 0.01}}
    }
    ms = profiles.kernel_ms({"none": rec(0.075, 0.030), "full": rec(0.100, 0.040)})
    assert list(ms.index) == ["gemm", "attention", "other", "all kernels"]  # nccl never ran
    assert ms.at["all kernels", "full"] == pytest.approx(150.0)
    ratios = pd.DataFrame(
        {"none": {"gemm": 1.0, "attention": 1.0}, "full": {"gemm": 1.3, "attention": 4 / 3}}
    )
    extra = profiles.extra_over(ms, "none", ratios).set_index(["kernel kind", "series"])["extra_ms"]
    assert extra[("gemm", "full, measured")] == pytest.approx(25.0)
    assert extra[("gemm", "full, predicted")] == pytest.approx(22.5)
    assert extra[("attention", "full, predicted")] == pytest.approx(10.0)
    assert ("other", "full, predicted") not in extra.index and (
        "other",
        "full, measured",
    ) in extra.index


def test_schedule_tasks_are_gantt_rows_per_stage():
    from megalab import charts
    from megalab.records import profiles

    t = lambda c, m, k, a, b: {"chunk": c, "microbatch": m, "kind": k, "start_s": a, "end_s": b}  # noqa: E731
    prof = {
        "schedule": {
            "step": 3,
            "stages": {
                "1": [t(0, 0, "F", 1.0, 2.0)],
                "0": [t(0, 0, "F", 0.0, 1.0), t(1, 0, "B", 3.0, 4.0)],
            },
        }
    }
    rows = profiles.schedule_tasks(prof)
    assert [(r["row"], r["kind"], r["label"]) for r in rows] == [
        ("stage 0", "F", 0),
        ("stage 0", "B", 0),
        ("stage 1", "F", 0),
    ]
    assert (
        profiles.schedule_tasks(prof, chunks=2)[1]["kind"] == "B1"
        and profiles.schedule_tasks({}) == []
    )
    assert len(charts.gantt(rows).data) == 2  # one trace per kind


def test_rank_times_sets_each_ranks_kernels_beside_its_forward_and_backward():
    p = _profile([["attention", 0.0, 1.0, 7]])
    p["ranks"] = {"1": {"nccl": 0.3, "attention": 0.12}, "0": {"nccl": 0.04, "attention": 0.13}}
    p["schedule"] = {
        "step": 3,
        "stages": {},
        "rank_seconds": [{"F": 0.131, "B": 0.187}, {"F": 0.133, "B": 0.185}],
    }
    t = profiles.rank_times(p)
    assert list(t.index) == [0, 1] and t.loc[1, "attention_s"] == pytest.approx(0.12)
    assert t.loc[0, ["forward_s", "backward_s"]].tolist() == pytest.approx([0.131, 0.187])
    # kernels kept, no per-rank schedule: NaN times
    del p["schedule"]["rank_seconds"]
    assert profiles.rank_times(p)["forward_s"].isna().all()
    assert profiles.rank_times(_profile([])).empty  # a record of rank 0 alone


def test_side_profiles_pairs_each_trainers_newest_profile_of_one_configuration():
    """The CP 2 pair profiled on two H200s (session 15): ours and the peer's, found from our config
    alone."""
    from megalab.runs import presets
    from megalab.records import profiles

    # iterations aside
    cfg = presets.get("gpt-1.2b").replace(gpus=2, cp=2, seq=8192, mbs=1, gbs=1, iters=7)
    found = profiles.side_profiles(cfg, "H200")
    assert set(found) == {"ours", "peer"}
    assert found["peer"]["config"]["runner"] == "megatron-lm" and "profile" in found["ours"]["tags"]
    assert all(r["profile"]["kernel_s_per_step"]["gemm"] > 0 for r in found.values())
    assert profiles.side_profiles(cfg.replace(seq=4096), "H200") == {}


def test_side_kernels_reads_each_sides_compute_and_ring_from_its_profile():
    """The same pair's kernels: compute (all but NCCL) per step as the sum of its profile's kinds
    less NCCL's, the busiest NCCL stream, the profiled step; on H100s (session 24's lease) the
    pair's own records."""
    from megalab.runs import presets
    from megalab.records import profiles

    cfg = presets.get("gpt-1.2b").replace(gpus=2, cp=2, seq=8192, mbs=1, gbs=1)
    for gpu in ("H200", "H100"):
        found, sides = profiles.side_profiles(cfg, gpu), profiles.side_kernels(cfg, gpu)
        assert set(sides) == {"ours", "peer"}
        for who, r in found.items():
            kinds = r["profile"]["kernel_s_per_step"]
            assert sides[who]["compute_ms"] == pytest.approx(
                1e3 * (sum(kinds.values()) - kinds.get("nccl", 0.0))
            )
            assert sides[who]["ring_ms"] == max(profiles.nccl_streams(r["profile"]).values())
            assert 0 < sides[who]["compute_ms"] < sides[who]["step_ms"]
    assert profiles.side_kernels(cfg.replace(seq=4096), "H100") == {}


def test_after_last_reads_the_kernels_after_the_last_of_a_kind():
    """The once-a-step tail: kernels starting after the last GEMM ends, their span from that end
    and their busy time (overlaps counted once)."""
    p = _profile(
        [
            ["gemm", 0.0, 1.0, 7],
            ["other", 0.5, 0.2, 7],  # during the GEMMs: not the tail
            ["gemm", 2.0, 1.0, 7],
            ["other", 3.0, 0.5, 7],
            ["other", 3.2, 0.5, 25],  # overlaps the one before
            ["nccl", 5.0, 1.0, 7],
        ]
    )
    tail = profiles.after_last(p)
    assert tail["kernels"] == 3 and tail["by_kind"] == {"other": 2, "nccl": 1}
    assert tail["span_ms"] == pytest.approx(3.0) and tail["busy_ms"] == pytest.approx(1.7)
    with pytest.raises(ValueError, match="no 'attention' kernel"):
        profiles.after_last(_profile([["gemm", 0.0, 1.0, 7]]), "attention")
