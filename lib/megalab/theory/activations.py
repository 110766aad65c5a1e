"""Activation memory: what one layer keeps for the backward pass, and what a pipeline stage holds.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Table 2,
generalised to GQA, SwiGLU, MoE and context parallelism; held for as many micro-batches as the
pipeline schedule keeps in flight (megalab.theory.pipeline).
"""

from __future__ import annotations

from megalab.theory.parameters import glu
from megalab.theory.pipeline import layers_in_flight

__all__ = [
    "SCORE_BYTES",
    "SCORE_BYTES_FP32_SOFTMAX",
    "attention_kind",
    "activation_terms",
    "activation_bytes_per_layer",
    "bytes_per_score",
    "held_activation_bytes",
]

# Bytes kept per attention-score element (a·s² of them per sequence and layer), materialized
# attention: Korthikanti et al. 2022 §4.1: softmax output 2 + dropout mask 1 + dropout output 2
SCORE_BYTES = 5
# Megatron's unfused softmax (no fused kernel) keeps its fp32 output: 4 + 1 + 2
SCORE_BYTES_FP32_SOFTMAX = 7


def attention_kind(cfg) -> str:
    """'flash' for TE (fused attention keeps no s×s scores), 'materialized' for the local spec."""
    return "flash" if cfg.impl == "te" else "materialized"


def activation_terms(
    cfg,
    attention: str | None = None,
    recompute: str | None = None,
    score_bytes: float = SCORE_BYTES,
) -> dict:
    """Activation bytes one layer keeps for one micro-batch on one GPU, term by term (sum: next
    function).

    Korthikanti et al. 2022 §4.1, per layer and in units of s·b·h bytes (bf16, dropout masks 1
    byte):
      replicated  10   layernorm inputs 4, QKV and MLP inputs 2 + 2, two dropout masks 1 + 1:
                       kept whole on every TP rank; SP splits them t ways (§4.2.2). Without dropout
                       (cfg.dropout == 0) no mask is kept (PyTorch's dropout returns its input at p
                       = 0): 8
      attention   4 + 4g/a   Q, K, V for QKᵀ and softmax·V, output-projection input (MHA: 8)
      mlp         2(1+glu)·ffn/h   fc1 output and activation output (GPT, ffn = 4h: 16);
                       MoE: topk copies of each token's expert MLP plus its dispatched input
      scores      5·a·s/h   softmax output 2, its dropout mask 1, dropout output 2 (×a·s²·b); gone
                  with
                       selective recompute, and never stored by fused (flash) attention. Kept at 5
                       without
                       dropout too: the mask and dropout output go, but Megatron's unfused softmax
                       (no fused
                       kernel) then keeps its fp32 output and a bf16 copy (4 + 2), so 5 is the
                       middle guess
    The paper's 34 = 10 + 8 + 16. TP splits attention, mlp and scores t ways; CP divides s (s →
    s/cp). Full recompute keeps only the layer input, 2·s·b·h (/t with SP), under "input". Selective
    recompute with "mlp" among cfg.recompute_modules (dense layers; Megatron checkpoints the MLP
    from its input) keeps no MLP activations and no separate MLP input: mlp 0, replicated 2 less.
    `score_bytes`: bytes per score element (the paper's 5; SCORE_BYTES_FP32_SOFTMAX when the softmax
    runs unfused in fp32).
    """
    recompute = recompute or cfg.recompute
    h, a, g, t = cfg.hidden, cfg.heads, cfg.groups, cfg.tp
    s, b = cfg.seq / cfg.cp, cfg.mbs
    sp = t if cfg.sp else 1  # SP also splits the 10 "replicated" units (norms, dropout, inputs)
    unit = s * b * h
    if recompute == "full":
        return {"input": 2 * unit / sp}
    if cfg.experts:
        mlp = cfg.topk * (2 + 2 * (1 + glu(cfg)) * cfg.moe_ffn_size / h)
    else:
        mlp = 2 * (1 + glu(cfg)) * cfg.ffn_size / h
    materialized = (attention or attention_kind(cfg)) == "materialized" and recompute != "selective"
    # two dropout masks of 1 byte per element, when dropout is on
    replicated = 10 if cfg.dropout > 0 else 8
    if recompute == "selective" and "mlp" in cfg.recompute_module_names and not cfg.experts:
        # the MLP re-runs from its input, the residual the norms keep
        mlp, replicated = 0.0, replicated - 2
    return {
        "replicated": replicated * unit / sp,
        "attention": (4 + 4 * g / a) * unit / t,
        "mlp": mlp * unit / t,
        "scores": score_bytes * a * s * cfg.seq * b / t if materialized else 0.0,
    }


def activation_bytes_per_layer(
    cfg,
    attention: str | None = None,
    recompute: str | None = None,
    score_bytes: float = SCORE_BYTES,
) -> float:
    """Activation bytes one transformer layer keeps for one micro-batch on one GPU.

    Korthikanti et al. 2022, Table 2 (bf16, with dropout masks; without dropout the 34 is 32), per
    layer:
      no parallelism          s·b·h·(34 + 5·a·s/h)
      TP                      s·b·h·(10 + 24/t + 5·a·s/(h·t))
      TP + SP                 s·b·h/t·(34 + 5·a·s/h)
      + selective recompute   the 5·a·s/h term (attention scores) is dropped
      full recompute          2·s·b·h (the layer input only; /t with SP)
    The 24 generalises to 4 + 4g/a + 2(1+glu)·ffn/h (see `activation_terms`). Flash attention (TE)
    never stores the scores, as with selective recompute. `recompute` defaults to cfg.recompute.
    """
    return sum(activation_terms(cfg, attention, recompute, score_bytes).values())


def bytes_per_score(cfg, per_layer_bytes: float) -> float:
    """Bytes per attention-score element that a measured per-layer activation size implies: what it
    holds beyond the score-free terms of `activation_terms`, over the a·s²·b/t score elements of one
    layer on one GPU (the paper counts 5; an unfused fp32 softmax keeps 7)."""
    rest = activation_bytes_per_layer(cfg, "flash", "none")
    elements = cfg.heads * (cfg.seq / cfg.cp) * cfg.seq * cfg.mbs / cfg.tp
    return (per_layer_bytes - rest) / elements


def held_activation_bytes(cfg, stage: int = 0, attention: str | None = None) -> float:
    """Activation bytes pipeline stage `stage` holds at the peak of its schedule (one GPU).

    Layers in flight × per-layer bytes; full recompute adds one layer's full activations (backward
    re-runs one layer at a time); the first stage adds token ids and the embedding's dropout mask
    per micro-batch in flight, the last the fp32 logits over its vocabulary shard.
    """
    s, b, t, sp = cfg.seq / cfg.cp, cfg.mbs, cfg.tp, (cfg.tp if cfg.sp else 1)
    held = layers_in_flight(cfg, stage)
    total = activation_bytes_per_layer(cfg, attention) * held
    if cfg.recompute == "full":  # backward re-runs one layer at a time: its full activations, once
        total += activation_bytes_per_layer(cfg, attention, recompute="none")
    # Megatron: token ids (int64) + embedding dropout mask (with dropout), per micro-batch in flight
    if stage == 0:
        total += (
            (8 * s * b + (s * b * cfg.hidden / sp if cfg.dropout > 0 else 0))
            * held
            / (cfg.layers / cfg.pp)
        )
    if stage == cfg.pp - 1:  # fp32 logits over the vocab shard + final norm output, one micro-batch
        total += 4 * s * b * cfg.vocab / t + 4 * s * b * cfg.hidden / sp
    return total
