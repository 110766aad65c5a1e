"""Parameters: how many, of which part, on which rank — exactly what Megatron Core 0.16.1 builds.

The counts follow `GPTModel` (local and TE specs give the same count: TE only fuses the layernorm
into the next linear); `params_per_rank` equals `sum(p.numel() for p in model.parameters())` on
that rank for the model the trainer builds.
"""

from __future__ import annotations

__all__ = [
    "has_bias",
    "layout",
    "params",
    "layer_params",
    "router_params",
    "stage_params",
    "params_per_stage",
    "params_per_rank",
]


def has_bias(cfg) -> bool:
    """Linear layers carry biases in GPT-style models (LayerNorm), not in Llama-style ones
    (RMSNorm).

    This is our rule (Megatron's `add_bias_linear`, default True): the trainer passes
    `add_bias_linear=theory.has_bias(cfg)` so that counts here and there agree.
    """
    return cfg.norm == "LayerNorm"


# Vocabulary: cfg.vocab exactly as the trainer builds it. Megatron-LM's tokenizer set-up
# (_vocab_size_with_padding) would pad it to a multiple of 128·tp, which makes the model depend on
# the layout; our presets store vocabularies already padded to 128, and the trainer only needs
# vocab % tp == 0, so every layout trains the same model.


def layout(cfg) -> str:
    """The layout as printed in budgets and charts: 'TP(2)·PP(2)·CP(1)·EP(1)·DP(1)'."""
    return f"TP({cfg.tp})·PP({cfg.pp})·CP({cfg.cp})·EP({cfg.ep})·DP({cfg.dp})"


def layout_words(cfg, alone: str | None = None) -> str:
    """The layout as the book's prose names it, its parallel axes above 1: 'TP 2 + SP × PP 2 × VPP 3
    × CP 2 × EP 2'; `alone` where none is (default 'DP n')."""
    axes = [
        f"{a.upper()} {getattr(cfg, a)}" + " + SP" * (a == "tp" and cfg.sp)
        for a in ("tp", "pp", "vpp", "cp", "ep")
        if getattr(cfg, a) > 1
    ]
    return " × ".join(axes) or (f"DP {cfg.dp}" if alone is None else alone)


def glu(cfg) -> int:
    """2 for SwiGLU (fc1 holds gate and up: 2·ffn rows), 1 otherwise."""
    return 2 if cfg.activation == "swiglu" else 1


def _norm(cfg) -> int:
    # LayerNorm: weight+bias; RMSNorm: weight
    return cfg.hidden * (2 if cfg.norm == "LayerNorm" else 1)


def mlp_params(cfg, ffn: int, t: int) -> int:
    """One MLP (dense, or one expert) on one of t tensor-parallel ranks."""
    # MC transformer/mlp.py: fc1 ColumnParallel h -> glu*ffn (bias split over t), fc2 RowParallel
    # ffn -> h (full-size bias, replicated).
    b, h, fc1 = has_bias(cfg), cfg.hidden, glu(cfg) * ffn // t
    return fc1 * h + b * fc1 + (ffn // t) * h + b * h


def router_params(cfg) -> int:
    """MoE router: MC transformer/moe/router.py, weight (experts, h) replicated over TP (+ bias)."""
    return cfg.experts * cfg.hidden + has_bias(cfg) * cfg.experts


def layer_params(cfg, tp: int = 1, ep: int = 1, etp: int = 1) -> dict:
    """Parameters of one transformer layer on one rank, by part (MC 0.16.1 GPTModel layer)."""
    h, a, g, b = cfg.hidden, cfg.heads, cfg.groups, has_bias(cfg)
    kv = h // a  # kv_channels
    # MC transformer/attention.py SelfAttention: linear_qkv h -> kv*(a+2g) ColumnParallel (bias
    # split), linear_proj kv*a -> h RowParallel (full bias).
    qkv = kv * (a + 2 * g) // tp
    parts = {"norms": 2 * _norm(cfg), "attention": qkv * h + b * qkv + (kv * a // tp) * h + b * h}
    if cfg.experts == 0:
        parts.update(mlp=mlp_params(cfg, cfg.ffn_size, tp), experts=0)
    else:  # experts.py: experts/ep local experts, each an MLP split over etp
        parts.update(
            mlp=router_params(cfg),
            experts=cfg.experts // ep * mlp_params(cfg, cfg.moe_ffn_size, etp),
        )
    return parts


def params(cfg) -> dict:
    """Parameter count of the whole model (unique parameters), by part.

    Per layer: attention h·kv(a+2g) + kv·a·h (= 4h² for MHA), MLP (1+glu)·h·ffn, MoE
    experts·(1+glu)·h·moe_ffn + router experts·h, two norms; plus word embeddings V·h,
    learned positions seq·h, final norm, and an output layer V·h when untied. The copy of tied
    embeddings that Megatron keeps on the last pipeline stage is not counted here (see
    `params_per_rank`). `active` counts topk experts instead of all (MoE FLOPs scale with it).
    """
    h, L, V = cfg.hidden, cfg.layers, cfg.vocab
    lay = layer_params(cfg)
    out = {
        "embedding": V * h,
        "position": cfg.seq * h if cfg.position == "learned" else 0,
        "attention": L * lay["attention"],
        "mlp": L * lay["mlp"],
        "experts": L * lay["experts"],
        "norms": L * lay["norms"] + _norm(cfg),
        "output": 0 if cfg.tied_embeddings else V * h,
    }
    out["total"] = sum(out.values())
    per_expert = lay["experts"] // cfg.experts if cfg.experts else 0
    out["active"] = (
        out["total"] - L * per_expert * (cfg.experts - cfg.topk) if cfg.experts else out["total"]
    )
    return out


def stage_params(cfg, stage: int) -> tuple[int, int]:
    """(non-expert, expert) parameters on one rank of pipeline stage `stage`."""
    lay = layer_params(cfg, cfg.tp, cfg.ep, cfg.etp)
    n = cfg.layers // cfg.pp
    dense, expert = n * (lay["norms"] + lay["attention"] + lay["mlp"]), n * lay["experts"]
    emb = cfg.vocab // cfg.tp * cfg.hidden  # MC VocabParallelEmbedding: rows split over TP
    if stage == 0:  # pre_process: word (+ learned position, replicated) embeddings
        dense += emb + (cfg.seq * cfg.hidden if cfg.position == "learned" else 0)
    if stage == cfg.pp - 1:  # post_process: final norm + output layer
        # MC gpt_model.py: the output layer skips its weight only when tied AND on the embedding's
        # own module; with pp*vpp > 1 the last stage keeps a copy of the word embeddings
        # (language_module.setup_embeddings_and_output_layer).
        dense += _norm(cfg) + (emb if not cfg.tied_embeddings or cfg.pp * cfg.vpp > 1 else 0)
    return dense, expert


def params_per_stage(cfg) -> list[int]:
    """Parameters on one GPU of each pipeline stage (all TP/CP/DP/EP ranks of a stage hold as
    many)."""
    return [sum(stage_params(cfg, i)) for i in range(cfg.pp)]


def params_per_rank(cfg) -> list[int]:
    """Parameters on each global rank, in Megatron's default rank order 'tp-cp-ep-dp-pp'."""
    per_stage, ranks_per_stage = params_per_stage(cfg), cfg.gpus // cfg.pp
    return [per_stage[r // ranks_per_stage] for r in range(cfg.gpus)]
