"""What the trainer reports, apart from the loop: the lines of the metrics protocol (megalab.metrics
parses them), the collectives that gather their numbers from every rank, the profiler, the OOM test, and
the clock that times one step's pipeline schedule (StageClock, --profile) and the router's token counts
(RouterCounts, MoE runs).

    emit(budget(cfg, per_rank))                                          # before step 0, rank 0
    loss, *mem = max_over_ranks(device, reduced_loss(losses))            # every step, all ranks
    emit(step_line(cfg, step, loss, grad_norm, lr, step_time, mem, peak))  # rank 0

torch is imported inside the functions: `import megalab.train` must not start it (nor CUDA).
"""

import json
import math
import os
import sys

from megalab import theory

GIB = 2**30
PROFILE_STEPS = (5, 8)  # profile steps 5, 6, 7


# -- the protocol's lines -------------------------------------------------------------------------
def nodes_line() -> dict | None:
    """Every node's machine, for rank 0 of a run over several nodes (torchrun's WORLD_SIZE > LOCAL_WORLD_SIZE):
    {"kind": "nodes", "nodes": [env.fingerprint() of each node's local rank 0, in node order]}; None on the
    other ranks and on one node. A collective: every rank calls it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= int(os.environ.get("LOCAL_WORLD_SIZE", world)):
        return None
    import torch
    from megalab import env
    mine = env.fingerprint() if os.environ.get("LOCAL_RANK", "0") == "0" else None  # nvidia-smi once a node
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, mine)
    return {"kind": "nodes", "nodes": [g for g in gathered if g]} if torch.distributed.get_rank() == 0 else None


def emit(obj: dict) -> None:
    """One metrics line, written in one call: ranks share the pipe and must not interleave."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def budget(cfg, params_per_rank: list[int]) -> dict:
    """The line before step 0 (rank 0): the prediction (theory) that a chapter sets against the measurement."""
    return {"kind": "budget", "layout": theory.layout(cfg), "world_size": cfg.gpus,
            "params_total": theory.params(cfg)["total"], "params_per_rank": params_per_rank,
            "tokens_per_step": cfg.gbs * cfg.seq, "predicted_mem_gib": theory.memory(cfg)["total"],
            "num_microbatches": cfg.num_microbatches, "config": cfg.to_dict()}


def step_line(cfg, step: int, loss, grad_norm, lr, step_time: float, mem: list, peak: float | None) -> dict:
    """The metrics protocol's step record (megalab.metrics parses it)."""
    tflops = theory.flops_per_step(cfg) / step_time / cfg.gpus / 1e12  # model FLOPs: recomputation not counted
    return {"kind": "step", "step": step, "loss": loss, "grad_norm": grad_norm, "lr": lr,
            "step_time_s": step_time, "tokens_per_s": cfg.gbs * cfg.seq / step_time,
            "tflops_per_gpu": tflops, "mfu": tflops / peak if peak else None,
            "mem_allocated_peak_gib": mem[0], "mem_reserved_peak_gib": mem[1],
            "act_gib": mem[2] if len(mem) > 2 and math.isfinite(mem[2]) else None}


