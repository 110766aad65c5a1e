"""What recomputation re-runs, by kind of kernel: the FLOPs of the matrix multiplies and of the core
attention.

A profiled step sorts its GPU kernels into gemm (QKV, output projection, MLP, logits), attention
(the fused attention kernels: QKᵀ, softmax, ·V) and other (elementwise, norms, dropout, optimizer);
this module splits `theory.flops_per_step` the same way, so a kernel-time ratio can stand beside a
FLOPs ratio. Selective recomputation re-runs the core attention's forward (Korthikanti et al. 2022
§5), full recomputation every layer's forward (Narayanan et al. 2021 eq. 3: 96 instead of 72 in
front of B·s·L·h²). The elementwise kernels do no FLOPs that this count sees: they have no
prediction here.
"""

from __future__ import annotations

from megalab.theory.flops import flops_per_step

__all__ = ["KINDS", "flops_by_kind", "flops_ratio_by_kind"]

# the kernel categories FLOPs predict (megalab.metrics.KERNEL_CATEGORIES)
KINDS = ("gemm", "attention")


def flops_by_kind(cfg, recompute: str = "none", causal: bool = True) -> dict:
    """FLOPs per step (all GPUs) executed by GEMMs and by the core attention with `recompute`
    ("none", "selective", "full"); they add up to `flops_per_step(cfg, recompute, causal)`. The core
    attention's forward is the difference flops_per_step makes for selective recomputation; its
    backward counts twice its forward, as every other pass here."""
    none = flops_per_step(cfg, causal=causal)
    attn_only = cfg.replace(recompute_modules="core_attn")
    # one forward of every layer's core attention
    core = flops_per_step(attn_only, "selective", causal) - none
    again = recompute == "full" or (
        recompute == "selective" and "core_attn" in cfg.recompute_module_names
    )
    attention = core * (4 if again else 3)
    return {"gemm": flops_per_step(cfg, recompute, causal) - attention, "attention": attention}


def flops_ratio_by_kind(cfg, causal: bool = True) -> dict:
    """Executed over model FLOPs for cfg.recompute, per kind and for the whole step ("all"): the
    factor by which recomputation should lengthen each kind's kernels if kernel time followed
    FLOPs."""
    base, run = flops_by_kind(cfg, "none", causal), flops_by_kind(cfg, cfg.recompute, causal)
    out = {kind: run[kind] / base[kind] for kind in KINDS}
    out["all"] = sum(run.values()) / sum(base.values())
    return out
