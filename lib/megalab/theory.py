"""Predictions for a RunConfig before it runs: parameters, FLOPs, memory, bubble, communication.

Pure functions of a `RunConfig` (and a GPU name); each cites the equation it implements. The
parameter counts follow exactly what Megatron Core 0.16.1 builds for `GPTModel` (local and TE
specs give the same count: TE only fuses the layernorm into the next linear). Memory lives in
`megalab.memory`, communication in `megalab.comm`; both are re-exported here.

    >>> from megalab import presets, theory
    >>> theory.plan(presets.get("gpt-1.2b").replace(gpus=4, tp=2, pp=2, mbs=4, gbs=16))
"""

from __future__ import annotations

from megalab.comm import comm_bytes_per_step, comm_time_s
from megalab.hardware import GpuSpec, gpu_spec
from megalab.memory import activation_bytes_per_layer, attention_kind, layers_in_flight, memory, zero_memory

__all__ = [
    "has_bias", "layout", "params", "params_per_stage", "params_per_rank",
    "flops_per_step", "model_flops", "hardware_flops", "tflops_per_gpu", "mfu", "bubble_fraction",
    "memory", "activation_bytes_per_layer", "attention_kind", "layers_in_flight", "zero_memory",
    "comm_bytes_per_step", "comm_time_s", "step_time_estimate", "plan",
]


# -- shapes -----------------------------------------------------------------------------------------
def has_bias(cfg) -> bool:
    """Linear layers carry biases in GPT-style models (LayerNorm), not in Llama-style ones (RMSNorm).

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


def _glu(cfg) -> int:
    return 2 if cfg.activation == "swiglu" else 1  # SwiGLU's fc1 holds gate and up: 2*ffn rows


def _norm(cfg) -> int:
    return cfg.hidden * (2 if cfg.norm == "LayerNorm" else 1)  # LayerNorm: weight+bias; RMSNorm: weight


def _mlp(cfg, ffn: int, t: int) -> int:
    # MC transformer/mlp.py: fc1 ColumnParallel h -> glu*ffn (bias split over t), fc2 RowParallel
    # ffn -> h (full-size bias, replicated).
    b, h, fc1 = has_bias(cfg), cfg.hidden, _glu(cfg) * ffn // t
    return fc1 * h + b * fc1 + (ffn // t) * h + b * h


def _layer(cfg, tp: int = 1, ep: int = 1, etp: int = 1) -> dict:
    """Parameters of one transformer layer on one rank, by part (MC 0.16.1 GPTModel layer)."""
    h, a, g, b = cfg.hidden, cfg.heads, cfg.groups, has_bias(cfg)
    kv = h // a  # kv_channels
    # MC transformer/attention.py SelfAttention: linear_qkv h -> kv*(a+2g) ColumnParallel (bias
    # split), linear_proj kv*a -> h RowParallel (full bias).
    qkv = kv * (a + 2 * g) // tp
    parts = {"norms": 2 * _norm(cfg), "attention": qkv * h + b * qkv + (kv * a // tp) * h + b * h}
    if cfg.experts == 0:
        parts.update(mlp=_mlp(cfg, cfg.ffn_size, tp), experts=0)
    else:
        # MC transformer/moe/router.py: weight (experts, h) (+bias), replicated over TP;
        # experts.py: experts/ep local experts, each an MLP split over etp.
        parts.update(mlp=cfg.experts * h + b * cfg.experts,
                     experts=cfg.experts // ep * _mlp(cfg, cfg.moe_ffn_size, etp))
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
    lay = _layer(cfg)
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
    out["active"] = out["total"] - L * per_expert * (cfg.experts - cfg.topk) if cfg.experts else out["total"]
    return out


def _stage(cfg, stage: int) -> tuple[int, int]:
    """(non-expert, expert) parameters on one rank of pipeline stage `stage`."""
    lay = _layer(cfg, cfg.tp, cfg.ep, cfg.etp)
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
    """Parameters on one GPU of each pipeline stage (all TP/CP/DP/EP ranks of a stage hold as many)."""
    return [sum(_stage(cfg, i)) for i in range(cfg.pp)]


def params_per_rank(cfg) -> list[int]:
    """Parameters on each global rank, in Megatron's default rank order 'tp-cp-ep-dp-pp'.

    Equals `sum(p.numel() for p in model.parameters())` on that rank for the model the trainer
    builds (over all its virtual-pipeline chunks).
    """
    per_stage, ranks_per_stage = params_per_stage(cfg), cfg.gpus // cfg.pp
    return [per_stage[r // ranks_per_stage] for r in range(cfg.gpus)]


# -- FLOPs ----------------------------------------------------------------------------------------
def flops_per_step(cfg, recompute: str | None = None, causal: bool = True) -> float:
    """Floating-point operations in one optimizer step (all GPUs together).

    Megatron-LM core_v0.16.1 `training.num_floating_point_operations` (GPT case): per token,
    3 passes (forward, wgrad, dgrad) × 2 FLOPs per multiply-add over the GEMMs
    h·kv(a+2g) + kv·a·h (attention), (1+glu)·h·ffn (MLP; MoE: topk·(1+glu)·h·moe_ffn),
    kv·a·s·2 (QKᵀ and AV, halved for the causal mask) and h·V (logits), times gbs·seq tokens.
    For the classic GPT (MHA, gelu, ffn = 4h) and `causal=False` this is exactly Narayanan et al.
    2021 eq. (3) without recomputation: 72·B·s·L·h²·(1 + s/(6h) + V/(12hL)).

    recompute=None counts model FLOPs (what MFU uses); "full" adds one more forward of every layer
    (hardware FLOPs; Narayanan eq. (3): 96·B·s·L·h²·(1 + s/(6h) + V/(16hL))), "selective" one
    more forward of the core attention only (Korthikanti et al. 2022 §5).
    """
    h, a, g, s = cfg.hidden, cfg.heads, cfg.groups, cfg.seq
    kv, glu = h // a, _glu(cfg)
    q = kv * a
    core = 4 * q * s * (0.5 if causal else 1.0)  # forward FLOPs per token: QKᵀ and (QKᵀ)V
    if cfg.experts:
        mlp = 2 * (1 + glu) * h * cfg.moe_ffn_size * cfg.topk
    else:
        mlp = 2 * (1 + glu) * h * cfg.ffn_size
    layer = 2 * h * kv * (a + 2 * g) + 2 * q * h + core + mlp
    tokens = cfg.gbs * s
    total = tokens * 3 * (cfg.layers * layer + 2 * h * cfg.vocab)
    if recompute == "full":
        total += tokens * cfg.layers * layer
    elif recompute == "selective":
        total += tokens * cfg.layers * core
    elif recompute not in (None, "none"):
        raise ValueError(f"recompute={recompute!r}: use None, 'none', 'selective' or 'full'")
    return float(total)


def model_flops(cfg) -> float:
    """Model FLOPs per step: no recomputation counted (the numerator of MFU)."""
    return flops_per_step(cfg)


def hardware_flops(cfg) -> float:
    """FLOPs the GPUs actually execute per step, including cfg.recompute's extra forward work."""
    return flops_per_step(cfg, recompute=cfg.recompute)


