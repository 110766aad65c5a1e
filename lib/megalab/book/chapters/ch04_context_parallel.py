"""Chapter 04, context parallelism: long sequences across GPUs. Its runs, by name.

gpt-1.2b (the seed tutorial's CP model) with Transformer Engine attention, one sequence per
micro-batch. `runs` holds what the committed records answer: one H200 (the sequence sweep, the
longest sequence, recomputation), one 80 GB H100's longest sequence, the CP 4 parity of each comm
type, and at the CP degrees in RECORDED_CP the longest sequence, the three comm types at three
lengths (strong and weak scaling among them), one profiled 16k-token step of each comm type in
PROFILED_COMM (every rank's kernel seconds and forward/backward times, rank 0's kernel timeline) and
a 16k-token parity; at the top degree, when it is in RECORDED_HIERARCHICAL (CP 4), the hierarchical
a2a+p2p at the same three lengths. `pending` keeps the runs at the other CP degrees (a2a+p2p among
them at CP >= 4), built by the same definitions so that their keys do not change when they move into
`runs` (`megalab experiments ch04 --gpus 8 --pending`), and at 8 GPUs the seed tutorial's 8xH100 CP
table row by row (global batch 8, none recorded yet).
"""

from __future__ import annotations

from megalab.runs import presets
from megalab.book.specs import (
    GROUP_ITERS,
    ITERS,
    PARITY_ITERS,
    Fit,
    Group,
    Parity,
    Profiled,
    degrees,
    llama_350m,
)

SEQS = (2048, 4096, 8192, 16384, 32768, 65536)  # one GPU, up to the out-of-memory point
# a2a+p2p needs cp >= 4 (a2a inside pairs, p2p between)
COMM = ("p2p", "all_gather", "a2a")
BASE_SEQ = 8192  # weak scaling: seq = cp x BASE_SEQ
# strong scaling, the comm sweep's end, CP against recompute
LONG_SEQ = 4 * BASE_SEQ
COMM_SEQS = (BASE_SEQ, 2 * BASE_SEQ, LONG_SEQ)  # the lengths of each comm type's runs
# a fit probe needs the peak of a step, not a timing
FIT_ITERS = 5
# CP degrees whose runs are recorded (2x and 4x H200)
RECORDED_CP = (2, 4)
HIERARCHICAL = "a2a+p2p"  # CP >= 4 only: a2a inside pairs, p2p between them
# CP degrees whose a2a+p2p runs are recorded (4x H200)
RECORDED_HIERARCHICAL = (4,)
# comm types whose profiled step is recorded at those degrees
PROFILED_COMM = ("p2p", "all_gather", "a2a")
# the seed tutorial's CP table ran on 8xH100: queued at gpus >= 8
SEED_GPUS = 8
# its global batch, one micro-batch on cp GPUs (DP 1)
SEED_GBS = 8
# its lengths: the CP sweep at the first, the comm types at both
SEED_SEQS = (4096, 16384)


# the comparison group's lengths and comm types on two GPUs (CP 2 against one GPU)
GROUP_SEQS = (BASE_SEQ, 2 * BASE_SEQ)
GROUP_COMM = ("p2p", "all_gather")


def _groups(gpus: int) -> dict:
    """CP's speed-up against sequence length per comm type, timed on one host, alternated, with
    CUDA graphs: one GPU and CP 2 with each of GROUP_COMM at each of GROUP_SEQS (6 runs); CP 2 p2p
    at the longer length profiled. From 2 GPUs on."""
    if gpus < 2:
        return {}
    base = _base(GROUP_ITERS).replace(cuda_graphs="te")
    one = [base.replace(seq=s) for s in GROUP_SEQS]
    cp2 = [
        base.replace(gpus=2, cp=2, cp_comm=kind, seq=s) for kind in GROUP_COMM for s in GROUP_SEQS
    ]
    return {"cp": Group("ch04.cp", one + cp2, profiled=len(one) + len(GROUP_SEQS) - 1)}


def _base(iters: int):
    return presets.get("gpt-1.2b").replace(iters=iters, mbs=1, gbs=1)


