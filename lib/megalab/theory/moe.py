"""Mixture of experts: total vs active parameters, the token dispatchers' traffic, and the work a
MoE step does that its dense twin of equal active compute does not.

Fedus et al. 2021 (Switch Transformers) for top-k routing; Megatron Core 0.16.1 transformer/moe/
for what is built (router.py: an (experts, h) weight replicated over TP; token_dispatcher.py: the
alltoall and allgather dispatchers; experts.py: TEGroupedMLP over Transformer Engine's
GroupedLinear). Routing is dropless here (Megatron's default: no capacity factor, no token dropped,
no padding), and every count below assumes balanced routing: each expert gets tokens·topk/experts.
"""

from __future__ import annotations

from megalab.theory.activations import held_activation_bytes
from megalab.theory.collectives import gather_bytes
from megalab.theory.footprint import GIB, GRAD_BYTES, OPTIM_BYTES, WEIGHT_BYTES, memory
from megalab.theory.parameters import glu, params, router_params, stage_params

__all__ = [
    "router_params",
    "active_fraction",
    "dispatch_bytes",
    "tokens_per_expert",
    "expert_gemms_per_step",
    "host_syncs_per_step",
    "optimizer_bytes_per_step",
    "expert_weight_bytes_per_step",
    "expert_gemm_flops",
    "memory_by_part",
    "largest_experts",
]

ACT_BYTES = 2  # bf16 tokens on the wire
EXPERT_LINEARS = 2  # fc1 (gate and up in one GEMM under SwiGLU) and fc2 per expert: TEGroupedMLP
# Optimizer step, HBM bytes per parameter it touches (Megatron's mixed-precision optimizer, fused
# Adam): zero the fp32 grad buffer (write 4), grad norm (read 4), Adam (read master, grad, m, v;
# write master, m, v: 28), copy the fp32 master into the bf16 weight (read 4, write 2). Clipping's
# rescale is left out.
ZERO_BYTES, NORM_BYTES, ADAM_BYTES, COPY_BYTES = 4, 4, 28, 6
# Expert weights per micro-batch: forward and dgrad read the bf16 weight (2 + 2); the wgrad GEMM
# adds into the fp32 main_grad in place (read 4, write 4): Transformer Engine accumulates there
# itself since the trainer's first revision change (records.TRAINER_CHANGES; before it, a bf16
# gradient was written and Megatron's DDP hook added it to main_grad: 2 + 10 bytes instead of 8).
EXPERT_WEIGHT_BYTES = 2 + 2 + 8


def active_fraction(cfg) -> float:
    """Active over total parameters: what a token's FLOPs see against what memory holds."""
    p = params(cfg)
    return p["active"] / p["total"]


def _tokens(cfg) -> float:
    """Tokens one GPU routes per micro-batch: s/cp, split over TP by sequence parallelism."""
    sp = cfg.tp if cfg.sp else 1
    return cfg.seq / cfg.cp / sp * cfg.mbs


def dispatch_bytes(cfg, forward_passes: int = 1) -> float:
    """Bytes one GPU sends to route one micro-batch through one MoE layer, forward and backward.

    alltoall: dispatch + combine of topk·tokens·h in each pass, (ep−1)/ep of it leaves the GPU over
    the EP group; with expert TP, the received tokens are all-gathered over the etp group and the
    outputs reduce-scattered back, (etp−1)·topk·tokens·h each (token_dispatcher.py,
    dispatch_postprocess). allgather: all-gather of the tokens over the etp·ep group (Megatron's
    tp_ep group) and reduce-scatter back, (n−1)·tokens·h each. Per byte of routed token, allgather
    sends (n−1)/n·n and alltoall (n−1)/n·topk: allgather moves fewer bytes whenever topk > n.
    `forward_passes` is 2 under full recompute (the forward runs twice); backward counts once.
    Router probabilities and the routing map (4 and 1 bytes per token and expert) are left out.
    """
    tokens = _tokens(cfg) * cfg.hidden * ACT_BYTES
    passes = 2 * (forward_passes + 1)  # dispatch and combine, in every pass
    if cfg.moe_dispatcher == "alltoall":
        ep = gather_bytes(cfg.ep, tokens * cfg.topk)
        etp = (cfg.etp - 1) * tokens * cfg.topk
        return passes * (ep + etp)
    n = cfg.ep * cfg.etp
    return passes * (n - 1) * tokens


def tokens_per_expert(cfg) -> float:
    """Mean rows of one expert GEMM per micro-batch on one GPU: the GPU's tokens·topk/experts, times
    ep (its experts receive tokens from every EP rank) and etp (expert TP all-gathers them)."""
    return _tokens(cfg) * cfg.topk * cfg.ep * cfg.etp / cfg.experts