# -- the numbers in them, from every rank (collectives: CPU-GPU sync points) ----------------------
def all_gather(value: float, device, dtype="float64") -> list:
    """value from every rank, in rank order (a CPU-GPU sync point)."""
    import torch
    dtype = getattr(torch, dtype)
    out = [torch.zeros(1, dtype=dtype, device=device) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(out, torch.tensor([value], dtype=dtype, device=device))
    return [t.item() for t in out]


def reduced_loss(losses: list) -> float | None:
    """Mean lm loss per token over the global batch, as Megatron-LM's train_step: sums over dp*cp."""
    import torch
    from megatron.core import parallel_state as ps
    if not ps.is_pipeline_last_stage(ignore_virtual=True):
        return None
    val = torch.vstack([x["lm loss"].view(-1) for x in losses]).sum(dim=0).float()
    torch.distributed.all_reduce(val, group=ps.get_data_parallel_group(with_context_parallel=True))
    return float(val[0] / val[1])


def max_over_ranks(device, loss: float | None, act_bytes: int | None = None) -> list[float]:
    """[loss, peak allocated GiB, peak reserved GiB, activation GiB], each the max over all ranks: one
    all-reduce (a CPU-GPU sync point) brings the last stage's loss to rank 0, whichever node holds it."""
    import torch
    t = torch.tensor([-math.inf if loss is None else loss, torch.cuda.max_memory_allocated() / GIB,
                      torch.cuda.max_memory_reserved() / GIB, -math.inf if act_bytes is None else act_bytes / GIB],
                     dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return t.tolist()


# -- this GPU's peak, the profiler, the OOM test --------------------------------------------------
def peak_tflops() -> float | None:
    """Dense bf16 peak of this GPU (megalab.hardware), None if the table does not know it."""
    import torch
    from megalab.machine import hardware
    try:
        return hardware.gpu_spec(torch.cuda.get_device_name()).peak_bf16_tflops
    except hardware.UnknownGPU:
        return None


def profile_of(trace: dict, timeline: bool = True) -> dict:
    """What a profiled record keeps (profile.json) from a Chrome trace whose ProfilerStep windows PROFILE_STEPS
    names: kernel seconds per step by category, and with `timeline` the last window's kernels."""
    from megalab.metrics import kernel_seconds, kernel_timeline
    steps = list(range(*PROFILE_STEPS))
    out = {"steps": steps, "kernel_s_per_step": kernel_seconds(trace, steps)}
    if timeline:
        out["timeline"] = kernel_timeline(trace, steps[-1])
    return out


def profiler(run_dir: str, rank: int = 0):
    """torch.profiler over steps 5-7, on every rank: trace_rank<r>.json, and on rank 0 profile.json with the
    kernel seconds per step by category (nccl, gemm, attention, other) and the kernel timeline of the last
    profiled step (megalab.metrics.kernel_timeline), which the record keeps: the book draws its figures from
    it. Other ranks write profile_rank<r>.json, their kernel seconds only (the record's profile.ranks)."""
    import torch

    def write(prof):
        os.makedirs(run_dir, exist_ok=True)
        trace_path = os.path.join(run_dir, f"trace_rank{rank}.json")
        prof.export_chrome_trace(trace_path)
        with open(trace_path) as f:
            out = profile_of(json.load(f), timeline=rank == 0)
        with open(os.path.join(run_dir, "profile.json" if rank == 0 else f"profile_rank{rank}.json"), "w") as f:
            json.dump(out, f)

    first, end = PROFILE_STEPS
    return torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(wait=first - 1, warmup=1, active=end - first, repeat=1),
        on_trace_ready=write)


def where(e: BaseException, frames: int = 6) -> list[str]:
    """The innermost `frames` frames of an exception's traceback, "file:line in function" each, innermost last
    (paths from their site-packages or project folder on)."""
    import traceback
    out = []
    for f in traceback.extract_tb(e.__traceback__)[-frames:]:
        path = f.filename
        for cut in ("site-packages/", "lib/megalab/"):
            path = path.split(cut, 1)[-1] if cut in path else path
        out.append(f"{path}:{f.lineno} in {f.name}")
    return out


def is_oom(e: BaseException) -> bool:
    """Out of GPU memory: PyTorch's allocator, or a library that allocates its own buffers (cuBLAS, NCCL)."""
    import torch
    from megalab.metrics import is_oom_text
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e) or is_oom_text(str(e))


# -- the pipeline schedule as it ran: one step's forward and backward passes per stage --------------------
SCHEDULE_STEP = 3  # a profiled run also times step 3's passes (after the warm-up steps, before the profiler)


class StageClock:
    """CUDA events at the start and end of every micro-batch's forward and backward pass on this rank, for
    one step: the measured pipeline schedule that chapter 05 draws beside theory.schedule's.

    forward: from forward_step_func's call into the model chunk to its return. backward: from the moment
    the gradient of the chunk's output arrives to the moment the gradient of the chunk's input (the
    embedding output on the first stage, the received activation elsewhere) is computed. Times are seconds
    from an event recorded right after a barrier at the step's start, so ranks agree to within the barrier's
    skew. Off (no events, no hooks acting) outside the timed step; recomputation's forward inside the
    backward pass is not counted as a forward (marks only while forward_step_func runs the chunk)."""

    def __init__(self):
        self.on, self.events, self.current, self.t0, self.counts = False, [], None, None, {}

    def start(self) -> None:
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
        """Before a chunk's forward: (chunk, micro-batch number) to pass to `after_forward`, or None when off."""
        if not self.on:
            return None
        mb = self.counts[chunk] = self.counts.get(chunk, -1) + 1
        self.current = (chunk, mb)
        self.mark(chunk, mb, "F", "start")
        return self.current

    def after_forward(self, which, output) -> None:
        """The forward ends; the backward starts when the output's gradient arrives."""
        self.current = None
        if which is None:
            return
        self.mark(*which, "F", "end")
        if getattr(output, "requires_grad", False):
            output.register_hook(lambda grad: self.mark(*which, "B", "start"))

    def input_hook(self, hidden):
        """For the chunk's decoder input while its forward runs: the backward ends when its gradient is computed."""
        which = self.current
        if which is not None and getattr(hidden, "requires_grad", False):
            hidden.register_hook(lambda grad: self.mark(*which, "B", "end"))

    def stop(self) -> list:
        """Synchronize and read the step: [{chunk, microbatch, kind, start_s, end_s}], in start order."""
        import torch
        torch.cuda.synchronize()
        self.on, self.current = False, None
        try:
            return tasks_from_marks([(c, m, k, edge, self.t0.elapsed_time(e) / 1e3) for c, m, k, edge, e in self.events])
        except Exception as e:  # noqa: BLE001  (an event never recorded): no schedule, the run goes on
            print(f"schedule: not recorded: {e}", file=sys.stderr, flush=True)
            return []


