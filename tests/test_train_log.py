"""megalab.train_log without a process group: the lines the trainer writes."""
import json

from megalab import metrics
from megalab.runs import presets
from megalab.train_log import step_line


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
    assert metrics.summarize([with_act])["act_gib"] == 0.25 and metrics.summarize([without])["act_gib"] is None


class _FakeEvent:
    """A CUDA event stand-in: elapsed_time in ms from its record order (one ms apart)."""
    clock = 0

    def __init__(self):
        _FakeEvent.clock += 1
        self.t = _FakeEvent.clock

    def elapsed_time(self, other):
        return float(other.t - self.t)


def test_stage_clock_times_forward_and_backward_of_each_microbatch(monkeypatch):
    """Forward marks around the chunk's call; backward from the output's gradient to the input's; a forward
    re-run inside the backward (full recomputation) is not a forward; nothing is marked outside the step."""
    import torch
    from megalab import train_log
    monkeypatch.setattr(train_log.StageClock, "_event", staticmethod(_FakeEvent))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.distributed, "barrier", lambda: None)
    clock = train_log.StageClock()
    x = torch.ones(2, requires_grad=True)
    assert clock.forward(0) is None                       # off: no marks
    clock.start()
    outs = []
    for _ in range(2):                                    # two micro-batches through chunk 0
        which = clock.forward(0)
        h = x * 1.0
        clock.input_hook(h)                               # the decoder's input, while the forward runs
        out = (h * 3).sum()
        clock.after_forward(which, out)
        outs.append(out)
    clock.input_hook(x * 2)                               # outside forward_step (a recomputation): ignored
    for out in outs:
        out.backward()
    tasks = clock.stop()
    assert [(t["microbatch"], t["kind"]) for t in tasks] == [(0, "F"), (1, "F"), (0, "B"), (1, "B")]
    assert all(t["end_s"] > t["start_s"] >= 0 for t in tasks) and tasks[0]["end_s"] <= tasks[1]["start_s"]
    assert clock.forward(0) is None and not clock.on


def test_tasks_from_marks_and_schedule_in_the_record(tmp_path):
    from megalab import train_log
    from megalab.records.schema import _profile
    marks = [(0, 0, "F", "start", 0.0), (0, 0, "F", "end", 1.0), (0, 0, "B", "end", 3.0), (1, 0, "F", "start", 1.5),
             (1, 0, "F", "end", 2.0)]
    assert train_log.tasks_from_marks(marks) == [   # a backward whose start was never seen is left out
        {"chunk": 0, "microbatch": 0, "kind": "F", "start_s": 0.0, "end_s": 1.0},
        {"chunk": 1, "microbatch": 0, "kind": "F", "start_s": 1.5, "end_s": 2.0}]
    tasks = train_log.tasks_from_marks(marks)
    train_log.write_schedule(str(tmp_path), 3, [tasks, tasks, []], [0, 0, 1])   # first rank of each stage
    assert _profile(tmp_path) == {"profile": {"schedule": {"step": 3, "stages": {"0": tasks, "1": []},
                                                           "rank_seconds": [{"F": 1.5, "B": 0}] * 2 + [{"F": 0, "B": 0}]}}}
    (tmp_path / "profile.json").write_text('{"steps": [5, 6, 7]}')
    assert _profile(tmp_path)["profile"]["steps"] == [5, 6, 7] and "schedule" in _profile(tmp_path)["profile"]


def test_every_ranks_kernel_time_joins_the_record(tmp_path):
    """Rank 0 writes profile.json (with the timeline), the others profile_rank<r>.json (kernel seconds only):
    the record keeps them all under profile.ranks, by rank."""
    import json
    from megalab.records.schema import _profile
    (tmp_path / "profile.json").write_text(json.dumps({"steps": [5], "kernel_s_per_step": {"nccl": 1.0}, "timeline": []}))
    (tmp_path / "profile_rank1.json").write_text(json.dumps({"steps": [5], "kernel_s_per_step": {"nccl": 2.0}}))
    (tmp_path / "profile_rank2.json").write_text("{not json")   # a torn file costs that rank, not the record
    prof = _profile(tmp_path)["profile"]
    assert prof["ranks"] == {"0": {"nccl": 1.0}, "1": {"nccl": 2.0}} and prof["timeline"] == []
    assert "ranks" not in _profile(tmp_path / "absent").get("profile", {})


def test_where_names_the_innermost_frames():
    from megalab.train_log import where

    def inner():
        raise RuntimeError("CUDA out of memory")

    try:
        inner()
    except RuntimeError as e:
        frames = where(e, frames=2)
    assert len(frames) == 2 and frames[-1].endswith("in inner") and "test_train_log.py:" in frames[-1]
