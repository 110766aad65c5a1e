"""Predictions for a RunConfig before it runs, one cost model per module, each citing its paper.

    parameters   parameters by part and per rank (what Megatron Core 0.16.1 builds)
    flops        FLOPs per step, TFLOP/s per GPU, MFU (Narayanan et al. 2021, eq. 3)
    activations  activation bytes per layer and per stage (Korthikanti et al. 2022, Table 2)
    footprint    memory per GPU (and per pipeline stage): model state by ZeRO stage + activations
                 (Rajbhandari et al. 2020)
    collectives  bytes and time of one collective (ring algorithms, NCCL-tests' bus bandwidth)
    comm         communication per step by axis (tp, dp, cp, pp, ep)
    context      context parallelism: the 2·cp-chunk split, causal work per rank, the ring's
                 overlap (Liu et al. 2023)
    pipeline     the bubble, the micro-batches in flight, the 1F1B and interleaved schedules
                 (Narayanan et al. 2021 §2.2)
    moe          active vs total parameters, token-dispatcher traffic (Fedus et al. 2021)
    step_time    a roofline step time
    stage_step   a pipeline's step from one stage's measured step, the bubble added

`plan(cfg)` is the front door; every module's public names are re-exported here.

    >>> from megalab import presets, theory
    >>> theory.plan(presets.get("gpt-1.2b").replace(gpus=4, tp=2, pp=2, mbs=4, gbs=16))
"""

from __future__ import annotations

from megalab.theory.activations import (
    activation_bytes_per_layer,
    activation_terms,
    attention_kind,
    bytes_per_score,
    held_activation_bytes,
)
from megalab.theory.collectives import bus_factor, comm_time_s
from megalab.theory.comm import comm_bytes_per_step
from megalab.theory.context import (
    attention_flops_share,
    causal_imbalance,
    causal_work,
    chunks_of_rank,
    ring_step,
)
from megalab.theory.flops import (
    extra_flops,
    flops_per_step,
    hardware_flops,
    mfu,
    model_flops,
    tflops_per_gpu,
)
from megalab.theory.footprint import memory, memory_per_stage, model_state_bytes, zero_memory
from megalab.theory.moe import active_fraction, dispatch_bytes
from megalab.theory.parameters import (
    has_bias,
    layer_params,
    layout,
    layout_words,
    params,
    params_per_rank,
    params_per_stage,
    stage_params,
)
from megalab.theory.pipeline import (
    bubble_fraction,
    bubble_over_ideal,
    bubble_over_step,
    layers_in_flight,
    schedule,
    schedule_bubble,
    stage_order,
)
from megalab.theory.step_time import comm_by_axis_s, step_time_estimate
from megalab.theory.stage_step import best_microbatches, pipeline_step_from_stage

__all__ = [
    "has_bias",
    "layout",
    "layout_words",
    "params",
    "layer_params",
    "stage_params",
    "params_per_stage",
    "params_per_rank",
    "flops_per_step",
    "model_flops",
    "hardware_flops",
    "extra_flops",
    "tflops_per_gpu",
    "mfu",
    "activation_bytes_per_layer",
    "activation_terms",
    "attention_kind",
    "bytes_per_score",
    "held_activation_bytes",
    "memory",
    "model_state_bytes",
    "zero_memory",
    "bus_factor",
    "comm_bytes_per_step",
    "comm_time_s",
    "bubble_fraction",
    "bubble_over_ideal",
    "bubble_over_step",
    "memory_per_stage",
    "schedule",
    "schedule_bubble",
    "stage_order",
    "layers_in_flight",
    "active_fraction",
    "dispatch_bytes",
    "comm_by_axis_s",
    "step_time_estimate",
    "plan",
    "pipeline_step_from_stage",
    "best_microbatches",
    "chunks_of_rank",
    "causal_work",
    "causal_imbalance",
    "attention_flops_share",
    "ring_step",
]


def plan(cfg, gpu="H200") -> dict:
    """Everything predicted for one run: the payload of `megalab plan --json`."""
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
        "memory_gib": memory(cfg, gpu=gpu),
        "bubble_fraction": bubble_fraction(cfg),
        "comm_bytes_per_step": comm_bytes_per_step(cfg),
        "step_time_estimate": step_time_estimate(cfg, gpu),
    }
