"""Chapter 04, context parallelism: long sequences across GPUs. Its runs, by name.

gpt-1.2b (the seed tutorial's CP model) with Transformer Engine attention, one sequence per micro-batch.
`runs` holds what the committed records answer (one H200, one 80 GB H100's longest sequence, and the 4-GPU
parity); `pending` the runs with cp > 1 queued for the chapter's next version
(`megalab experiments ch04 --gpus 2 --pending`).
"""

from __future__ import annotations

from megalab import presets
from megalab.specs import ITERS, PARITY_ITERS, Fit, Parity, Profiled, degrees

SEQS = (2048, 4096, 8192, 16384, 32768, 65536)   # one GPU, up to the out-of-memory point
COMM = ("p2p", "all_gather", "a2a")              # a2a+p2p needs cp >= 4 (a2a inside pairs, p2p between)
BASE_SEQ = 8192                                  # weak scaling: seq = cp x BASE_SEQ
LONG_SEQ = 4 * BASE_SEQ                          # strong scaling, the comm sweep's end, CP against recompute
FIT_ITERS = 5                                    # a fit probe needs the peak of a step, not a timing


def _base(iters: int):
    return presets.get("gpt-1.2b").replace(iters=iters, mbs=1, gbs=1)


def _fit_seq(base, cp: int, gpu: str) -> Fit:
    """The longest sequence (multiples of 2048) that fits on `gpu` at CP `cp`."""
    return Fit(base.replace(gpus=cp, cp=cp, seq=2048 * cp, iters=FIT_ITERS), "seq", gpu, step=2048)


def _parity(gpus: int, cp_comm: str, seq: int = 4096, iters: int = 50) -> Parity:
    """CP against one GPU: Llama-style gpt-350m (RoPE, RMSNorm, SwiGLU, untied), lr 1e-4, global batch 8."""
    return Parity(presets.get("gpt-350m").replace(
        tied_embeddings=False, position="rope", norm="RMSNorm", activation="swiglu", lr=1e-4, seq=seq,
        mbs=1, gbs=8, iters=iters, gpus=gpus, cp=gpus, cp_comm=cp_comm))


def runs(gpus: int = 2, iters: int = ITERS, gpu: str = "H200") -> dict:
    """What the records answer. `gpus`: the most CP ranks (the recorded series need one GPU; the parity
    records are CP 4 on 4× H200 whatever `gpus` is). Fits are sized for `gpu`, the 80 GB one for the H100."""
    base = _base(iters)
    return {
        # 1. one GPU: memory grows with s, attention FLOPs with s^2, up to the OOM (a recorded status)
        "seq_1gpu": [base.replace(seq=s) for s in SEQS],
        # 2. the longest sequence on one GPU (the CP > 1 searches are pending), and on the 80 GB H100
        "fit_seq": {1: _fit_seq(base, 1, gpu)},
        "fit_seq_80gb": _fit_seq(base, 1, "H100"),   # the card most readers have
        # 3. the alternative to CP at the same length: one GPU with full activation recompute
        "recompute": [base.replace(seq=LONG_SEQ, recompute="full")],
        # 6. still correct: the recorded CP 4 parity of each comm type
        "parity": [_parity(4, kind) for kind in COMM],
    }


def pending(gpus: int = 2, iters: int = ITERS, gpu: str = "H200") -> dict:
    """Runs with cp > 1, queued for the next version; their cp = 1 points are in `runs` (seq_1gpu holds
    the strong and weak baselines, fit_seq and fit_seq_80gb the one-GPU searches)."""
    base = _base(iters)
    cps = degrees(gpus)[1:]
    top = cps[-1] if cps else 1
    comm_seqs = (BASE_SEQ, 2 * BASE_SEQ, LONG_SEQ)
    return {
        # 2. the longest sequence per CP degree (H200)
        "fit_seq": {cp: _fit_seq(base, cp, gpu) for cp in cps},
        # 3. scaling: fixed sequence (strong; also CP's side of "CP vs recompute"), sequence growing with CP (weak)
        "strong": [base.replace(gpus=cp, cp=cp, seq=LONG_SEQ) for cp in cps],
        "weak": [base.replace(gpus=cp, cp=cp, seq=BASE_SEQ * cp) for cp in cps],
        # 4. the communication types across sequence lengths, and one profiled ring step
        "comm": {kind: [base.replace(gpus=top, cp=top, cp_comm=kind, seq=s) for s in comm_seqs]
                 for kind in COMM} if top > 1 else {},
        "profile": [Profiled(base.replace(gpus=top, cp=top, seq=2 * BASE_SEQ, iters=10))] if top > 1 else [],
        # 6. still correct at a longer sequence, on the GPUs at hand
        "parity_long": [_parity(top, "p2p", seq=16384, iters=PARITY_ITERS)] if top > 1 else [],
    }
