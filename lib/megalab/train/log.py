"""The run log: the lines of the metrics protocol (megalab.metrics parses them), the collectives
that gather their numbers from every rank, and the OOM test. What probes measure
(megalab.train.probes) they write beside it, in the run folder.

    emit(budget(cfg, per_rank))                                          # before step 0, rank 0
    loss, *mem = max_over_ranks(device, reduced_loss(losses))            # every step, all ranks
    emit(step_line(cfg, step, loss, grad_norm, lr, step_time, mem, peak))  # rank 0

torch is imported inside the functions: importing the trainer must not start it (nor CUDA).
"""

import json
import math
import os
import sys

from megalab import theory

GIB = 2**30


# -- the protocol's lines -------------------------------------------------------------------------
def nodes_line() -> dict | None:
    """Every node's machine, for rank 0 of a run over several nodes (torchrun's WORLD_SIZE >
    LOCAL_WORLD_SIZE): {"kind": "nodes", "nodes": [env.fingerprint() of each node's local rank 0, in
    node order]}; None on the other ranks and on one node. A collective: every rank calls it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= int(os.environ.get("LOCAL_WORLD_SIZE", world)):
        return None
    import torch
    from megalab.machine import env

    # nvidia-smi once a node
    mine = env.fingerprint() if os.environ.get("LOCAL_RANK", "0") == "0" else None
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, mine)
    return (
        {"kind": "nodes", "nodes": [g for g in gathered if g]}
        if torch.distributed.get_rank() == 0
        else None
    )


def emit_nodes() -> None:
    """The `nodes` line (nodes_line) from rank 0 of a run over several nodes; nothing on one
    node."""
    if nodes := nodes_line():
        emit(nodes)


def emit(obj: dict) -> None:
    """One metrics line, written in one call: ranks share the pipe and must not interleave."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def budget(cfg, params_per_rank: list[int]) -> dict:
    """The line before step 0 (rank 0): the prediction (theory) that a chapter sets against the
    measurement."""
    return {
        "kind": "budget",
        "layout": theory.layout(cfg),
        "world_size": cfg.gpus,
        "params_total": theory.params(cfg)["total"],
        "params_per_rank": params_per_rank,
        "tokens_per_step": cfg.gbs * cfg.seq,
        "predicted_mem_gib": theory.memory(cfg)["total"],
        "num_microbatches": cfg.num_microbatches,
        "config": cfg.to_dict(),
    }


def step_line(
    cfg, step: int, loss, grad_norm, lr, step_time: float, mem: list, peak: float | None
) -> dict:
    """The metrics protocol's step record (megalab.metrics parses it)."""
    # model FLOPs: recomputation not counted
    tflops = theory.flops_per_step(cfg) / step_time / cfg.gpus / 1e12
    return {
        "kind": "step",
        "step": step,
        "loss": loss,
        "grad_norm": grad_norm,
        "lr": lr,
        "step_time_s": step_time,
        "tokens_per_s": cfg.gbs * cfg.seq / step_time,
        "tflops_per_gpu": tflops,
        "mfu": tflops / peak if peak else None,
        "mem_allocated_peak_gib": mem[0],
        "mem_reserved_peak_gib": mem[1],
        "act_gib": mem[2] if len(mem) > 2 and math.isfinite(mem[2]) else None,
    }


def summary_line(cfg, startup_s, startup_marks: dict, alloc: list, reserved: list) -> dict:
    """The line after the last step (rank 0): start-up time, each rank's peak memory, the
    software."""
    from megalab.machine import env

    return {
        "kind": "summary",
        "steps": cfg.iters,
        "startup_s": startup_s,
        "startup_marks_s": startup_marks,
        "mem_allocated_peak_gib_per_rank": alloc,
        "mem_reserved_peak_gib_per_rank": reserved,
        "env": env.fingerprint(),
    }


# -- the numbers in them, from every rank (collectives: CPU-GPU sync points) ----------------------
def all_gather(value: float, device, dtype="float64") -> list:
    """value from every rank, in rank order (a CPU-GPU sync point)."""
    import torch

    dtype = getattr(torch, dtype)
    out = [
        torch.zeros(1, dtype=dtype, device=device)
        for _ in range(torch.distributed.get_world_size())
    ]
    torch.distributed.all_gather(out, torch.tensor([value], dtype=dtype, device=device))
    return [t.item() for t in out]


def reduced_loss(losses: list) -> float | None:
    """Mean lm loss per token over the global batch, as Megatron-LM's train_step: sums over
    dp*cp."""
    import torch
    from megatron.core import parallel_state as ps

    if not ps.is_pipeline_last_stage(ignore_virtual=True):
        return None
    val = torch.vstack([x["lm loss"].view(-1) for x in losses]).sum(dim=0).float()
    torch.distributed.all_reduce(val, group=ps.get_data_parallel_group(with_context_parallel=True))
    return float(val[0] / val[1])


def max_over_ranks(device, loss: float | None, act_bytes: int | None = None) -> list[float]:
    """[loss, peak allocated GiB, peak reserved GiB, activation GiB], each the max over all ranks:
    one all-reduce (a CPU-GPU sync point) brings the last stage's loss to rank 0, whichever node
    holds it."""
    import torch

    t = torch.tensor(
        [
            -math.inf if loss is None else loss,
            torch.cuda.max_memory_allocated() / GIB,
            torch.cuda.max_memory_reserved() / GIB,
            -math.inf if act_bytes is None else act_bytes / GIB,
        ],
        dtype=torch.float64,
        device=device,
    )
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return t.tolist()


# -- this GPU's peak, the OOM test --------------------------------------------------
def peak_tflops() -> float | None:
    """Dense bf16 peak of this GPU (megalab.hardware), None if the table does not know it."""
    import torch
    from megalab.machine import hardware

    try:
        return hardware.gpu_spec(torch.cuda.get_device_name()).peak_bf16_tflops
    except hardware.UnknownGPU:
        return None


def oom_line(rank: int, e: BaseException) -> dict:
    """The error line of a rank that ran out of memory: where it ran out (the innermost frames) says
    which allocation, when the numbers say it should have fit."""
    return {
        "kind": "error",
        "status": "oom",
        "rank": rank,
        "error_type": "OutOfMemoryError",
        "message": str(e)[:500],
        "where": where(e),
    }


def where(e: BaseException, frames: int = 6) -> list[str]:
    """The innermost `frames` frames of an exception's traceback, "file:line in function" each,
    innermost last (paths from their site-packages or project folder on)."""
    import traceback

    out = []
    for f in traceback.extract_tb(e.__traceback__)[-frames:]:
        path = f.filename
        for cut in ("site-packages/", "lib/megalab/"):
            path = path.split(cut, 1)[-1] if cut in path else path
        out.append(f"{path}:{f.lineno} in {f.name}")
    return out


def is_oom(e: BaseException) -> bool:
    """Out of GPU memory: PyTorch's allocator, or a library that allocates its own buffers (cuBLAS,
    NCCL)."""
    import torch
    from megalab.metrics import is_oom_text

    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e) or is_oom_text(str(e))
