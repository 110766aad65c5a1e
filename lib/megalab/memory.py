"""Memory per GPU: weights, gradients, optimizer state, activations; and ZeRO's stages.

Model state follows Megatron-LM's `theoretical_memory_usage.py` (18 bytes/param, or 6 + 12/d with
the distributed optimizer); activations follow Korthikanti et al. 2022, Table 2, held for as many
micro-batches as the pipeline schedule keeps in flight. Re-exported by `megalab.theory`.
"""

from __future__ import annotations

__all__ = ["activation_bytes_per_layer", "attention_kind", "layers_in_flight", "memory", "zero_memory"]

GIB = 2**30
WEIGHT_BYTES = 2  # bf16 parameters
# fp32 main gradients: Megatron-LM sets accumulate_allreduce_grads_in_fp32 for bf16 (arguments.py);
# the trainer passes DistributedDataParallelConfig(grad_reduce_in_fp32=True) to match.
GRAD_BYTES = 4
OPTIM_BYTES = 12  # Adam: fp32 master weights 4 + first moment 4 + second moment 4


def attention_kind(cfg) -> str:
    """'flash' for TE (fused attention keeps no s×s scores), 'materialized' for the local spec."""
    return "flash" if cfg.impl == "te" else "materialized"


def activation_bytes_per_layer(cfg, attention: str | None = None, recompute: str | None = None) -> float:
    """Activation bytes one transformer layer keeps for one micro-batch on one GPU.

    Korthikanti et al. 2022, Table 2 (bf16, with dropout masks), per layer:
      no parallelism          s·b·h·(34 + 5·a·s/h)
      TP                      s·b·h·(10 + 24/t + 5·a·s/(h·t))
      TP + SP                 s·b·h/t·(34 + 5·a·s/h)
      + selective recompute   the 5·a·s/h term (attention scores) is dropped
      full recompute          2·s·b·h (the layer input only; /t with SP)
    The 24 generalises to 4 + 4g/a (Q, K, V, projection input) + 2(1+glu)·ffn/h (activation and
    fc2 inputs); MoE experts hold topk copies of each token's MLP activations (balanced routing),
    split over tp. Flash attention (TE) never stores the scores, as with selective recompute.
    Context parallelism divides the sequence: s → s/cp. `recompute` defaults to cfg.recompute.
    """
    recompute = recompute or cfg.recompute
    h, a, g, t = cfg.hidden, cfg.heads, cfg.groups, cfg.tp
    s, b = cfg.seq / cfg.cp, cfg.mbs
    sp = t if cfg.sp else 1  # SP also splits the 10 "replicated" units (norms, dropout, inputs)
    if recompute == "full":
        return 2 * s * b * h / sp
    glu = 2 if cfg.activation == "swiglu" else 1
    if cfg.experts:
        mlp = cfg.topk * (2 + 2 * (1 + glu) * cfg.moe_ffn_size / h)
    else:
        mlp = 2 * (1 + glu) * cfg.ffn_size / h
    per_layer = s * b * h * (10 / sp + (4 + 4 * g / a + mlp) / t)
    attention = attention or attention_kind(cfg)
    if attention == "materialized" and recompute != "selective":
        per_layer += 5 * a * s * cfg.seq * b / t  # softmax out 2, dropout mask 1, dropout out 2 (×a·s²·b)
    return per_layer


def layers_in_flight(cfg, stage: int = 0) -> float:
    """Layer-micro-batches whose activations `stage` holds at the peak of the schedule.

    MC 0.16.1 pipeline_parallel/schedules.py `get_pp_rank_microbatches`: 1F1B warms up
    pp−stage−1 micro-batches, so min(pp−stage, m) × L/pp; interleaved warms up
    2(pp−stage−1) + (v−1)·pp chunks of L/(pp·v) layers. On stage 0 that is L·(1 + (pp−1)/(pp·v)),
    Megatron's interleaving memory penalty (Narayanan et al. 2021 §2.2.2). pp = 1: one micro-batch.
    """
    pp, v, m, L = cfg.pp, cfg.vpp, cfg.num_microbatches, cfg.layers
    if pp == 1:
        return L
    if v == 1:
        return min(pp - stage, m) * L / pp
    return min(2 * (pp - stage - 1) + (v - 1) * pp + 1, m * v) * L / (pp * v)


def _activations(cfg, stage: int, attention: str | None) -> float:
    s, b, t, sp = cfg.seq / cfg.cp, cfg.mbs, cfg.tp, (cfg.tp if cfg.sp else 1)
    held = layers_in_flight(cfg, stage)
    total = activation_bytes_per_layer(cfg, attention) * held
    if cfg.recompute == "full":  # backward re-runs one layer at a time: its full activations, once
        total += activation_bytes_per_layer(cfg, attention, recompute="none")
    if stage == 0:  # Megatron: token ids (int64) + embedding dropout mask, per micro-batch in flight
        total += (8 * s * b + s * b * cfg.hidden / sp) * held / (cfg.layers / cfg.pp)
    if stage == cfg.pp - 1:  # fp32 logits over the vocab shard + final norm output, one micro-batch
        total += 4 * s * b * cfg.vocab / t + 4 * s * b * cfg.hidden / sp
    return total


def _model_state(cfg, stage: int) -> tuple[float, float, float]:
    from megalab import theory

    dense, expert = theory._stage(cfg, stage)
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
    theoretical_memory_usage.py; activations per `activation_bytes_per_layer` × `layers_in_flight`,
    plus embeddings on the first stage and logits (s·b·V·4 bytes fp32 / t) on the last. Ignores
    the CUDA context, allocator fragmentation, communication buffers and FP8 weight copies.
    With `gpu`, adds its capacity and whether the prediction fits.
    """
    best = None
    for stage in range(cfg.pp):
        w, g, o = _model_state(cfg, stage)
        act = _activations(cfg, stage, attention)
        row = {"weights": w / GIB, "grads": g / GIB, "optimizer": o / GIB, "activations": act / GIB,
               "total": (w + g + o + act) / GIB, "stage": stage,
               "attention": attention or attention_kind(cfg)}
        if best is None or row["total"] > best["total"]:
            best = row
    if gpu is not None:
        from megalab.hardware import GpuSpec, gpu_spec

        spec = gpu if isinstance(gpu, GpuSpec) else gpu_spec(gpu)
        best.update(capacity=spec.mem_gib, fits=best["total"] <= spec.mem_gib)
    return best


def zero_memory(params: float, dp: int, stage: int, k: float = 12) -> float:
    """Model-state bytes per GPU under ZeRO stage 0-3 (Rajbhandari et al. 2020, Fig. 1, §5).

    Mixed-precision Adam holds 2Ψ (fp16 weights) + 2Ψ (fp16 grads) + kΨ (optimizer, k = 12):
    stage 0 (2+2+k)Ψ; 1 (P_os) (2+2)Ψ + kΨ/Nd; 2 (P_os+g) 2Ψ + (2+k)Ψ/Nd; 3 (P_os+g+p) (2+2+k)Ψ/Nd.
    """
    psi, nd = params, dp
    per_stage = {0: (4 + k) * psi, 1: 4 * psi + k * psi / nd, 2: 2 * psi + (2 + k) * psi / nd,
                 3: (4 + k) * psi / nd}
    if stage not in per_stage:
        raise ValueError(f"ZeRO stage={stage}: use 0, 1, 2 or 3")
    return per_stage[stage]
