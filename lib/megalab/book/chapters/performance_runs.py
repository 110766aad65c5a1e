"""The performance page's runs: the trainer against Megatron-LM's own pretrain_gpt.py (the peer,
megalab.jobs.peer), as a comparison group.

Not a chapter: `megalab experiments performance` prints its plan like a chapter's.
"""

from __future__ import annotations

from megalab.book.specs import GROUP_ITERS, Group
from megalab.jobs.peer import peer_config
from megalab.runs import presets

# the pair's GPUs: the two-GPU side-by-side set's TP 2 layout
PEER_GPUS = 2
# the comparison group of the fair pair, the one the performance page's claim reads
PEER_GROUP = "perf.peer"


def runs(gpus: int = 2, iters: int = GROUP_ITERS) -> dict:
    """From PEER_GPUS GPUs: the fair peer pair."""
    return {"groups": _groups(gpus)}


def _groups(gpus: int) -> dict:
    """perf.peer: gpt-1.2b at TP 2, micro-batch 8, the trainer and the peer with the weight-gradient
    accumulation fusion off on both sides (Megatron-LM runs it only with Apex), eager and with TE's
    CUDA graphs, alternated; three rounds (the claim is a difference of a few percent); the
    trainer's graphed run profiled."""
    if gpus < PEER_GPUS:
        return {}
    ours = presets.get("gpt-1.2b").replace(
        gpus=PEER_GPUS, tp=PEER_GPUS, mbs=8, gbs=8, iters=GROUP_ITERS, grad_accum_fusion="off"
    )
    pairs = [ours.replace(cuda_graphs=g) for g in ("none", "te")]
    configs = [c for ours in pairs for c in (ours, peer_config(ours))]
    return {"peer": Group(PEER_GROUP, configs, rounds=3, profiled=2)}
