"""The pipeline schedule as it ran: one step's forward and backward passes per stage (--profile).

StageClock is a probe (megalab.train.probes); rank 0 writes schedule.json beside profile.json, which
the record keeps (megalab.records) and chapter 05 draws beside theory.schedule's.
"""

import json
import os
import sys

from megalab.train.hooks import Probe, Run

# a profiled run times step 3's passes (after the warm-up steps, before the profiler)
SCHEDULE_STEP = 3


class StageClock(Probe):
    """CUDA events at the start and end of every micro-batch's forward and backward pass on this
    rank, for step SCHEDULE_STEP: the measured pipeline schedule that chapter 05 draws beside
    theory.schedule's.

    forward: from forward_step_func's call into the model chunk to its return. backward: from the
    moment the gradient of the chunk's output arrives to the moment the gradient of the chunk's
    input (the embedding output on the first stage, the received activation elsewhere) is computed.
    Times are seconds from an event recorded right after a barrier at the step's start, so ranks
    agree to within the barrier's skew. Off (no events, no hooks acting) outside the timed step;
    recomputation's forward inside the backward pass is not counted as a forward (marks only while
    forward_step_func runs the chunk). Rank 0 writes schedule.json; a failure costs the schedule,
    not the run."""

    def __init__(self):
        self.on, self.events, self.current, self.t0, self.counts = False, [], None, None, {}
        self.chunks, self.run = {}, None

    def start(self, run: Run) -> None:
        """Tell this rank's chunks apart and see each chunk's decoder input (where its backward
        ends: the embedding output on the first stage, the received activation, `input_tensor`,
        elsewhere)."""
        from megatron.core.utils import get_attr_wrapped_model

        self.run = run
        for i, m in enumerate(run.model):
            self.chunks[id(m)] = i
            get_attr_wrapped_model(m, "decoder").register_forward_pre_hook(
                lambda mod, args, kw: self.input_hook(
                    kw.get("hidden_states")
                    if kw.get("hidden_states") is not None
                    else mod.input_tensor
                ),
                with_kwargs=True,
            )

    def before_step(self, step: int) -> None:
        if step == SCHEDULE_STEP:
            self.begin()

    def before_forward(self, model) -> None:
        self.forward(self.chunks.get(id(model), 0))

    def after_forward(self, model, output) -> None:
        self.end_forward(self.current, output)

    def after_step(self, step: int) -> None:
        if step != SCHEDULE_STEP:
            return
        import torch
        from megatron.core import parallel_state as ps

        gathered = [None] * torch.distributed.get_world_size()  # every rank's passes to rank 0
        torch.distributed.all_gather_object(
            gathered, (ps.get_pipeline_model_parallel_rank(), self.end())
        )
        if self.run.rank == 0:
            write_schedule(
                self.run.run_dir, step, [t for _, t in gathered], [p for p, _ in gathered]
            )

    def begin(self) -> None:
        import torch

        torch.distributed.barrier()
        self.t0, self.events, self.counts, self.on = self._event(), [], {}, True

    @staticmethod
    def _event():
        import torch

        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def mark(self, chunk: int, microbatch: int, kind: str, edge: str) -> None:
        if self.on:
            try:  # called from autograd hooks too: a failed mark loses one pass, never the step
                self.events.append((chunk, microbatch, kind, edge, self._event()))
            except Exception as e:  # noqa: BLE001
                print(f"schedule: mark {kind} {edge} lost: {e}", file=sys.stderr, flush=True)

    def forward(self, chunk: int):
        """Before a chunk's forward: (chunk, micro-batch number) to pass to `end_forward`, or None
        when off."""
        self.current = None
        if not self.on:
            return None
        mb = self.counts[chunk] = self.counts.get(chunk, -1) + 1
        self.current = (chunk, mb)
        self.mark(chunk, mb, "F", "start")
        return self.current

    def end_forward(self, which, output) -> None:
        """The forward ends; the backward starts when the output's gradient arrives."""
        self.current = None
        if which is None:
            return
        self.mark(*which, "F", "end")
        if getattr(output, "requires_grad", False):
            output.register_hook(lambda grad: self.mark(*which, "B", "start"))

    def input_hook(self, hidden):
        """For the chunk's decoder input while its forward runs: the backward ends when its gradient
        is computed."""
        which = self.current
        if which is not None and getattr(hidden, "requires_grad", False):
            hidden.register_hook(lambda grad: self.mark(*which, "B", "end"))

    def end(self) -> list:
        """Synchronize and read the step: [{chunk, microbatch, kind, start_s, end_s}], in start
        order."""
        import torch

        torch.cuda.synchronize()
        self.on, self.current = False, None
        try:
            return tasks_from_marks(
                [(c, m, k, edge, self.t0.elapsed_time(e) / 1e3) for c, m, k, edge, e in self.events]
            )
        except Exception as e:  # noqa: BLE001  (an event never recorded): no schedule, the run goes on
            print(f"schedule: not recorded: {e}", file=sys.stderr, flush=True)
            return []


def tasks_from_marks(marks) -> list:
    """(chunk, microbatch, kind, "start"|"end", seconds) marks -> tasks with both ends, in start
    order."""
    opened, tasks = {}, []
    for chunk, mb, kind, edge, t in marks:
        if edge == "start":
            opened[(chunk, mb, kind)] = t
        elif (chunk, mb, kind) in opened:
            tasks.append(
                {
                    "chunk": chunk,
                    "microbatch": mb,
                    "kind": kind,
                    "start_s": opened.pop((chunk, mb, kind)),
                    "end_s": t,
                }
            )
    return sorted(tasks, key=lambda x: x["start_s"])


def write_schedule(run_dir: str, step: int, per_rank: list, pp_of_rank: list) -> None:
    """Rank 0: schedule.json, one pipeline stage's tasks per stage (its first rank's), beside
    profile.json, and every rank's forward and backward seconds in the step ("rank_seconds", by
    global rank)."""
    stages = {}
    for tasks, stage in zip(per_rank, pp_of_rank):
        stages.setdefault(str(stage), tasks)
    busy = [
        {
            kind: sum(t["end_s"] - t["start_s"] for t in tasks if t["kind"] == kind)
            for kind in ("F", "B")
        }
        for tasks in per_rank
    ]
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "schedule.json"), "w") as f:
        json.dump({"step": step, "stages": stages, "rank_seconds": busy}, f)