def _fit_seq(base, cp: int, gpu: str) -> Fit:
    """The longest sequence (multiples of 2048) that fits on `gpu` at CP `cp`."""
    return Fit(base.replace(gpus=cp, cp=cp, seq=2048 * cp, iters=FIT_ITERS), "seq", gpu, step=2048)


def _parity(gpus: int, cp_comm: str, seq: int = 4096, iters: int = 50) -> Parity:
    """CP against one GPU: Llama-style gpt-350m (RoPE, RMSNorm, SwiGLU, untied), lr 1e-4, global
    batch 8."""
    return Parity(
        llama_350m(seq=seq, mbs=1, gbs=8, iters=iters, gpus=gpus, cp=gpus, cp_comm=cp_comm)
    )


def _profiled(base, cp: int, kind: str) -> Profiled:
    """One profiled CP step at 16k tokens: rank 0's kernel timeline (attention and the comm type's
    kernels on their streams), every rank's kernel seconds by kind and forward/backward seconds."""
    return Profiled(base.replace(gpus=cp, cp=cp, cp_comm=kind, seq=2 * BASE_SEQ, iters=10))


def _hierarchical(base, cp: int) -> list:
    """The hierarchical a2a+p2p at CP `cp` (>= 4) at the comm types' three lengths: Megatron's
    hierarchical_context_parallel_sizes (2, cp/2), all-to-all inside pairs of GPUs, a p2p ring
    between them."""
    return [base.replace(gpus=cp, cp=cp, cp_comm=HIERARCHICAL, seq=s) for s in COMM_SEQS]


def _seed(base) -> dict:
    """The seed tutorial's CP table, row by row: CP 1/2/4/8 at 4k tokens, CP 8 with each comm type
    at 4k and 16k. All 8 sequences in one micro-batch, so activations shrink with CP: theory puts CP
    1 at 87 GiB (its out-of-memory on 80 GB without recompute; it fits an H200), CP 2 at 54. With 8
    micro-batches of one sequence CP 1 would need 29 GiB and the table's point would be lost."""
    seed = base.replace(mbs=SEED_GBS, gbs=SEED_GBS)
    return {
        "seed_cp": [seed.replace(gpus=cp, cp=cp, seq=SEED_SEQS[0]) for cp in degrees(SEED_GPUS)],
        "seed_comm": {
            kind: [
                seed.replace(gpus=SEED_GPUS, cp=SEED_GPUS, cp_comm=kind, seq=s) for s in SEED_SEQS
            ]
            for kind in COMM
        },
    }


def _cp_runs(base, cps: list[int], gpu: str, profiled=COMM) -> dict:
    """The runs with cp > 1 at the degrees `cps` (their top one for the comm types, the profile and
    the 16k parity): fit, strong and weak scaling, the comm types at three lengths, a profiled step
    of each of `profiled`."""
    top = cps[-1] if cps else 1
    return {
        # 2. the longest sequence per CP degree (H200)
        "fit_seq": {cp: _fit_seq(base, cp, gpu) for cp in cps},
        # 3. scaling: fixed sequence (strong; also CP's side of "CP vs recompute"), sequence growing
        # with CP (weak)
        "strong": [base.replace(gpus=cp, cp=cp, seq=LONG_SEQ) for cp in cps],
        "weak": [base.replace(gpus=cp, cp=cp, seq=BASE_SEQ * cp) for cp in cps],
        # 4. the communication types across sequence lengths, and one profiled step of each (5:
        # per-rank times)
        "comm": {
            kind: [base.replace(gpus=top, cp=top, cp_comm=kind, seq=s) for s in COMM_SEQS]
            for kind in COMM
        }
        if top > 1
        else {},
        "profile": [_profiled(base, top, kind) for kind in profiled] if top > 1 else [],
        # 6. still correct at a longer sequence, on the GPUs at hand
        "parity_long": [_parity(top, "p2p", seq=16384, iters=PARITY_ITERS)] if top > 1 else [],
    }


