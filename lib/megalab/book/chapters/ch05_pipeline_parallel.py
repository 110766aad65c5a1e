"""Chapter 05, pipeline parallelism and interleaved (virtual) stages: its runs, by name.

Recorded (`runs`): loss parity of PP 4, PP 4 × VPP 2 and TP 2 × PP 2 on the Llama-style gpt-350m
(local spec, lr 1e-4, 4× H200), whose layout records also hold each pipeline stage's peak memory and
the step time; gpt-8.3b on one H200, out of memory; and gpt-8.3b's pipelines (`RECORDED`, per degree
p), each timed run alone on its host (`megalab experiments ch05 --gpus 4` prints their plan):
- PP 2: one stage's worth (36 layers, Transformer Engine) alone on a one-H200 machine at the sweep's
  global batch, m = 1, 2, 4, 8: the step without bubble; on two GPUs of a 4× H200 host, the bubble sweep
  m = 1, 2, 4, 8, v = 2 at m = 2 and, at micro-batch 1, v = 3, 4, 6 at m = 2 and v = 2, 3, 4, 6 at m = 8;
  a profiled step of 1F1B and of the interleaved schedule at m = 4 (each record keeps its measured
  schedule, `profile.schedule`); the layouts PP 2, TP 2 + SP and PP 2 × VPP 2 (the m = 8, v = 2 run) on
  the same two GPUs; PP 2 and PP 2 × VPP 2 parity.
- PP 4, on a 4× H200 host: one stage's worth (18 layers) alone on one of its H200s, m = 1, 2, 4, 8,
16; the
  bubble sweep m = 1, 2, 4, 8, 16 (m = 16 at micro-batch 1); a profiled step of 1F1B and of PP 4 × VPP 2 at
  m = 8; v = 2, 3, 6 at m = 4 and 16; the layouts PP 4 and PP 4 × VPP 2 (the m = 16 runs), TP 2 + SP × PP 2
  and TP 4 + SP at micro-batch 1; TP 2 + SP × PP 2 × VPP 2, whose record holds its 20 steps and the
  trainer's summary but status timeout: its ranks hung at exit until the time limit (`results.trained`
  counts it as trained).

Comparison groups (`runs()["groups"]`: gpt-1.2b PP 2, micro-batch 4, CUDA graphs, each run alone on
one host, alternated): `ch05.vpp`, 1F1B against VPP 2 and 4 at m = 8, recorded; `ch05.m-sweep`, 1F1B
at m = 2, 4, 8, 16 (`SWEEP_M`), three rounds and a profiled step at m = 2, recorded on a 2× H200
host.

Queued (`pending`): the rest of the chapter's plan (Shoeybi et al. 2019's gpt-8.3b, 72 layers, with
Transformer Engine, which theory puts above one H200's memory at micro-batch 1 and well inside it on
two pipeline stages): PP 8's sweeps, chunk counts, stage alone, profiled steps and layouts; the seed
tutorial's TP+SP 2 × PP 4 chunk sweep on 8 GPUs (`SEED_VPP`, the one row of its 8× H100 table the
sweeps do not hold); and parity of the pipelines not recorded yet. The four-GPU plan is recorded
whole.
"""

from __future__ import annotations

from megalab import theory
from megalab.runs import presets
from megalab.book.specs import (
    GROUP_ITERS,
    ITERS,
    PARITY_ITERS,
    Group,
    Parity,
    Profiled,
    degrees,
    items,
    llama_350m,
)