def _spec(gpu) -> GpuSpec:
    return gpu if isinstance(gpu, GpuSpec) else gpu_spec(gpu)


def tflops_per_gpu(cfg, step_time_s: float) -> float:
    """Achieved model TFLOP/s per GPU: flops_per_step / step_time / gpus / 1e12 (the contract's rule)."""
    return model_flops(cfg) / step_time_s / cfg.gpus / 1e12


def mfu(cfg, step_time_s: float, gpu="H200") -> float:
    """Model FLOPs utilisation: achieved model FLOP/s per GPU over the dense BF16 peak (even with fp8)."""
    return tflops_per_gpu(cfg, step_time_s) / _spec(gpu).peak_bf16_tflops


# -- pipeline bubble ------------------------------------------------------------------------------
def bubble_fraction(cfg) -> float:
    """Pipeline bubble over ideal compute time: (p−1)/m, interleaved (p−1)/(v·m).

    Narayanan et al. 2021, §2.2.1 (1F1B) and §2.2.2 (interleaved schedule).
    """
    return (cfg.pp - 1) / (cfg.vpp * max(1, cfg.num_microbatches))


# -- roll-ups -------------------------------------------------------------------------------------
def step_time_estimate(cfg, gpu="H200", matmul_tflops: float | None = None,
                       bus_bw: float | None = None) -> dict:
    """Roofline step time in seconds: compute at `matmul_tflops` + bubble + exposed communication.

    compute_s = hardware FLOPs / gpus / matmul rate (default: the GPU's dense BF16 peak);
    bubble_s = compute_s · bubble_fraction (Narayanan 2021 §2.2); comm_s = bytes per GPU / bus
    bandwidth (default: NVLink per direction) for every axis, assumed not overlapped, except the
    data-parallel reduction when cfg.overlap. A lower bound, for the planner, not a promise.
    """
    spec = _spec(gpu)
    rate = (matmul_tflops or spec.peak_bf16_tflops) * 1e12
    compute = hardware_flops(cfg) / cfg.gpus / rate
    bubble = compute * bubble_fraction(cfg)
    volume = comm_bytes_per_step(cfg)
    exposed = sum(v for k, v in volume.items() if k != "total" and not (k == "dp" and cfg.overlap))
    comm_s = comm_time_s(exposed, bus_bw or spec.nvlink_gbs)
    total = compute + bubble + comm_s
    return {"compute_s": compute, "bubble_s": bubble, "comm_s": comm_s, "total_s": total,
            "tokens_per_s": cfg.gbs * cfg.seq / total, "tflops_per_gpu": tflops_per_gpu(cfg, total),
            "mfu": mfu(cfg, total, spec)}


def plan(cfg, gpu="H200") -> dict:
    """Everything predicted for one run: the payload of `megalab plan --json`."""
    mem = memory(cfg, gpu=gpu)
    return {
        "label": cfg.label,
        "world_size": cfg.gpus,
        "layout": layout(cfg),
        "num_microbatches": cfg.num_microbatches,
        "tokens_per_step": cfg.gbs * cfg.seq,
        "params_total": params(cfg)["total"],
        "params_per_rank": params_per_rank(cfg),
        "params_per_gpu_max": max(params_per_stage(cfg)),
        "flops_per_step": model_flops(cfg),
        "hardware_flops_per_step": hardware_flops(cfg),
        "memory_gib": mem,
        "bubble_fraction": bubble_fraction(cfg),
        "comm_bytes_per_step": comm_bytes_per_step(cfg),
        "step_time_estimate": step_time_estimate(cfg, gpu),
    }
