"""Optional measurements of a run, as probes: objects the loop calls at fixed points (the hooks of
megalab.train.hooks.Probe), each doing nothing unless it overrides the hook.

Every run takes ActivationMemory (its bytes join each step line); `for_run(cfg, profile)` lists the
others: the stage clock and the profiler window with --profile, router counts on MoE runs,
CUDA-graph capture with --cuda-graphs te or local. A script adds its own: `loop.main(argv,
probes=[MyProbe()])` (tools/gpu/spikes.py). Every probe is an instance: a run holds its own state,
the module none. torch is imported inside the hooks.
"""

import json
import os
import sys

from megalab.train.hooks import Probe, Probes, Run
from megalab.train.stage_clock import StageClock

__all__ = [
    "Probe",
    "Probes",
    "Run",
    "StageClock",
    "ActivationMemory",
    "RouterCounts",
    "ProfilerWindow",
    "GraphCapture",
    "TightStop",
    "for_run",
    "counts_routing",
    "profile_of",
    "PROFILE_STEPS",
]

PROFILE_STEPS = (5, 8)  # profile steps 5, 6, 7


def for_run(cfg, profile: bool) -> list[Probe]:
    """The trainer's optional probes for a run, in the order the loop calls them (after
    ActivationMemory, which every run takes)."""
    out = []
    if profile:
        out.append(StageClock())
    if counts_routing(cfg):
        out.append(RouterCounts())
    if profile:
        out.append(ProfilerWindow())
    if cfg.cuda_graphs != "none":
        out.append(GraphCapture())
    return out


def counts_routing(cfg) -> bool:
    """Whether a run of `cfg` records its routing (RouterCounts): MoE runs without CUDA graphs. A
    graph replay skips the router's forward hook, so a graphed run would count nothing."""
    return bool(cfg.experts) and cfg.cuda_graphs == "none"


# -- activation memory ----------------------------------------------------------------------------
class ActivationMemory(Probe):
    """Bytes allocated between the start of a step's first forward pass (its batch on the device)
    and the loss of that micro-batch, on the rank that computes the loss (pp = 1: every rank).
    Chapter 03 differences two depths. Host-side allocator counters: no sync."""

    def __init__(self):
        self.marks = {}

    def start(self, run: Run) -> None:
        from megatron.core.utils import get_attr_wrapped_model

        for m in run.model:
            m.register_forward_pre_hook(self._at_batch)
            if get_attr_wrapped_model(m, "post_process"):
                m.register_forward_hook(lambda mod, args, out: self._mark("loss"))

    def _at_batch(self, module, args) -> None:
        if args and args[0] is not None:  # tokens: a chunk that embeds or computes the loss
            self._mark("start")

    def _mark(self, name: str) -> None:
        import torch

        self.marks.setdefault(name, torch.cuda.memory_allocated())

    def before_step(self, step: int) -> None:
        self.marks.clear()

    def bytes(self) -> int | None:
        """This step's activation bytes, None on a rank that computes no loss."""
        return self.marks["loss"] - self.marks["start"] if len(self.marks) == 2 else None


# -- routing: the tokens each expert receives, per MoE layer and step
# ------------------------------------
class RouterCounts(Probe):
    """Counts, on the GPU and without a sync, the token copies each router sends to each expert (its
    routing map's column sums), per MoE layer of this rank's model chunks and per step. At the end
    it sums them over the data-parallel ranks (each routes its own tokens) and rank 0 writes
    routing.json: per layer, the tokens per expert over the steps the timings keep
    (metrics.after_warmup), and per step and layer the busiest expert's load over the mean (1.0 is
    perfectly balanced)."""

    def __init__(self):
        self.now, self.steps, self.run = None, [], None

    def start(self, run: Run) -> None:
        import torch
        from megatron.core.transformer.moe.router import TopKRouter

        self.run = run
        routers = [m for chunk in run.model for m in chunk.modules() if isinstance(m, TopKRouter)]
        self.now = torch.zeros(len(routers), run.cfg.experts, dtype=torch.int64, device="cuda")
        for i, router in enumerate(routers):
            router.register_forward_hook(lambda _m, _inp, out, i=i: self._count(i, out))

    def _count(self, i: int, out) -> None:
        if self.now is None:
            return
        try:  # a failed count loses the routing data, never the run
            self.now[i].add_(out[1].sum(dim=0))
        except Exception as e:  # noqa: BLE001
            print(f"routing: counts lost: {e}", file=sys.stderr, flush=True)
            self.now = None

    def after_step(self, step: int) -> None:
        if self.now is not None:
            self.steps.append(self.now.clone())
            self.now.zero_()

    def stop(self) -> None:
        import torch
        from megatron.core import parallel_state as ps
        from megalab.metrics import after_warmup

        # every rank takes the same branch
        if self.now is None or not self.steps or not len(self.now):
            return
        counts = torch.stack(self.steps)  # steps × layers × experts
        torch.distributed.all_reduce(
            counts, group=ps.get_data_parallel_group(with_context_parallel=True)
        )
        if self.run.rank != 0:
            return
        # the steps the timings keep
        kept, _ = after_warmup(list(range(len(counts))), step_of=lambda i: i)
        load = counts.double()
        with open(os.path.join(self.run.run_dir, "routing.json"), "w") as f:
            json.dump(
                {
                    "warmup_steps": kept[0],
                    "tokens_per_expert": counts[kept].sum(dim=0).tolist(),
                    "max_over_mean": (load.max(dim=2).values / load.mean(dim=2)).tolist(),
                },
                f,
            )


