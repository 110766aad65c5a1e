"""megalab.train.log without a process group: the lines the trainer writes."""

import json

from megalab import metrics, presets
from megalab.train.log import step_line


def test_step_line_is_the_metrics_protocol():
    cfg = presets.get("gpt-1.2b").replace(mbs=8, gbs=8)
    line = step_line(cfg, 5, 8.3, 1.2, 3e-4, 0.2, [30.0, 32.0], 989.0)
    parsed = metrics.parse_line(json.dumps(line))
    assert parsed["kind"] == "step" and parsed["tokens_per_s"] == 8 * 1024 / 0.2
    assert abs(parsed["mfu"] - parsed["tflops_per_gpu"] / 989.0) < 1e-12


def test_step_line_reports_measured_activations_only_where_measured():
    import math

    cfg = presets.get("gpt-tiny")
    with_act = step_line(cfg, 3, 1.0, 0.5, 1e-4, 0.1, [2.0, 3.0, 0.25], 989.0)
    without = step_line(cfg, 3, 1.0, 0.5, 1e-4, 0.1, [2.0, 3.0, -math.inf], 989.0)
    assert with_act["act_gib"] == 0.25 and without["act_gib"] is None
    assert (
        metrics.summarize([with_act])["act_gib"] == 0.25
        and metrics.summarize([without])["act_gib"] is None
    )


def test_every_ranks_kernel_time_joins_the_record(tmp_path):
    """Rank 0 writes profile.json (with the timeline), the others profile_rank<r>.json (kernel
    seconds only): the record keeps them all under profile.ranks, by rank."""
    import json
    from megalab.records.schema import _profile

    (tmp_path / "profile.json").write_text(
        json.dumps({"steps": [5], "kernel_s_per_step": {"nccl": 1.0}, "timeline": []})
    )
    (tmp_path / "profile_rank1.json").write_text(
        json.dumps({"steps": [5], "kernel_s_per_step": {"nccl": 2.0}})
    )
    # a torn file costs that rank, not the record
    (tmp_path / "profile_rank2.json").write_text("{not json")
    prof = _profile(tmp_path)["profile"]
    assert prof["ranks"] == {"0": {"nccl": 1.0}, "1": {"nccl": 2.0}} and prof["timeline"] == []
    assert "ranks" not in _profile(tmp_path / "absent").get("profile", {})


def test_where_names_the_innermost_frames():
    from megalab.train.log import where

    def inner():
        raise RuntimeError("CUDA out of memory")

    try:
        inner()
    except RuntimeError as e:
        frames = where(e, frames=2)
    assert (
        len(frames) == 2 and frames[-1].endswith("in inner") and "test_train_log.py:" in frames[-1]
    )
