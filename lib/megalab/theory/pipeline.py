"""The pipeline schedule: the bubble, and how many micro-batches each stage holds in flight.

Narayanan et al. 2021, §2.2.1 (1F1B) and §2.2.2 (interleaved schedule); Megatron Core 0.16.1
pipeline_parallel/schedules.py for the warm-up counts.
"""

from __future__ import annotations

__all__ = ["bubble_fraction", "layers_in_flight"]


def bubble_fraction(cfg) -> float:
    """Pipeline bubble over ideal compute time: (p−1)/m, interleaved (p−1)/(v·m)."""
    return (cfg.pp - 1) / (cfg.vpp * max(1, cfg.num_microbatches))


def layers_in_flight(cfg, stage: int = 0) -> float:
    """Layer-micro-batches whose activations `stage` holds at the peak of the schedule.

    MC 0.16.1 schedules.py `get_pp_rank_microbatches`: 1F1B warms up pp−stage−1 micro-batches, so
    min(pp−stage, m) × L/pp; interleaved warms up 2(pp−stage−1) + (v−1)·pp chunks of L/(pp·v)
    layers. On stage 0 that is L·(1 + (pp−1)/(pp·v)), Megatron's interleaving memory penalty
    (Narayanan et al. 2021 §2.2.2). pp = 1: one micro-batch.
    """
    pp, v, m, L = cfg.pp, cfg.vpp, cfg.num_microbatches, cfg.layers
    if pp == 1:
        return L
    if v == 1:
        return min(pp - stage, m) * L / pp
    return min(2 * (pp - stage - 1) + (v - 1) * pp + 1, m * v) * L / (pp * v)
