"""Chapter 04, context parallelism: long sequences across GPUs. Its runs, by name.

gpt-1.2b (the seed tutorial's CP model) with Transformer Engine attention, one sequence per micro-batch.
"""

from __future__ import annotations

from megalab import presets
from megalab.specs import ITERS, Fit, Parity, Profiled, degrees

SEQS = (2048, 4096, 8192, 16384, 32768, 65536)   # one GPU, up to the out-of-memory point
COMM = ("p2p", "all_gather", "a2a")              # a2a+p2p needs cp >= 4 (a2a inside pairs, p2p between)
BASE_SEQ = 8192                                  # weak scaling: seq = cp x BASE_SEQ
FIT_ITERS = 5                                    # a fit probe needs the peak of a step, not a timing


def runs(gpus: int = 2, iters: int = ITERS, gpu: str = "H200") -> dict:
    """`gpus`: the most CP ranks. Fits are sized for `gpu`; the 80 GB H100's one-GPU fit is recorded too."""
    base = presets.get("gpt-1.2b").replace(iters=iters, mbs=1, gbs=1)
    cps = degrees(gpus)
    top = cps[-1]
    long = 4 * BASE_SEQ  # strong scaling and the comm-type sweep reach this length
    comm_seqs = [s for s in (BASE_SEQ, 2 * BASE_SEQ, long)]
    return {
        # 1. one GPU: memory grows with s, attention FLOPs with s^2
        "seq_1gpu": [base.replace(seq=s) for s in SEQS],
        # 2. the longest sequence per CP degree (H200), and one GPU on the 80 GB H100
        "fit_seq": {cp: Fit(base.replace(gpus=cp, cp=cp, seq=2048 * cp, iters=FIT_ITERS), "seq", gpu, step=2048) for cp in cps},
        "fit_seq_80gb": Fit(base.replace(seq=2048, iters=FIT_ITERS), "seq", "H100", step=2048),
        # 3. scaling: fixed sequence (strong), sequence growing with CP (weak), CP against full recompute
        "strong": [base.replace(gpus=cp, cp=cp, seq=long) for cp in cps],
        "weak": [base.replace(gpus=cp, cp=cp, seq=BASE_SEQ * cp) for cp in cps],
        "recompute": [base.replace(seq=long, recompute="full")],
        # 4. the communication types across sequence lengths, and one profiled ring step
        "comm": {kind: [base.replace(gpus=top, cp=top, cp_comm=kind, seq=s) for s in comm_seqs]
                 for kind in COMM} if top > 1 else {},
        "profile": [Profiled(base.replace(gpus=top, cp=top, seq=2 * BASE_SEQ, iters=10))] if top > 1 else [],
        # 6. still correct: the recorded CP 4 parity of each comm type (Llama-style gpt-350m, lr 1e-4, seq 4096)
        "parity": [Parity(presets.get("gpt-350m").replace(
            tied_embeddings=False, position="rope", norm="RMSNorm", activation="swiglu", lr=1e-4, seq=4096,
            mbs=1, gbs=8, iters=50, gpus=4, cp=4, cp_comm=kind)) for kind in COMM],
    }
