"""Communication per GPU per step, by parallel axis (tp, dp, cp, pp, ep).

Bytes each GPU *sends*, counted with ring algorithms (megalab.theory.collectives), so that dividing
by NCCL-tests' bus bandwidth gives the time.
"""

from __future__ import annotations

from megalab.theory.collectives import allreduce_bytes, gather_bytes
from megalab.theory.footprint import GRAD_BYTES, WEIGHT_BYTES
from megalab.theory.moe import dispatch_bytes
from megalab.theory.parameters import stage_params

__all__ = ["comm_bytes_per_step"]

ACT_BYTES = 2  # bf16 activations on the wire
# SP: all-gathers per layer that the backward pass repeats (QKV's and the MLP's inputs)
SP_REGATHERS = 2


def _dp(cfg) -> float:
    """Gradient reduction (+ parameter all-gather with the distributed optimizer), busiest stage."""
    edp = cfg.gpus // (cfg.pp * cfg.ep * cfg.etp)  # experts reduce over the expert-DP group
    worst = 0.0
    for stage in range(cfg.pp):
        sent = 0.0
        for n, p in zip((cfg.dp * cfg.cp, edp), stage_params(cfg, stage)):
            if cfg.dist_opt:  # reduce-scatter fp32 grads, all-gather bf16 params
                sent += gather_bytes(n, p * GRAD_BYTES) + gather_bytes(n, p * WEIGHT_BYTES)
            else:  # all-reduce fp32 grads
                sent += allreduce_bytes(n, p * GRAD_BYTES)
        worst = max(worst, sent)
    return worst


def _cp(cfg, per_layer_passes: int) -> float:
    """KV exchange for one layer and one micro-batch (forward passes given; backward counts 2)."""
    if cfg.cp == 1:
        return 0.0
    s, b, t = cfg.seq / cfg.cp, cfg.mbs, cfg.tp
    kv_heads = cfg.hidden // cfg.heads * cfg.groups / t
    kv = 2 * s * b * kv_heads * ACT_BYTES  # K and V of this rank's sequence chunk
    qo = 2 * s * b * cfg.hidden / t * ACT_BYTES  # Q and O
    fwd, bwd = per_layer_passes, 2  # backward moves KV and dKV

    def ring(n):  # TE p2p: KV goes round the ring, n−1 hops (all_gather moves the same bytes)
        return (fwd + bwd) * (n - 1) * kv

    def a2a(n):  # Ulysses: 4 all-to-alls (Q, K, V, O) forward, 4 backward
        return (fwd + 1) * gather_bytes(n, qo + kv)

    if cfg.cp_comm in ("p2p", "all_gather"):
        return ring(cfg.cp)
    if cfg.cp_comm == "a2a":
        return a2a(cfg.cp)
    return a2a(2) + ring(cfg.cp // 2)  # a2a+p2p: a2a inside pairs, p2p ring over cp/2


def comm_bytes_per_step(cfg) -> dict:
    """Bytes each GPU sends in one step, per axis, plus 'total'.

    tp: per layer 2 all-reduces of the (s/cp, b, h) activation forward and 2 backward (Shoeybi
        et al. 2019 §3, Fig. 4); SP turns each into all-gather + reduce-scatter, same bytes, and
        keeps only this rank's tokens of the two column-parallel inputs, which the backward pass
        all-gathers again for the weight gradient (Korthikanti et al. 2022 §4.2.2; TE's and
        Megatron's
        linears alike): 2 more all-gathers per layer, 1.25x TP's bytes. Full recompute repeats the
        forward ones.
    dp: all-reduce of the rank's fp32 grads, 2(d−1)/d·4·P; distributed optimizer: reduce-scatter
        of fp32 grads + all-gather of bf16 params, (d−1)/d·(4+2)·P; d = dp·cp (experts: expert-DP).
    cp: p2p/all_gather: KV chunks travel cp−1 hops per layer forward and twice that backward (KV
        and dKV); a2a (Ulysses): all-to-alls of Q, K, V, O forward and backward.
    pp: each micro-batch sends one (s/cp, b, h) activation forward and one gradient backward per
        model chunk (v per stage), split over tp with SP (Narayanan et al. 2021 §2.2).
    ep: the token dispatcher, per MoE layer and micro-batch (megalab.theory.moe.dispatch_bytes).
    Small terms (embedding all-reduce, loss statistics, MoE router aux losses) are left out.
    """
    m, L = cfg.num_microbatches, cfg.layers // cfg.pp
    act = cfg.seq / cfg.cp * cfg.mbs * cfg.hidden * ACT_BYTES
    fwd = 2 if cfg.recompute == "full" else 1  # forward passes over each layer
    sp = cfg.tp if cfg.sp else 1
    out = {
        "tp": (
            2 * (fwd + 1) * allreduce_bytes(cfg.tp, act)
            + SP_REGATHERS * gather_bytes(cfg.tp, act) * cfg.sp
        )
        * L
        * m,
        "dp": _dp(cfg),
        "cp": _cp(cfg, fwd) * L * m,
        "pp": 2 * act / sp * m * cfg.vpp if cfg.pp > 1 else 0.0,
        "ep": dispatch_bytes(cfg, fwd) * L * m if cfg.experts else 0.0,
    }
    out["total"] = sum(out.values())
    return out
