"""Chapter 02, tensor parallelism: its runs, by name, and the paper's numbers it sets them beside.

The PAPER_* constants are Shoeybi et al. 2019's published results (arXiv 1909.08053, on V100s in
DGX-2H servers), not measurements of this book; megalab.book.chapters.ch02_analysis sets the
comparison group `ch02.tp` beside them.
"""

from __future__ import annotations

from megalab.runs import presets
from megalab.book.specs import (
    GROUP_ITERS,
    ITERS,
    PARITY_ITERS,
    Group,
    Parity,
    Profiled,
    degrees,
    largest_mbs_within,
)


# Shoeybi et al. 2019, Table 1
WEAK_TP_MODELS = {1: "gpt-1.2b", 2: "gpt-2.5b", 4: "gpt-4.2b", 8: "gpt-8.3b"}

PAPER = "https://arxiv.org/abs/1909.08053"  # Shoeybi et al. 2019, Megatron-LM
# Table 8: speed-up of the 1.2B model at a fixed batch of 8 against one GPU, by model-parallel GPUs
PAPER_STRONG_SPEEDUP = {1: 1.0, 2: 1.64, 4: 2.34, 8: 2.98}
# Fig. 5, model-parallel bars: weak-scaling efficiency of Table 1's models (1.2B on 1 GPU ... 8.3B
# on 8), batch 8; the text (§5.1) quotes the 8-way bar: "77% of linear scaling"
PAPER_WEAK_EFFICIENCY = {1: 1.0, 2: 0.95, 4: 0.82, 8: 0.77}
PAPER_TFLOPS_PER_GPU = 39.0  # §5.1: the one-GPU baseline, 30% of the V100's peak
# NVIDIA V100 SXM datasheet: 300 GB/s NVLink per GPU, both directions added
V100_NVLINK_GBS = 150.0


def runs(gpus: int = 4, iters: int = ITERS) -> dict:
    """Shoeybi et al. 2019's models with Transformer Engine; TP within one NVLink domain."""
    ts = [t for t in degrees(gpus) if t in WEAK_TP_MODELS]
    model = lambda t: presets.get(WEAK_TP_MODELS[t]).replace(iters=iters)  # noqa: E731
    small = presets.get("gpt-1.2b").replace(iters=iters)
    top = ts[-1]
    graphed = lambda t, name: presets.get(name).replace(
        gpus=t,
        tp=t,
        mbs=8,
        gbs=8,
        iters=GROUP_ITERS,  # noqa: E731
        cuda_graphs="te",
    )
    return {
        # the paper's batch 8
        "weak": [model(t).replace(gpus=t, tp=t, mbs=8, gbs=8) for t in ts],
        "weak_large": [model(t).replace(gpus=t, tp=t, mbs=16, gbs=32) for t in ts],
        "strong": [small.replace(gpus=t, tp=t, mbs=8, gbs=8) for t in ts],
        "profile": Profiled(small.replace(gpus=top, tp=top, mbs=8, gbs=8)),
        "tp_vs_dp": [
            small.replace(gpus=top, tp=t, mbs=8, gbs=8 * top, dist_opt=t < top) for t in ts
        ],
        "parity": [
            Parity(small.replace(gpus=t, tp=t, mbs=8, gbs=8, iters=PARITY_ITERS))
            for t in ts
            if t > 1
        ],
        # timed on one host, alternated, GPU-bound (CUDA graphs): strong scaling as Shoeybi et al.'s
        # Table 8, TP 2 eager (what graphs save), weak scaling's larger models; the largest TP
        # profiled. Then TP against DP at equal memory use
        "groups": {
            "tp": Group(
                "ch02.tp",
                [graphed(t, "gpt-1.2b") for t in ts]
                + [graphed(2, "gpt-1.2b").replace(cuda_graphs="none") for t in ts if t == 2]
                + [graphed(t, WEAK_TP_MODELS[t]) for t in ts if t > 1],
                profiled=len(ts) - 1,
            ),
            **_tp_vs_dp_group(small, ts),
        },
    }


def _tp_vs_dp_group(small, ts: list) -> dict:
    """ch02.tp-vs-dp, from 2 GPUs: on all of them, DP (with the distributed optimizer) at
    micro-batch 8, three micro-batches a step (a global batch with many divisors), against each TP
    at the largest micro-batch its predicted memory allows within DP's (TP frees the weights',
    gradients' and activations' share it splits), same global batch, CUDA graphs; the widest TP
    profiled."""
    from megalab import theory

    top = ts[-1]
    if top < 2:
        return {}
    dp = small.replace(
        gpus=top, mbs=8, gbs=24 * top, dist_opt=True, iters=GROUP_ITERS, cuda_graphs="te"
    )
    budget = theory.memory(dp, "H200")["total"]
    tps = [dp.replace(tp=t, dist_opt=t < top) for t in ts if t > 1]
    tps = [c.replace(mbs=largest_mbs_within(c, budget)) for c in tps]
    return {"tp_vs_dp": Group("ch02.tp-vs-dp", [dp, *tps], profiled=len(tps))}


def defining(gpus: int = 4, iters: int = ITERS) -> list:
    """The points that define the chapter's figures, re-measured by a quick reproduction beside the
    reference: the comparison groups' configurations as they were recorded (CUDA graphs, and the
    one eager run, at the groups' iterations): strong and weak scaling, then TP against DP at equal
    memory use; the memory runs (strong scaling at batch 8, without CUDA graphs); the widest
    layout's loss parity."""
    r = runs(gpus, iters)
    return [*r["groups"].values(), *r["strong"], *r["parity"][-1:]]