def tasks_from_marks(marks) -> list:
    """(chunk, microbatch, kind, "start"|"end", seconds) marks -> tasks with both ends, in start order."""
    opened, tasks = {}, []
    for chunk, mb, kind, edge, t in marks:
        if edge == "start":
            opened[(chunk, mb, kind)] = t
        elif (chunk, mb, kind) in opened:
            tasks.append({"chunk": chunk, "microbatch": mb, "kind": kind,
                          "start_s": opened.pop((chunk, mb, kind)), "end_s": t})
    return sorted(tasks, key=lambda x: x["start_s"])


# The trainer's clock (--profile), and which chunk a forward_step_func call runs: id(model chunk) -> its index
CLOCK = StageClock()
CHUNKS: dict = {}


def clock_chunks(model) -> None:
    """Let CLOCK tell this rank's model chunks apart and see each chunk's decoder input (where its backward ends:
    the embedding output on the first stage, the received activation, `input_tensor`, elsewhere)."""
    from megatron.core.utils import get_attr_wrapped_model
    for i, m in enumerate(model):
        CHUNKS[id(m)] = i
        get_attr_wrapped_model(m, "decoder").register_forward_pre_hook(lambda mod, args, kw: CLOCK.input_hook(
            kw.get("hidden_states") if kw.get("hidden_states") is not None else mod.input_tensor), with_kwargs=True)


def write_schedule(run_dir: str, step: int, per_rank: list, pp_of_rank: list) -> None:
    """Rank 0: schedule.json, one pipeline stage's tasks per stage (its first rank's), beside profile.json,
    and every rank's forward and backward seconds in the step ("rank_seconds", by global rank)."""
    stages = {}
    for tasks, stage in zip(per_rank, pp_of_rank):
        stages.setdefault(str(stage), tasks)
    busy = [{kind: sum(t["end_s"] - t["start_s"] for t in tasks if t["kind"] == kind) for kind in ("F", "B")}
            for tasks in per_rank]
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "schedule.json"), "w") as f:
        json.dump({"step": step, "stages": stages, "rank_seconds": busy}, f)


# -- routing: the tokens each expert receives, per MoE layer and step ------------------------------------
class RouterCounts:
    """Counts, on the GPU and without a sync, the token copies each router sends to each expert (its
    routing map's column sums), per MoE layer of this rank's model chunks and per step. `write` sums them
    over the data-parallel ranks (each routes its own tokens) and rank 0 writes routing.json: per layer,
    the tokens per expert over the steps the timings keep (metrics.after_warmup), and per step and layer the busiest expert's
    load over the mean (1.0 is perfectly balanced)."""

    def __init__(self, model, experts: int):
        import torch
        from megatron.core.transformer.moe.router import TopKRouter
        routers = [m for chunk in model for m in chunk.modules() if isinstance(m, TopKRouter)]
        self.now = torch.zeros(len(routers), experts, dtype=torch.int64, device="cuda")
        self.steps = []
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

    def step(self) -> None:
        if self.now is not None:
            self.steps.append(self.now.clone())
            self.now.zero_()

    def write(self, run_dir: str, rank: int) -> None:
        import torch
        from megatron.core import parallel_state as ps
        from megalab.metrics import after_warmup
        if self.now is None or not self.steps or not len(self.now):  # every rank takes the same branch
            return
        counts = torch.stack(self.steps)  # steps × layers × experts
        torch.distributed.all_reduce(counts, group=ps.get_data_parallel_group(with_context_parallel=True))
        if rank != 0:
            return
        kept, _ = after_warmup(list(range(len(counts))), step_of=lambda i: i)   # the steps the timings keep
        load = counts.double()
        with open(os.path.join(run_dir, "routing.json"), "w") as f:
            json.dump({"warmup_steps": kept[0], "tokens_per_expert": counts[kept].sum(dim=0).tolist(),
                       "max_over_mean": (load.max(dim=2).values / load.mean(dim=2)).tolist()}, f)
