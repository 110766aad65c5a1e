"""A pipeline's step predicted from one stage measured alone: the measured micro-batches plus the
bubble.

The bubble formula (p−1)/m (Narayanan et al. 2021 §2.2.1) says "more micro-batches". At a fixed
global batch, more micro-batches are also smaller ones, and a small micro-batch costs more per
sequence (the host's per-layer work and the kernels' launch are paid per micro-batch, the GPU is
less busy). Time one stage's layers alone on one GPU at each m (nothing to wait for, no bubble) and
the 1F1B step follows: m micro-batch slots of stage_step_s/m each, plus p−1 more of bubble (v chunks
per GPU: (p−1)/v). Left out: the sends between stages, unequal stages (the first holds the
embedding, the last the output layer), and that the optimizer step, once per step, is stretched with
the rest.
"""

from __future__ import annotations

__all__ = ["pipeline_step_from_stage", "best_microbatches"]


def pipeline_step_from_stage(stage_step_s: float, p: int, m: int, v: int = 1) -> float:
    """Predicted seconds per step of a p-stage pipeline with m micro-batches, from `stage_step_s`,
    the measured step of one stage's layers alone on one GPU with the same m micro-batches:
    stage_step_s · (m + (p−1)/v) / m = stage_step_s · (1 + (p−1)/(v·m)), 1F1B (v = 1) or
    interleaved."""
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"p={p}, m={m}, v={v}: each must be at least 1")
    return stage_step_s * (1 + (p - 1) / (v * m))


def best_microbatches(stage_step_s: dict[int, float], p: int, v: int = 1) -> int:
    """The m (a key of {m: measured stage step}) whose predicted pipeline step is the shortest."""
    if not stage_step_s:
        raise ValueError("no measured stage steps")
    return min(stage_step_s, key=lambda m: pipeline_step_from_stage(stage_step_s[m], p, m, v))
