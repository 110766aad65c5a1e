"""Mixture of experts: total vs active parameters, and the token dispatchers' traffic.

Fedus et al. 2021 (Switch Transformers) for top-k routing; Megatron Core 0.16.1 transformer/moe/
for what is built (router.py: an (experts, h) weight replicated over TP; token_dispatcher.py: the
alltoall and allgather dispatchers).
"""

from __future__ import annotations

from megalab.theory.collectives import gather_bytes
from megalab.theory.parameters import params, router_params

__all__ = ["router_params", "active_fraction", "dispatch_bytes"]

ACT_BYTES = 2  # bf16 tokens on the wire


def active_fraction(cfg) -> float:
    """Active over total parameters: what a token's FLOPs see against what memory holds."""
    p = params(cfg)
    return p["active"] / p["total"]


def dispatch_bytes(cfg, forward_passes: int = 1) -> float:
    """Bytes one GPU sends to route one micro-batch through one MoE layer, forward and backward.

    alltoall: dispatch + combine of topk·tokens·h in each pass, (ep−1)/ep of it leaves the GPU;
    allgather: all-gather of the tokens over the tp·ep group and reduce-scatter back, (n−1)·size.
    `forward_passes` is 2 under full recompute (the forward runs twice); backward counts once.
    """
    sp = cfg.tp if cfg.sp else 1
    tokens = cfg.seq / cfg.cp * cfg.mbs * cfg.hidden * ACT_BYTES / sp
    if cfg.moe_dispatcher == "alltoall":
        return 2 * (forward_passes + 1) * gather_bytes(cfg.ep, tokens * cfg.topk)
    n = cfg.ep * cfg.tp
    return 2 * (forward_passes + 1) * (n - 1) * tokens
