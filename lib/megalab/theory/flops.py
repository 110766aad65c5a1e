"""FLOPs per step, and the rates made of them: TFLOP/s per GPU and MFU.

Megatron-LM core_v0.16.1 `training.num_floating_point_operations`, which for the classic GPT is
Narayanan et al. 2021, eq. (3). MFU is always against the dense BF16 peak (989 TFLOP/s on H100 and
H200), even for FP8 runs, and never counts recomputed FLOPs.
"""

from __future__ import annotations

from megalab.machine.hardware import GpuSpec, gpu_spec
from megalab.theory.parameters import glu

__all__ = ["flops_per_step", "model_flops", "hardware_flops", "tflops_per_gpu", "mfu"]


def flops_per_step(cfg, recompute: str | None = None, causal: bool = True) -> float:
    """Floating-point operations in one optimizer step (all GPUs together).

    Per token, 3 passes (forward, wgrad, dgrad) × 2 FLOPs per multiply-add over the GEMMs
    h·kv(a+2g) + kv·a·h (attention), (1+glu)·h·ffn (MLP; MoE: topk·(1+glu)·h·moe_ffn),
    kv·a·s·2 (QKᵀ and AV, halved for the causal mask) and h·V (logits), times gbs·seq tokens.
    For the classic GPT (MHA, gelu, ffn = 4h) and `causal=False` this is exactly Narayanan et al.
    2021 eq. (3) without recomputation: 72·B·s·L·h²·(1 + s/(6h) + V/(12hL)).

    recompute=None counts model FLOPs (what MFU uses); "full" adds one more forward of every layer
    (hardware FLOPs; Narayanan eq. (3): 96·B·s·L·h²·(1 + s/(6h) + V/(16hL))), "selective" one
    more forward of the core attention only (Korthikanti et al. 2022 §5), and of the MLP when
    cfg.recompute_modules names it.
    """
    h, a, g, s = cfg.hidden, cfg.heads, cfg.groups, cfg.seq
    kv = h // a
    q = kv * a
    core = 4 * q * s * (0.5 if causal else 1.0)  # forward FLOPs per token: QKᵀ and (QKᵀ)V
    ffn = cfg.moe_ffn_size * cfg.topk if cfg.experts else cfg.ffn_size
    mlp = 2 * (1 + glu(cfg)) * h * ffn
    layer = 2 * h * kv * (a + 2 * g) + 2 * q * h + core + mlp
    tokens = cfg.gbs * s
    total = tokens * 3 * (cfg.layers * layer + 2 * h * cfg.vocab)
    if recompute == "full":
        total += tokens * cfg.layers * layer
    # cfg.recompute_modules: the core attention, and the dense MLP if named
    elif recompute == "selective":
        mods = cfg.recompute_module_names
        total += (
            tokens
            * cfg.layers
            * (core * ("core_attn" in mods) + mlp * ("mlp" in mods and not cfg.experts))
        )
    elif recompute not in (None, "none"):
        raise ValueError(f"recompute={recompute!r}: use None, 'none', 'selective' or 'full'")
    return float(total)


def model_flops(cfg) -> float:
    """Model FLOPs per step: no recomputation counted (the numerator of MFU)."""
    return flops_per_step(cfg)


def hardware_flops(cfg) -> float:
    """FLOPs the GPUs actually execute per step, including cfg.recompute's extra forward work."""
    return flops_per_step(cfg, recompute=cfg.recompute)


def extra_flops(cfg) -> float:
    """What cfg.recompute adds: executed over model FLOPs, less one (0 without recomputation)."""
    return hardware_flops(cfg) / model_flops(cfg) - 1


def spec(gpu) -> GpuSpec:
    """A GpuSpec from a spec or a GPU name."""
    return gpu if isinstance(gpu, GpuSpec) else gpu_spec(gpu)


def tflops_per_gpu(cfg, step_time_s: float) -> float:
    """Achieved model TFLOP/s per GPU: flops_per_step / step_time / gpus / 1e12 (the contract's
    rule)."""
    return model_flops(cfg) / step_time_s / cfg.gpus / 1e12


def mfu(cfg, step_time_s: float, gpu="H200") -> float:
    """Model FLOPs utilisation: achieved model FLOP/s per GPU over the dense BF16 peak (even with
    fp8)."""
    return tflops_per_gpu(cfg, step_time_s) / spec(gpu).peak_bf16_tflops