MODEL = "gpt-8.3b"  # 72 layers: 36 per stage at PP 2, 18 at PP 4, 9 at PP 8
# global batch = 4 sequences per pipeline stage: 8 at PP 2 ... 32 at PP 8 (the seed's)
SEQS_PER_STAGE = 4
CHUNKS = (2, 3, 4, 6)  # v, where it divides the layers per stage
PROFILE_ITERS = 10
# The seed tutorial's TP+SP 2 × PP 4 row on 8 GPUs at m = 4 (micro-batch 8, dp 1): its "VPP 3, 6, 9,
# 18" read as chunks per stage (v = 3, 6, 9, 18 of the 18 layers per stage) and as its flag counted
# them, layers per chunk (v = 6, 3, 2, 1): both readings are queued, so the row matches whichever
# the table meant, and v = 1 is the baseline. Legal in Megatron Core 0.16.1: the interleaved
# schedule groups pp micro-batches by default, and m = 4 = pp.
SEED_VPP = (1, 2, 3, 6, 9, 18)
SEED_M = 4
# What each recorded pipeline degree p of gpt-8.3b answers (its stage alone on one GPU: every m; its
# profiled steps: 1F1B and the fewest chunks at m = 2p): "m", the bubble sweep's micro-batch counts;
# "vpp", m -> the chunk counts v recorded; "layouts", (tp, vpp) of the layouts recorded on p GPUs.
RECORDED = {
    2: {
        "m": (1, 2, 4, 8),
        "vpp": {2: (2, 3, 4, 6), 8: (2, 3, 4, 6)},
        "layouts": ((1, 1), (2, 1), (1, 2)),
    },  # PP 2, TP 2 + SP, PP 2 × VPP 2
    4: {
        "m": (1, 2, 4, 8, 16),
        "vpp": {4: (2, 3, 6), 16: (2, 3, 6)},
        # PP 4, TP 2 + SP × PP 2, TP 4 + SP, PP 4 × VPP 2, TP 2 + SP × PP 2 × VPP 2 (its 20 steps,
        # stopped at exit)
        "layouts": ((1, 1), (2, 1), (4, 1), (1, 2), (2, 2)),
    },
}
RECORDED_PP = tuple(RECORDED)  # (2, 4)
# The bubble timed as a comparison group: gpt-1.2b PP 2 (1F1B, CUDA graphs, micro-batch 4) at m
# micro-batches per step, global batch m × 4; time per sample against (p − 1)/m.
SWEEP_M = (2, 4, 8, 16)


def _microbatches(gbs: int) -> list[int]:
    """m = 1, 2, 4, ... gbs: micro-batch size gbs/m, the global batch fixed."""
    return [m for m in (2**i for i in range(gbs.bit_length())) if gbs % m == 0]


