"""megalab.train.probes and stage_clock without a GPU: the hooks the loop calls, and what each probe
does."""

from types import SimpleNamespace

import pytest

from megalab import presets
from megalab.train import probes
from megalab.train.probes import Probe, Probes


def test_probes_call_each_hook_in_order_and_a_bare_probe_does_nothing():
    """A probe overrides the hooks it needs; Probes calls every probe's hook in list order."""
    calls = []

    class Recorder(Probe):
        def __init__(self, name):
            self.name = name

        def before_step(self, step):
            calls.append((self.name, "before_step", step))

        def after_forward(self, model, output):
            calls.append((self.name, "after_forward", output))

        def stop(self):
            calls.append((self.name, "stop"))

    both = Probes([Recorder("a"), Probe(), Recorder("b")])
    both.configure(None, None), both.start(None), both.before_forward("chunk")
    both.before_step(3), both.after_forward("chunk", "out"), both.after_step(3), both.stop()
    assert calls == [
        ("a", "before_step", 3),
        ("b", "before_step", 3),
        ("a", "after_forward", "out"),
        ("b", "after_forward", "out"),
        ("a", "stop"),
        ("b", "stop"),
    ]
    hooks = {
        "configure",
        "start",
        "before_step",
        "before_forward",
        "after_forward",
        "after_step",
        "stop",
    }
    assert hooks <= set(vars(Probe)) and hooks <= set(vars(Probes))


def test_forward_step_func_calls_the_probes_around_each_chunk():
    """forward_step_func tells the probes when a micro-batch enters a chunk and what the chunk
    returned."""
    from megalab.train.loop import forward_step_func

    seen = []

    class Spy(Probe):
        def before_forward(self, model):
            seen.append(("before", model.name))

        def after_forward(self, model, output):
            seen.append(("after", output))

    class Chunk:
        name = "middle"

        def __call__(self, *args):
            return "hidden"

    out, loss = forward_step_func(None, Chunk(), probes=Spy())  # a middle stage: no batch, no loss
    assert (out, loss) == ("hidden", None) and seen == [("before", "middle"), ("after", "hidden")]


@pytest.mark.parametrize(
    "cfg,profile,kinds",
    [
        (dict(), False, []),
        (dict(), True, ["StageClock", "ProfilerWindow"]),
        (dict(experts=8, topk=2), False, ["RouterCounts"]),
        (
            dict(experts=8, topk=2, cuda_graphs="te"),
            True,
            ["StageClock", "ProfilerWindow", "GraphCapture"],
        ),
        (dict(cuda_graphs="local"), False, ["GraphCapture"]),
    ],
)
def test_a_run_takes_the_probes_its_flags_ask_for(cfg, profile, kinds):
    """Router counts read the routers' outputs, which graphed MoE layers do not give back: off with
    graphs."""
    c = presets.get("gpt-350m").replace(**cfg)
    assert [type(p).__name__ for p in probes.for_run(c, profile)] == kinds


def test_activation_memory_differences_the_first_batch_and_its_loss(monkeypatch):
    """Bytes allocated from the first micro-batch's entry into a chunk with tokens to the loss of
    the chunk that computes it; a rank without the loss reports none; each step starts afresh."""
    import torch

    allocated = iter([100, 160, 999, 999])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: next(allocated))
    act = probes.ActivationMemory()
    act.before_step(0)
    act._at_batch(None, (None, None, None))  # a middle stage's input: not a batch
    assert act.bytes() is None
    act._at_batch(None, (torch.ones(1), None, None))
    assert act.bytes() is None  # no loss (yet): not the last stage
    act._mark("loss"), act._at_batch(None, (torch.ones(1),)), act._mark("loss")
    assert act.bytes() == 60  # the first batch and the first loss only
    act.before_step(1)
    assert act.bytes() is None


class _Helper:
    def __init__(self):
        self.created, self.calls = False, []

    def graphs_created(self):
        return self.created

    def create_cudagraphs(self):
        self.calls.append("capture")
        self.created = True

    def delete_cuda_graphs(self):
        self.calls.append("delete")


def test_te_graphs_are_captured_between_the_warmup_steps_and_the_next():
    """Captured once, after config.cuda_graph_warmup_steps eager steps (between two steps, outside
    both step times), never after the last step; deleted after the loop."""
    cfg = presets.get("gpt-350m").replace(cuda_graphs="te", iters=4)
    graphs = probes.GraphCapture()
    graphs.helper, graphs.run = (
        _Helper(),
        SimpleNamespace(
            cfg=cfg,
            config=SimpleNamespace(cuda_graph_warmup_steps=1),
            model=[],
            ddp_config=SimpleNamespace(overlap_param_gather=False),
        ),
    )
    for step in range(cfg.iters):
        graphs.after_step(step)
        assert graphs.helper.calls == ["capture"]
    graphs.stop()
    assert graphs.helper.calls == ["capture", "delete"]
    short = probes.GraphCapture()
    short.helper, short.run = (
        _Helper(),
        SimpleNamespace(
            cfg=cfg.replace(iters=1), config=SimpleNamespace(cuda_graph_warmup_steps=1)
        ),
    )
    short.after_step(0)
    assert short.helper.calls == []  # one step: nothing left to replay