def runs(gpus: int = 2, iters: int = ITERS, gpu: str = "H200") -> dict:
    """What the records answer. `gpus`: the most CP ranks; the runs with cp > 1 come at the degrees
    up to it that are recorded (RECORDED_CP), the CP 4 parity records whatever `gpus` is. Fits are
    sized for `gpu`, the 80 GB one for the H100."""
    base = _base(iters)
    cps = [c for c in degrees(gpus)[1:] if c in RECORDED_CP]
    cp = _cp_runs(base, cps, gpu, PROFILED_COMM)
    if cps and cps[-1] in RECORDED_HIERARCHICAL:  # beside the three comm types, at their degree
        cp["comm"][HIERARCHICAL] = _hierarchical(base, cps[-1])
    return {
        # 1. one GPU: memory grows with s, attention FLOPs with s^2, up to the OOM (a recorded
        # status)
        "seq_1gpu": [base.replace(seq=s) for s in SEQS],
        # 2. the longest sequence on one GPU and per recorded CP degree, and one GPU on the 80 GB
        # H100
        "fit_seq": {1: _fit_seq(base, 1, gpu), **cp.pop("fit_seq")},
        "fit_seq_80gb": _fit_seq(base, 1, "H100"),  # the card most readers have
        # 3. the alternative to CP at the same length: one GPU with full activation recompute
        "recompute": [base.replace(seq=LONG_SEQ, recompute="full")],
        # strong, weak, comm (a2a+p2p too at CP 4), profile, parity_long at the recorded CP degrees
        **cp,
        # 6. still correct: the recorded CP 4 parity of each comm type
        "parity": [_parity(4, kind) for kind in COMM],
        "groups": _groups(gpus),
    }


def pending(gpus: int = 2, iters: int = ITERS, gpu: str = "H200") -> dict:
    """Runs with cp > 1 at the degrees not recorded yet, queued for the next version, and at the
    largest recorded degree the profiled steps of the comm types not in PROFILED_COMM (none now: all
    three are recorded at CP 2 and 4), and the hierarchical a2a+p2p at the top degree when it is >=
    4 and not in RECORDED_HIERARCHICAL (CP 8 now; CP 4's is recorded), and at gpus >= SEED_GPUS the
    seed tutorial's table (its CP 1, 2 and 4 rows too: their global batch of 8 is recorded at no
    degree); {} when nothing is queued. Their cp = 1 points and the recorded runs are in `runs`."""
    base = _base(iters)
    cps = [c for c in degrees(gpus)[1:] if c not in RECORDED_CP]
    out = _cp_runs(base, cps, gpu) if cps else {}
    done = [c for c in degrees(gpus)[1:] if c in RECORDED_CP]
    later = (
        [_profiled(base, done[-1], kind) for kind in COMM if kind not in PROFILED_COMM]
        if done
        else []
    )
    if later:
        out["profile"] = later + out.get("profile", [])
    top = degrees(gpus)[-1]
    # a2a inside pairs, p2p between them, at three lengths
    if top >= 4 and top not in RECORDED_HIERARCHICAL:
        out.setdefault("comm", {})[HIERARCHICAL] = _hierarchical(base, top)
    if gpus >= SEED_GPUS:  # the seed's host size; at 2 and 4 GPUs its CP 8 rows could not run
        out |= _seed(base)
    return out


def defining(gpus: int = 2, iters: int = ITERS, gpu: str = "H200") -> list:
    """The points that define the chapter's figures, re-measured by a quick reproduction beside the
    reference: memory against length (one GPU at 8k and 32k tokens), CP's strong scaling at 32k
    (each recorded degree), each comm type at 16k tokens at the top degree, and the CP group its
    speed-up figure reads."""
    r = runs(gpus, iters, gpu)
    one = [c for c in r["seq_1gpu"] if c.seq in (BASE_SEQ, LONG_SEQ)]
    comm = [c for rs in r.get("comm", {}).values() for c in rs if c.seq == 2 * BASE_SEQ]
    return [*one, *r.get("strong", []), *comm, *r["groups"].values()]