def _one_stage(p: int, iters: int) -> list:
    """One PP p stage's layers of gpt-8.3b alone on one GPU, at PP p's global batch, for every m."""
    big = presets.get(MODEL).replace(iters=iters)
    gbs = SEQS_PER_STAGE * p
    return [big.replace(layers=big.layers // p, mbs=gbs // m, gbs=gbs) for m in _microbatches(gbs)]


def _rounds(p: int, ms) -> int:
    """Rounds a 1F1B sweep over the micro-batch counts `ms` needs (specs.Group): 3 where the time
    per sample theory predicts, ∝ 1 + (p−1)/m, differs by under 10% between neighbours, else 2. At
    p = 2, m = 2, 4, 8, 16: 20%, 11% and 5.9%, so 3."""
    per_sample = [1 + theory.bubble_over_ideal(p, m) for m in ms]
    return 3 if min(a / b - 1 for a, b in zip(per_sample, per_sample[1:])) < 0.10 else 2


def _llama_350m():
    """The Llama-style gpt-350m of the book's strict parity records (local spec, lr 1e-4)."""
    return llama_350m(mbs=4, gbs=16, iters=PARITY_ITERS, impl="local")


def _plan(gpus: int = 2, iters: int = ITERS) -> dict:
    """Every gpt-8.3b pipeline run of the chapter up to `gpus` (the largest pipeline, and the
    layouts' GPU count), recorded or queued: `runs` takes the recorded ones, `pending` the rest.
    From 8 GPUs on, the seed tutorial's TP+SP 2 × PP 4 chunk sweep too ("seed_vpp"); below 8 the
    plan has no such key."""
    big = presets.get(MODEL).replace(iters=iters)
    pps = [p for p in degrees(gpus) if p > 1]
    tops = pps[-1:]  # the largest pipeline: its profiled steps and layouts
    gbs = lambda p: SEQS_PER_STAGE * p  # noqa: E731
    pipe = lambda p, m, **kw: big.replace(gpus=p, pp=p, mbs=gbs(p) // m, gbs=gbs(p), **kw)  # noqa: E731
    chunks = lambda p: [v for v in CHUNKS if (big.layers // p) % v == 0]  # noqa: E731
    layout = lambda g, t, **kw: big.replace(
        gpus=g, tp=t, pp=g // t, sp=t > 1, mbs=1, gbs=gbs(g), **kw
    )  # noqa: E731
    plan = {
        # 1. the bubble: step time against m at a fixed global batch, and one stage's layers alone
        # on one GPU
        "bubble": {p: [pipe(p, m) for m in _microbatches(gbs(p))] for p in pps},
        "one_stage": {p: _one_stage(p, iters) for p in pps},
        # 2. interleaving: v chunks per GPU at m = p (the largest bubble) and m = 4p (mbs 1)
        "vpp": {p: {m: [pipe(p, m, vpp=v) for v in chunks(p)] for m in (p, 4 * p)} for p in pps},
        # 3. memory per stage: every run above records each rank's peak
        # 4. a schedule to see: one profiled step of 1F1B and of the interleaved schedule (m = 2p),
        # largest p
        "profile": {
            p: [Profiled(pipe(p, 2 * p, iters=PROFILE_ITERS, vpp=v)) for v in (1, chunks(p)[0])]
            for p in tops
        },
        # 5. combining axes on the largest pipeline's g GPUs: TP (+SP) t × PP g/t, and PP with v =
        # the fewest chunks
        "layouts": {
            g: [layout(g, t) for t in degrees(g)]
            + [layout(g, t, vpp=chunks(g // t)[0]) for t in degrees(g) if g // t > 1]
            for g in tops
        },
        # 6. still correct (the Llama-style gpt-350m, its reference recorded; where legal: 24 layers
        # take
        #    no PP 8 × VPP 2)
        "parity": [
            q
            for q in (
                Parity(_llama_350m().replace(gpus=p, pp=p, vpp=v)) for p in pps for v in (1, 2)
            )
            if not q.cfg.problems()
        ],
    }
    # 7. the seed tutorial's TP+SP 2 × PP 4 × VPP v at m = 4, on its 8 GPUs (dp 1: mbs = gbs / m)
    if gpus >= 8:
        plan["seed_vpp"] = {
            8: {SEED_M: [layout(8, 2, vpp=v).replace(mbs=gbs(8) // SEED_M) for v in SEED_VPP]}
        }
    return plan


def runs(gpus: int = 2, iters: int = ITERS) -> dict:
    """What the records answer, whatever `gpus`: the 4-GPU parity layouts (4× H200), one
    out-of-memory run, and per recorded pipeline p of gpt-8.3b (`RECORDED`): its stage alone on one
    H200, the bubble sweep's recorded m, the chunk counts, profiled steps and layouts recorded; PP
    2's parity."""
    base = _llama_350m().replace(gpus=4)
    # p is each plan's largest pipeline: its profiles, layouts
    plans = {p: _plan(p, iters) for p in RECORDED_PP}
    pipe2 = presets.get("gpt-1.2b").replace(
        gpus=2, pp=2, mbs=4, gbs=32, iters=GROUP_ITERS, cuda_graphs="te"
    )
    return {
        # 3. why the chapter's model needs a pipeline: gpt-8.3b on one H200, recorded out of memory
        # (micro-batch 16)
        "one_gpu": presets.get(MODEL).replace(mbs=16, gbs=16, impl="local", iters=5),
        # 1. the step without bubble: a PP p stage's layers alone on one GPU, every m at p's global
        # batch
        "one_stage": {p: plans[p]["one_stage"][p] for p in RECORDED_PP},
        # 1. the bubble measured: PP p at the recorded m, global batch 4p
        "bubble": {
            p: [c for c in plans[p]["bubble"][p] if c.num_microbatches in RECORDED[p]["m"]]
            for p in RECORDED_PP
        },
        # 2. interleaving measured: PP p × VPP v at m = p (the largest bubble the schedule allows)
        # and m = 4p (mbs 1)
        "vpp": {
            p: {
                m: [c for c in plans[p]["vpp"][p][m] if c.vpp in vs]
                for m, vs in RECORDED[p]["vpp"].items()
            }
            for p in RECORDED_PP
            if RECORDED[p]["vpp"]
        },
        # 4. the measured schedules: one profiled step of 1F1B and of PP p × VPP 2, m = 2p
        "profile": {p: plans[p]["profile"][p] for p in RECORDED_PP},
        # 5. layouts on PP p's p GPUs at micro-batch 1 (PP 2: PP 2, TP 2 + SP, PP 2 × VPP 2; PP 4:
        # every one)
        "layouts": {
            p: [c for c in plans[p]["layouts"][p] if (c.tp, c.vpp) in RECORDED[p]["layouts"]]
            for p in RECORDED_PP
            if RECORDED[p]["layouts"]
        },
        # 6. still correct: PP 4, PP 4 × VPP 2, TP 2 × PP 2 against one GPU (mbs 4, gbs 16: m = 4)
        # ...
        "parity": [
            Parity(base.replace(pp=4)),
            Parity(base.replace(pp=4, vpp=2)),
            Parity(base.replace(tp=2, pp=2)),
        ],
        # ... and PP 2, PP 2 × VPP 2 on two GPUs against the same one-GPU reference
        "parity_pp2": [q for q in plans[2]["parity"] if q.cfg.pp == 2],
        # timed on one host, alternated, with CUDA graphs: gpt-1.2b PP 2 at micro-batch 4
        "groups": {
            # 2. interleaving against 1F1B at m = 8: v = 1, 2, 4; v = 2 profiled
            "vpp": Group("ch05.vpp", [pipe2.replace(vpp=v) for v in (1, 2, 4)], profiled=1),
            # 1. the bubble: 1F1B at m = 2, 4, 8, 16 (m = 8 is ch05.vpp's v = 1); m = 2, the
            # largest bubble, profiled
            "m_sweep": Group(
                "ch05.m-sweep",
                [pipe2.replace(gbs=m * pipe2.mbs * pipe2.dp) for m in SWEEP_M],
                rounds=_rounds(pipe2.pp, SWEEP_M),
                profiled=0,
            ),
        },
    }


def pending(gpus: int = 2, iters: int = ITERS, recorded: bool = False) -> dict:
    """Queued for the chapter's next version: the chapter's plan up to `gpus` less what `runs` reads
    (the same configs, keys). recorded=True keeps the recorded runs in: the whole plan, in the same
    shape, for the predictions drawn for every run whether measured yet or not."""
    if recorded:
        return _plan(gpus, iters)
    done = {(type(i).__name__, getattr(i, "cfg", i).key) for i in items(runs(gpus, iters))}
    return _without(_plan(gpus, iters), done)


def _without(value, done: set):
    """`value` (plan's nested dicts and lists) without the items in `done` ((type name, key) pairs)
    and without the dicts and lists left empty."""
    if isinstance(value, dict):
        kept = {k: _without(v, done) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ({}, [])}
    if isinstance(value, list):
        kept = [_without(v, done) for v in value]
        return [v for v in kept if v not in ({}, [])]
    return value if (type(value).__name__, getattr(value, "cfg", value).key) not in done else []


def defining(gpus: int = 2, iters: int = ITERS) -> list:
    """The points that define the chapter's figures, re-measured by a quick reproduction beside the
    reference: the bubble at the widest pipeline (every other micro-batch count, the fewest and the
    most among them: the trend, inside the 10 minutes a quick chapter has on 4 GPUs), the first loss
    parity, and one round of the interleaving comparison group with its CUDA-graph settings."""
    r = runs(gpus, iters)
    widest = max((k for k in r["bubble"] if k <= gpus), default=None)  # none on 1 GPU
    bubble = r["bubble"][widest] if widest else []
    bubble = [*bubble[:-1:2], *bubble[-1:]]
    return [*bubble, *r["parity"][:1], *[g for n, g in r["groups"].items() if n == "vpp"]]