def expert_gemms_per_step(cfg) -> int:
    """Per-expert GEMMs one GPU issues per step, counted as if every expert ran its own: local
    experts × 2 linears × 3 passes (forward, dgrad, wgrad; one more forward under full recompute) ×
    MoE layers per stage × micro-batches. Transformer Engine 2.11's GroupedLinear runs one cuBLAS
    GEMM per expert by default (common/gemm/cublaslt_gemm.cu, multi_stream_cublas_gemm), as
    Megatron's SequentialMLP does; the trainer sets NVTE_USE_CUTLASS_GROUPED_GEMM=1
    (megalab.train.wiring.environment), so on Hopper forward and dgrad run one CUTLASS kernel per
    linear, and the count measures the per-expert work the host still does (step_model's expert_gemm
    constant prices it)."""
    if not cfg.experts:
        return 0
    passes = 3 + (cfg.recompute == "full")
    return (
        cfg.experts
        // cfg.ep
        * EXPERT_LINEARS
        * passes
        * (cfg.layers // cfg.pp)
        * cfg.num_microbatches
    )


def host_syncs_per_step(cfg, permute_fusion: bool | None = None) -> int:
    """Times per step the host waits for the GPU inside the MoE layers (Megatron Core 0.16.1,
    dropless).

    Each forward pass over a MoE layer, per micro-batch:
    alltoall: the routing metadata's device-to-host copy is waited for once
    (token_dispatcher.py:899,
      `d2h_event.synchronize()`); unfused permutation (moe_permute_fusion False, Megatron's
      default) adds
      two masked_select (moe_utils.py:369, 372), whose output size the host must read: 3, or 1
      fused.
    allgather: tokens_per_expert `.cpu()` (token_dispatcher.py:295) and local_probs.masked_select
      (token_dispatcher.py:304), plus the unfused permutation's masked_select (moe_utils.py:369):
      3, or 2.
    The backward pass reuses the sizes and adds none. A dense layer has none. permute_fusion None:
    as the trainer runs it (fused with Transformer Engine, megalab.train.wiring).
    """
    if not cfg.experts:
        return 0
    permute_fusion = cfg.impl == "te" if permute_fusion is None else permute_fusion
    per_layer = (
        (1 if permute_fusion else 3)
        if cfg.moe_dispatcher == "alltoall"
        else (2 if permute_fusion else 3)
    )
    forward_passes = 2 if cfg.recompute == "full" else 1
    return per_layer * forward_passes * (cfg.layers // cfg.pp) * cfg.num_microbatches


def _sharded(cfg, stage: int = 0) -> float:
    """Parameters whose optimizer state this GPU holds (all of them, or its distributed-optimizer
    shard)."""
    dense, expert = stage_params(cfg, stage)
    if not cfg.dist_opt:
        return dense + expert
    edp = cfg.gpus // (cfg.pp * cfg.ep * cfg.etp)  # expert data-parallel size
    return dense / (cfg.dp * cfg.cp) + expert / edp


def optimizer_bytes_per_step(cfg, stage: int = 0) -> float:
    """HBM bytes one GPU moves in the optimizer step: zeroing and norming its fp32 gradient buffer,
    fused Adam and the bf16 copy over the parameters it owns. Proportional to TOTAL parameters, not
    active ones."""
    n = sum(stage_params(cfg, stage))
    return (ZERO_BYTES + NORM_BYTES) * n + (ADAM_BYTES + COPY_BYTES) * _sharded(cfg, stage)


def expert_weight_bytes_per_step(cfg, stage: int = 0) -> float:
    """HBM bytes one GPU moves for its expert weights per step: every local expert's weight is read
    (forward, dgrad) and its gradient written and accumulated once per micro-batch, however few
    tokens it got (EXPERT_WEIGHT_BYTES per parameter)."""
    return EXPERT_WEIGHT_BYTES * stage_params(cfg, stage)[1] * cfg.num_microbatches


def expert_gemm_flops(cfg) -> float:
    """Mean FLOPs of one expert GEMM: 2·rows·h·out, averaged over fc1 (out = glu·ffn/etp) and fc2
    (ffn/etp), rows = tokens_per_expert; a dgrad or wgrad GEMM costs what its forward costs."""
    return tokens_per_expert(cfg) * cfg.hidden * (1 + glu(cfg)) * cfg.moe_ffn_size / cfg.etp


def memory_by_part(cfg, gpu=None) -> dict:
    """Predicted GiB per GPU of the most loaded stage, split into the model state (weights, fp32
    grads, Adam) of the dense parameters (attention, embeddings, norms, routers), that of the
    experts, and the activations; they add up to `theory.memory(cfg)["total"]`."""
    mem = memory(cfg, gpu)
    stage = mem["stage"]
    dense, expert = stage_params(cfg, stage)
    edp = cfg.gpus // (cfg.pp * cfg.ep * cfg.etp)
    shard = (cfg.dp * cfg.cp, edp) if cfg.dist_opt else (1, 1)
    per = [
        (WEIGHT_BYTES + GRAD_BYTES) * n + OPTIM_BYTES * n / d
        for n, d in zip((dense, expert), shard)
    ]
    out = {
        "dense state": per[0] / GIB,
        "expert state": per[1] / GIB,
        "activations": held_activation_bytes(cfg, stage) / GIB,
        "total": mem["total"],
    }
    if gpu is not None:
        out.update(capacity=mem["capacity"], fits=mem["fits"])
    return out


def largest_experts(cfg, gpu, limit: int = 4096) -> int:
    """The largest expert count (a multiple of 8·ep) whose predicted memory fits on `gpu`; 0 if
    none."""
    step = 8 * cfg.ep
    best = 0
    for n in range(step, limit + 1, step):
        if not memory(cfg.replace(experts=n), gpu)["fits"]:
            break
        best = n
    return best
