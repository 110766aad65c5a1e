"""Chapter 06, expert parallelism and mixture of experts: its runs, by name.

The seed tutorial's OLMoE-like model (hidden 1024, 16 layers, seq 4096, top-8 of 64 experts, expert FFN
1024) with Megatron Core's MoE layers, Transformer Engine's grouped GEMM and the auxiliary
load-balancing loss; one sequence per micro-batch, 4 sequences per GPU per step.
"""

from __future__ import annotations

from megalab import presets
from megalab.specs import ITERS, PARITY_ITERS, Parity, Profiled, degrees

EXPERTS = (64, 128, 256)   # the seed's rows: more experts at the same active compute


def runs(gpus: int = 2, iters: int = ITERS) -> dict:
    """`gpus`: the most GPUs (EP degree) swept."""
    base = presets.get("olmoe-like").replace(iters=iters, mbs=1, gbs=4)
    ds = degrees(gpus)
    top = ds[-1]
    active = base.moe_ffn_size * base.topk   # a dense MLP doing what topk experts do per token
    return {
        # 1. total vs active: the MoE model beside a dense model of equal active size, one GPU
        "dense_equal_active": base.replace(name="olmoe-like-dense", experts=0, ffn=active),
        "one_gpu": {n: base.replace(experts=n) for n in EXPERTS},
        # 2. DP (experts replicated; distributed optimizer off and on) against EP = GPUs
        "dp": [base.replace(gpus=d, gbs=4 * d, dist_opt=o) for d in ds[1:] for o in (False, True)],
        "ep": [base.replace(gpus=d, gbs=4 * d, ep=d) for d in ds[1:]],
        # 3. more experts at the same active compute, with and without EP
        "experts_ep": {n: base.replace(experts=n, gpus=top, gbs=4 * top, ep=top) for n in EXPERTS} if top > 1 else {},
        "experts_dp": {n: base.replace(experts=n, gpus=top, gbs=4 * top, dist_opt=True) for n in EXPERTS}
        if top > 1 else {},
        # 4. the dispatchers, and expert tensor parallelism against EP
        "dispatcher": [base.replace(gpus=top, gbs=4 * top, ep=top, moe_dispatcher=d) for d in ("alltoall", "allgather")]
        if top > 1 else [],
        "etp": [base.replace(gpus=top, gbs=4 * top, etp=top)] if top > 1 else [],
        "profile": [Profiled(base.replace(gpus=top, gbs=4 * top, ep=top, iters=10))] if top > 1 else [],
        # 6. still correct: the recorded EP 4 parity of moe-small (local spec, lr 1e-4), both dispatchers
        "parity": [Parity(presets.get("moe-small").replace(mbs=2, gbs=16, iters=PARITY_ITERS, lr=1e-4, gpus=4, ep=4, impl="local",
                                                          moe_dispatcher=d)) for d in ("alltoall", "allgather")],
    }