# -- the profiler window --------------------------------------------------------------------------
def profile_of(trace: dict, timeline: bool = True) -> dict:
    """What a profiled record keeps (profile.json) from a Chrome trace whose ProfilerStep windows
    PROFILE_STEPS names: kernel seconds per step by category, and with `timeline` the last window's
    kernels."""
    from megalab.metrics import kernel_seconds, kernel_timeline

    steps = list(range(*PROFILE_STEPS))
    out = {"steps": steps, "kernel_s_per_step": kernel_seconds(trace, steps)}
    if timeline:
        out["timeline"] = kernel_timeline(trace, steps[-1])
    return out


class ProfilerWindow(Probe):
    """torch.profiler over steps 5-7, on every rank: trace_rank<r>.json, and on rank 0 profile.json
    with the kernel seconds per step by category (nccl, gemm, attention, other) and the kernel
    timeline of the last profiled step (megalab.metrics.kernel_timeline), which the record keeps:
    the book draws its figures from it. Other ranks write profile_rank<r>.json, their kernel seconds
    only (the record's profile.ranks)."""

    def __init__(self):
        self.prof = None

    def start(self, run: Run) -> None:
        import torch

        def write(prof):
            os.makedirs(run.run_dir, exist_ok=True)
            trace_path = os.path.join(run.run_dir, f"trace_rank{run.rank}.json")
            prof.export_chrome_trace(trace_path)
            with open(trace_path) as f:
                out = profile_of(json.load(f), timeline=run.rank == 0)
            name = "profile.json" if run.rank == 0 else f"profile_rank{run.rank}.json"
            with open(os.path.join(run.run_dir, name), "w") as f:
                json.dump(out, f)

        first, end = PROFILE_STEPS
        self.prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            schedule=torch.profiler.schedule(
                wait=first - 1, warmup=1, active=end - first, repeat=1
            ),
            on_trace_ready=write,
        )
        self.prof.start()

    def after_step(self, step: int) -> None:
        self.prof.step()

    def stop(self) -> None:
        self.prof.stop()


# -- CUDA graphs ----------------------------------------------------------------------------------
class GraphCapture(Probe):
    """Megatron-LM's train() for --cuda-graph-impl transformer_engine: after
    config.cuda_graph_warmup_steps eager steps, capture every layer's forward and backward per
    micro-batch in flight (TECudaGraphHelper, which reads Megatron's micro-batch calculator); later
    steps replay them. The capture runs between two steps, outside both step times. The local
    implementation needs no call: forward_backward_func records on the first step and captures at
    its end (create_cudagraphs in pipeline_parallel/schedules.py). After the loop the graphs are
    deleted, as Megatron-LM's train() does before it ends (a graphed run that kept them hung at
    exit)."""

    def __init__(self):
        self.helper, self.run = None, None

    def start(self, run: Run) -> None:
        self.run = run
        if run.cfg.cuda_graphs != "te":
            return
        import torch
        from megatron.core.num_microbatches_calculator import init_num_microbatches_calculator
        from megatron.core.transformer.cuda_graphs import TECudaGraphHelper

        cfg = run.cfg
        init_num_microbatches_calculator(
            torch.distributed.get_rank(), None, cfg.gbs, cfg.mbs, cfg.dp
        )
        self.helper = TECudaGraphHelper(
            run.model, run.config, cfg.seq, cfg.mbs, optimizers=[run.optimizer]
        )

    def after_step(self, step: int) -> None:
        run = self.run
        if (
            self.helper is None
            or step + 1 != run.config.cuda_graph_warmup_steps
            or step + 1 >= run.cfg.iters
        ):
            return
        if self.helper.graphs_created():
            return
        # the param all-gather pre-hooks run outside the graphs
        hooks_off = run.ddp_config.overlap_param_gather
        for m in run.model if hooks_off else ():
            m.disable_forward_pre_hook(param_sync=False)
        self.helper.create_cudagraphs()
        if hooks_off:
            for m in run.model:
                m.enable_forward_pre_hook()
            self.helper.cuda_graph_set_manual_hooks()

    def stop(self) -> None:
        if self.helper is not None and self.helper.graphs_created():
            self.helper.delete_cuda_graphs()
        elif self.run is not None and self.run.cfg.cuda_graphs == "local":
            from megatron.core.transformer import cuda_graphs

            cuda_graphs.delete_cuda_graphs()


class TightStop:
    """RunConfig.stop_when_tight: stop the timed steps once the median's 95% interval is tight
    (megalab.records.timings.tight). It reads the slowest rank's step time (one all-reduce, a
    CPU-GPU sync point, only when on), the same on every rank, so all ranks stop at the same step.
    Off, it does nothing."""

    def __init__(self, on: bool, device=None):
        self.on, self.device, self.times = on, device, []

    def after(self, step_time: float) -> bool:
        """Record a step's time; True when the run has timed enough steps."""
        if not self.on:
            return False
        from megalab.records.timings import tight

        if self.device is not None:
            import torch

            t = torch.tensor([step_time], dtype=torch.float64, device=self.device)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            step_time = float(t.item())
        self.times.append(step_time)
        return tight(self.times)