def test_local_graphs_need_no_capture_call_and_are_released_after_the_loop(monkeypatch):
    """Megatron's local capture happens inside forward_backward_func; after the loop its graphs are
    deleted (Megatron's delete_cuda_graphs), as Megatron-LM's train() does: a graphed run that kept
    them hung at exit."""
    from megatron.core.transformer import cuda_graphs

    deleted = []
    monkeypatch.setattr(cuda_graphs, "delete_cuda_graphs", lambda: deleted.append("local"))
    local = presets.get("gpt-350m").replace(impl="local", cuda_graphs="local")
    graphs = probes.GraphCapture()
    graphs.start(SimpleNamespace(cfg=local))
    graphs.after_step(0)
    assert graphs.helper is None and not deleted
    graphs.stop()
    assert deleted == ["local"]


class _FakeEvent:
    """A CUDA event stand-in: elapsed_time in ms from its record order (one ms apart)."""

    clock = 0

    def __init__(self):
        _FakeEvent.clock += 1
        self.t = _FakeEvent.clock

    def elapsed_time(self, other):
        return float(other.t - self.t)


def test_stage_clock_times_forward_and_backward_of_each_microbatch(monkeypatch):
    """Forward marks around the chunk's call; backward from the output's gradient to the input's; a
    forward re-run inside the backward (full recomputation) is not a forward; nothing is marked
    outside the step."""
    import torch
    from megalab.train import stage_clock

    monkeypatch.setattr(stage_clock.StageClock, "_event", staticmethod(_FakeEvent))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.distributed, "barrier", lambda: None)
    clock = stage_clock.StageClock()
    x = torch.ones(2, requires_grad=True)
    assert clock.forward(0) is None  # off: no marks
    clock.begin()
    outs = []
    for _ in range(2):  # two micro-batches through chunk 0
        which = clock.forward(0)
        h = x * 1.0
        # the decoder's input, while the forward runs
        clock.input_hook(h)
        out = (h * 3).sum()
        clock.end_forward(which, out)
        outs.append(out)
    # outside forward_step (a recomputation): ignored
    clock.input_hook(x * 2)
    for out in outs:
        out.backward()
    tasks = clock.end()
    assert [(t["microbatch"], t["kind"]) for t in tasks] == [(0, "F"), (1, "F"), (0, "B"), (1, "B")]
    assert (
        all(t["end_s"] > t["start_s"] >= 0 for t in tasks)
        and tasks[0]["end_s"] <= tasks[1]["start_s"]
    )
    assert clock.forward(0) is None and not clock.on


def test_tasks_from_marks_and_schedule_in_the_record(tmp_path):
    from megalab.train import stage_clock
    from megalab.records.schema import _profile

    marks = [
        (0, 0, "F", "start", 0.0),
        (0, 0, "F", "end", 1.0),
        (0, 0, "B", "end", 3.0),
        (1, 0, "F", "start", 1.5),
        (1, 0, "F", "end", 2.0),
    ]
    # a backward whose start was never seen is left out
    assert stage_clock.tasks_from_marks(marks) == [
        {"chunk": 0, "microbatch": 0, "kind": "F", "start_s": 0.0, "end_s": 1.0},
        {"chunk": 1, "microbatch": 0, "kind": "F", "start_s": 1.5, "end_s": 2.0},
    ]
    tasks = stage_clock.tasks_from_marks(marks)
    # first rank of each stage
    stage_clock.write_schedule(str(tmp_path), 3, [tasks, tasks, []], [0, 0, 1])
    assert _profile(tmp_path) == {
        "profile": {
            "schedule": {
                "step": 3,
                "stages": {"0": tasks, "1": []},
                "rank_seconds": [{"F": 1.5, "B": 0}] * 2 + [{"F": 0, "B": 0}],
            }
        }
    }
    (tmp_path / "profile.json").write_text('{"steps": [5, 6, 7]}')
    assert (
        _profile(tmp_path)["profile"]["steps"] == [5, 6, 7]
        and "schedule" in _profile(tmp_path)["profile"]
    )


def test_tight_stop_does_nothing_when_off_and_stops_when_tight():
    """No collective when off (device None: this CPU test); on, it stops once the median is
    tight."""
    off = probes.TightStop(False)
    assert not any(off.after(0.1) for _ in range(40)) and off.times == []
    on = probes.TightStop(True)
    said = [on.after(t) for t in [3.0, 0.5, 0.4] + [0.1] * 12]
    assert said.index(True) == 12  # 3 warm-up steps, then the 10th timed step
