"""Chapter 05, pipeline parallelism and interleaved (virtual) stages: its runs, by name.

Recorded (`runs`): loss parity of PP 4, PP 4 × VPP 2 and TP 2 × PP 2 on the Llama-style gpt-350m (local
spec, lr 1e-4, 4× H200; tools/gpu/plans/archive/stable-local.txt), whose layout records also hold each
pipeline stage's peak memory and the step time; gpt-8.3b on one H200, out of memory
(tools/gpu/plans/archive/oom.txt); and one PP 2 stage's worth of gpt-8.3b (36 layers, Transformer
Engine) alone on one H200 at the PP 2 sweep's global batch, m = 1, 2, 4, 8: the step without bubble.

Queued (`pending`): Shoeybi et al. 2019's gpt-8.3b (72 layers) with Transformer Engine, which theory puts
above one H200's memory at micro-batch 1 and well inside it on two pipeline stages: the micro-batch
sweep at a fixed global batch (the bubble), the same with v chunks per GPU, one stage's layers alone on
one GPU for the pipelines deeper than 2, per-stage memory (every run records it), a profiled step of
each schedule, and the layouts TP (+SP) × PP against each other on the same GPUs.
"""

from __future__ import annotations

from megalab import presets
from megalab.specs import ITERS, PARITY_ITERS, Parity, Profiled, degrees

MODEL = "gpt-8.3b"      # 72 layers: 36 per stage at PP 2, 18 at PP 4, 9 at PP 8
SEQS_PER_STAGE = 4      # global batch = 4 sequences per pipeline stage: 8 at PP 2 ... 32 at PP 8 (the seed's)
CHUNKS = (2, 3, 4, 6)   # v, where it divides the layers per stage
PROFILE_ITERS = 10


def _microbatches(gbs: int) -> list[int]:
    """m = 1, 2, 4, ... gbs: micro-batch size gbs/m, the global batch fixed."""
    return [m for m in (2 ** i for i in range(gbs.bit_length())) if gbs % m == 0]


def _one_stage(p: int, iters: int) -> list:
    """One PP p stage's layers of gpt-8.3b alone on one GPU, at PP p's global batch, for every m."""
    big = presets.get(MODEL).replace(iters=iters)
    gbs = SEQS_PER_STAGE * p
    return [big.replace(layers=big.layers // p, mbs=gbs // m, gbs=gbs) for m in _microbatches(gbs)]


def _llama_350m():
    """The Llama-style gpt-350m of the book's strict parity records (local spec, lr 1e-4)."""
    return presets.get("gpt-350m").replace(tied_embeddings=False, position="rope", norm="RMSNorm",
                                           activation="swiglu", lr=1e-4, mbs=4, gbs=16, iters=PARITY_ITERS,
                                           impl="local")


def runs(gpus: int = 2, iters: int = ITERS) -> dict:
    """What the records answer, whatever `gpus`: the 4-GPU parity layouts (4× H200), one out-of-memory run
    and PP 2's stage alone on one H200."""
    base = _llama_350m().replace(gpus=4)
    return {
        # 3. why the chapter's model needs a pipeline: gpt-8.3b on one H200, recorded out of memory (micro-batch 16)
        "one_gpu": presets.get(MODEL).replace(mbs=16, gbs=16, impl="local", iters=5),
        # 1. the step without bubble: PP 2's stage (36 layers) alone on one GPU, m = 1, 2, 4, 8 at global batch 8
        "one_stage": {2: _one_stage(2, iters)},
        # 6. still correct: PP 4, PP 4 × VPP 2, TP 2 × PP 2 against one GPU (mbs 4, gbs 16: m = 4)
        "parity": [Parity(base.replace(pp=4)), Parity(base.replace(pp=4, vpp=2)), Parity(base.replace(tp=2, pp=2))],
    }


def pending(gpus: int = 2, iters: int = ITERS) -> dict:
    """Queued for the chapter's next version; `gpus`: the largest pipeline (and the layouts' GPU count)."""
    big = presets.get(MODEL).replace(iters=iters)
    pps = [p for p in degrees(gpus) if p > 1]
    top = pps[-1] if pps else 1
    gbs = lambda p: SEQS_PER_STAGE * p  # noqa: E731
    pipe = lambda p, m, **kw: big.replace(gpus=p, pp=p, mbs=gbs(p) // m, gbs=gbs(p), **kw)  # noqa: E731
    chunks = lambda p: [v for v in CHUNKS if (big.layers // p) % v == 0]  # noqa: E731
    layout = lambda t, **kw: big.replace(gpus=top, tp=t, pp=top // t, sp=t > 1, mbs=1, gbs=gbs(top), **kw)  # noqa: E731
    recorded = {item.cfg.key for item in runs(gpus)["parity"]}
    parity = [Parity(_llama_350m().replace(gpus=p, pp=p, vpp=v)) for p in pps for v in (1, 2)]
    return {
        # 1. the bubble: step time against m at a fixed global batch, and one stage's layers alone on one GPU
        "bubble": {p: [pipe(p, m) for m in _microbatches(gbs(p))] for p in pps},
        "one_stage": {p: _one_stage(p, iters) for p in pps if p > 2},   # PP 2's is recorded (`runs`)
        # 2. interleaving: v chunks per GPU at m = p (the largest bubble) and m = 4p (mbs 1)
        "vpp": {p: {m: [pipe(p, m, vpp=v) for v in chunks(p)] for m in (p, 4 * p)} for p in pps},
        # 3. memory per stage: every run above records each rank's peak
        # 4. a schedule to see: one profiled step of 1F1B and of the interleaved schedule (m = 2p)
        "profile": [Profiled(pipe(top, 2 * top, iters=PROFILE_ITERS, vpp=v)) for v in (1, chunks(top)[0])]
        if pps else [],
        # 5. combining axes on `top` GPUs: TP (+SP) t × PP top/t, and PP with v = the smallest chunk count
        "layouts": ([layout(t) for t in degrees(top)]
                    + [layout(t, vpp=chunks(top // t)[0]) for t in degrees(top) if top // t > 1]) if pps else [],
        # 6. still correct at the pipelines not recorded yet (the Llama-style gpt-350m, its reference recorded;
        #    where legal: 24 layers take no PP 8 × VPP 2)
        "parity": [p for p in parity if p.cfg.key not in recorded and not p.cfg.problems()],
    }
