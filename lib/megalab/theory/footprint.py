"""Memory per GPU: model state (weights, gradients, optimizer; ZeRO's stages) plus activations.

Model state follows Megatron-LM's `theoretical_memory_usage.py` (18 bytes/param, or 6 + 12/d with
the distributed optimizer) and Rajbhandari et al. 2020 for ZeRO; activations come from
megalab.theory.activations. `memory(cfg)` is the roll-up the planner and the chapters print.
"""

from __future__ import annotations

from megalab.theory.activations import attention_kind, held_activation_bytes
from megalab.theory.flops import spec
from megalab.theory.parameters import stage_params
from megalab.theory.pipeline import layers_in_flight

__all__ = ["memory", "memory_per_stage", "model_state_bytes", "zero_memory"]

GIB = 2**30
WEIGHT_BYTES = 2  # bf16 parameters
# fp32 main gradients: Megatron-LM sets accumulate_allreduce_grads_in_fp32 for bf16 (arguments.py);
# the trainer passes DistributedDataParallelConfig(grad_reduce_in_fp32=True) to match.
GRAD_BYTES = 4
OPTIM_BYTES = 12  # Adam: fp32 master weights 4 + first moment 4 + second moment 4


def model_state_bytes(cfg, stage: int = 0) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes on one GPU of pipeline stage `stage`."""
    dense, expert = stage_params(cfg, stage)
    n = dense + expert
    if cfg.dist_opt:  # MC distributed optimizer shards master weights and moments over its DP group
        edp = cfg.gpus // (cfg.pp * cfg.ep * cfg.etp)  # expert data-parallel size
        optim = OPTIM_BYTES * (dense / (cfg.dp * cfg.cp) + expert / edp)
    else:
        optim = OPTIM_BYTES * n
    return WEIGHT_BYTES * n, GRAD_BYTES * n, optim


def memory(cfg, gpu=None, attention: str | None = None) -> dict:
    """Predicted GiB on the most loaded GPU (usually pipeline stage 0), by kind.

    weights 2 B/param, grads 4 B/param, optimizer 12 B/param (12/d with the distributed
    optimizer; d = dp·cp, experts: the expert data-parallel size) — Megatron-LM
    theoretical_memory_usage.py; activations per `held_activation_bytes`. Ignores the CUDA context,
    allocator fragmentation, communication buffers and FP8 weight copies. With `gpu`, adds its
    capacity and whether the prediction fits.
    """
    best = None
    for stage in range(cfg.pp):
        w, g, o = model_state_bytes(cfg, stage)
        act = held_activation_bytes(cfg, stage, attention)
        row = {
            "weights": w / GIB,
            "grads": g / GIB,
            "optimizer": o / GIB,
            "activations": act / GIB,
            "total": (w + g + o + act) / GIB,
            "stage": stage,
            "attention": attention or attention_kind(cfg),
        }
        if best is None or row["total"] > best["total"]:
            best = row
    if gpu is not None:
        best.update(capacity=spec(gpu).mem_gib, fits=best["total"] <= spec(gpu).mem_gib)
    return best


def zero_memory(params: float, dp: int, stage: int, k: float = 12) -> float:
    """Model-state bytes per GPU under ZeRO stage 0-3 (Rajbhandari et al. 2020, Fig. 1, §5).

    Mixed-precision Adam holds 2Ψ (fp16 weights) + 2Ψ (fp16 grads) + kΨ (optimizer, k = 12):
    stage 0 (2+2+k)Ψ; 1 (P_os) (2+2)Ψ + kΨ/Nd; 2 (P_os+g) 2Ψ + (2+k)Ψ/Nd; 3 (P_os+g+p) (2+2+k)Ψ/Nd.
    """
    psi, nd = params, dp
    per_stage = {
        0: (4 + k) * psi,
        1: 4 * psi + k * psi / nd,
        2: 2 * psi + (2 + k) * psi / nd,
        3: (4 + k) * psi / nd,
    }
    if stage not in per_stage:
        raise ValueError(f"ZeRO stage={stage}: use 0, 1, 2 or 3")
    return per_stage[stage]


def memory_per_stage(cfg) -> list[dict]:
    """Predicted GiB on one GPU of each pipeline stage, by kind (theory.memory reports only the
    largest).

    Model state from `footprint.model_state_bytes` (the embedding on the first stage, the output
    layer on the last), activations from `activations.held_activation_bytes` (the first stage holds
    the most micro-batches in flight).
    """

    rows = []
    for stage in range(cfg.pp):
        w, g, o = model_state_bytes(cfg, stage)
        act = held_activation_bytes(cfg, stage)
        rows.append(
            {
                "stage": stage,
                "weights": w / GIB,
                "grads": g / GIB,
                "optimizer": o / GIB,
                "activations": act / GIB,
                "total": (w + g + o + act) / GIB,
                "layers_in_flight": layers_in_flight(cfg, stage),
            }
        )
    return rows
