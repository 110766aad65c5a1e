"""Chapter 03, sequence parallelism and activation recomputation: its runs, by name.

Korthikanti et al. 2022 trained with dropout 0.1; so do these runs, so that the dropout masks their
formula counts exist. Activation memory per layer is measured as the difference between two layer
counts (the trainer's `act_gib`: memory allocated between the start of the first forward pass and its
loss), which cancels the embedding, the logits and the loss.
"""

from __future__ import annotations

from megalab import presets
from megalab.specs import ITERS, PARITY_ITERS, Fit, Parity, Profiled, degrees

LAYERS = (4, 8)   # two depths: their difference is what one layer keeps
FIT_ITERS = 5     # a fit probe needs the peak of a step, not a timing


def _pair(cfg) -> list:
    """The same run at both depths of LAYERS (per-layer activation memory is their difference / Δlayers)."""
    return [cfg.replace(layers=n) for n in LAYERS]


def runs(gpus: int = 2, iters: int = ITERS, gpu: str = "H200") -> dict:
    """gpt-1.2b's layer shape (h 1536, 16 heads) at seq 2048, where the attention scores (5·a·s/h = 107 units
    of s·b·h) outweigh the rest of a layer (34); gpt-8.3b for what fits. `gpus`: the TP degrees swept."""
    shape = presets.get("gpt-1.2b").replace(seq=2048, dropout=0.1, iters=iters, mbs=1, gbs=1)
    tops = [t for t in degrees(gpus) if t > 1]
    variants = lambda t: {  # noqa: E731  the chapter's four layouts at TP t
        "tp": dict(gpus=t, tp=t), "tp_sp": dict(gpus=t, tp=t, sp=True),
        "tp_sp_selective": dict(gpus=t, tp=t, sp=True, recompute="selective"),
        "tp_full": dict(gpus=t, tp=t, recompute="full")}
    big = presets.get("gpt-8.3b").replace(seq=2048, dropout=0.1, iters=iters)
    one = shape.replace(mbs=4, gbs=4)
    return {
        # 1. one layer, term by term: fused (TE) vs materialized (local) attention, and recompute
        "per_layer": {name: _pair(shape.replace(**kw)) for name, kw in {
            "te": {}, "local": dict(impl="local"), "local_selective": dict(impl="local", recompute="selective"),
            "te_full": dict(recompute="full")}.items()},
        # 2. TP replicates 10 s·b·h per layer; SP shards it
        "per_layer_tp": {t: {name: _pair(shape.replace(**kw)) for name, kw in variants(t).items()} for t in tops},
        "profile_tp": [Profiled(shape.replace(layers=8, mbs=4, gbs=4, gpus=t, tp=t, sp=sp)) for t in tops
                       for sp in (False, True)],
        # 3. what fits: the largest micro-batch of gpt-8.3b per layout
        "fit_mbs": {t: {name: Fit(big.replace(mbs=1, gbs=1, iters=FIT_ITERS, **kw), "mbs", gpu) for name, kw in variants(t).items()}
                    for t in tops},
        # 4. what recompute costs: one GPU (TE and local spec) and TP t with SP
        "recompute_1gpu": {impl: [one.replace(impl=impl, recompute=r) for r in ("none", "selective", "full")]
                           for impl in ("te", "local")},
        "recompute_tp": {t: [one.replace(gpus=t, tp=t, sp=True, mbs=8, gbs=8, recompute=r)
                             for r in ("none", "selective", "full")] for t in tops},
        "fit_mbs_1gpu": {r: Fit(one.replace(mbs=1, gbs=1, iters=FIT_ITERS, recompute=r), "mbs", gpu) for r in ("none", "full")},
        # 5. still correct: TP + SP + selective recompute against one GPU (TP + SP alone is recorded)
        "parity": [Parity(presets.get("gpt-350m").replace(
            tied_embeddings=False, position="rope", norm="RMSNorm", activation="swiglu", lr=1e-4, mbs=4, gbs=16,
            iters=PARITY_ITERS, gpus=t, tp=t, sp=True, recompute="selective")) for t in tops],
    }
