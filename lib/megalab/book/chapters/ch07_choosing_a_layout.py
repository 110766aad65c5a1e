"""Chapter 07, choosing a layout: the cases the layout search ranks, the runs that check it, and the
records of chapters 01-06 that the decision guide quotes.

The chapter's first section, the step-time model against measurement, reads the book's records
through `calibration.calibrate()` directly (every usable H200 run record of chapters 01-06), not
through `runs`.

`runs` holds what the records answer: the runs of chapters 01-06 that the decision guide quotes,
each defined by its own chapter's module (so their keys are the recorded ones), at the GPU counts
they were recorded on, whatever `gpus` is; the cases measured on `gpus` GPUs ("cases"); and the
cases measured at every GPU count ("cases_by_gpus": RECORDED_CASES, all three cases on 2 and on 4
GPUs). `pending` holds, per case (where CHOSEN holds the GPU count, only those not yet measured:
none today), the runs that measure the ranking: the search's top TOP layouts and OTHERS layouts
chosen to test the model where the top ones do not reach (`_choose`). On 2 and 4 GPUs they are
frozen in CHOSEN: chosen once, before any of them ran, so that their records keep answering after
the calibration (and with it the ranking) moves. Other GPU counts (8) are chosen by today's search
when asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from megalab.runs import presets
from megalab.book.chapters import (
    ch01_data_parallel,
    ch02_tensor_parallel,
    ch03_sequence_parallel,
    ch04_context_parallel,
    ch05_pipeline_parallel,
    ch06_expert_parallel,
)
from megalab.book.specs import ITERS

TOP = 5  # the search's best layouts, measured per case
OTHERS = 3  # further layouts per case, chosen by PROBES
LONG_ITERS = 6  # the long-context steps take ~30 s: 3 warm-up steps dropped, 3 kept
# the dense 8 B steps take ~7 s: 3 warm-up steps dropped, 5 kept (24 runs at 20 steps: ~5,800 s)
DENSE_ITERS = 8


@dataclass(frozen=True)
class _Case:
    """One training job to lay out: a preset at a global batch and sequence length."""

    preset: str
    seq: int
    gbs: int
    what: str  # one line for the reader
    iters: int = ITERS
    limits: dict = field(default_factory=dict)  # search limits (axes the search must not vary)

    def base(self, iters: int | None = None):
        """The model at this case's batch and sequence, on one GPU (the search lays it out)."""
        return presets.get(self.preset).replace(
            seq=self.seq, gbs=self.gbs, iters=iters or self.iters
        )


CASES = {
    "dense_4k": _Case("llama3-8b", 4096, 32, "a dense 8 B model at 4k tokens", iters=DENSE_ITERS),
    "long_32k": _Case(
        "llama3-8b", 32768, 8, "the same model at 32k tokens (long context)", iters=LONG_ITERS
    ),
    "moe": _Case(
        "olmoe-1b-7b", 4096, 32, "a mixture of experts, 7 B parameters of which 1.3 B active"
    ),
}

# (key, what it tests, which layouts qualify): the OTHERS picks, in this order, each the best-ranked
# layout that qualifies, skipped when a layout already picked qualifies
PROBES = (
    ("tp", "the best layout with tensor parallelism", lambda c: c.tp > 1),
    (
        "dp_experts",
        "the best without expert parallelism (experts replicated)",
        lambda c: c.experts > 0 and c.ep == 1,
    ),
    ("pp_mbs1", "the best pipeline at micro-batch 1", lambda c: c.pp > 1 and c.mbs == 1),
    ("full_recompute", "the best with full recomputation", lambda c: c.recompute == "full"),
    ("no_full_recompute", "the best without full recomputation", lambda c: c.recompute != "full"),
    ("cp", "the best with context parallelism", lambda c: c.cp > 1),
    (
        "replicated_optimizer",
        "the best without the distributed optimizer",
        lambda c: not c.dist_opt,
    ),
    ("sp", "the best with tensor and sequence parallelism", lambda c: c.sp),
    ("pp_1f1b", "the best pipeline without interleaving", lambda c: c.pp > 1 and c.vpp == 1),
)
WHY = {key: text for key, text, _ in PROBES} | {
    f"top{i}": f"predicted #{i}" for i in range(1, TOP + 1)
}

# per GPU count, the cases whose eight runs are recorded, each run alone on its host (on 2 GPUs, the
# MoE case's second four on two GPUs of a 4×H200 host; some picks out of memory: an outcome the
# chapter reads too)
RECORDED_CASES = {2: ("dense_4k", "moe", "long_32k"), 4: ("dense_4k", "moe", "long_32k")}
# CPU cores of the 2×H200 host (link probe "none") whose records predate env's cpu_count
UNRECORDED_CPU_COUNT = 32

# per GPU count, per case, the layouts measured (keyword arguments over the case's base), frozen
# once chosen so that their records keep answering after the calibration (and with it the ranking)
# moves
CHOSEN = {
    # 2 GPUs: chosen by _choose(name, 2) on the H200 records of the chapter's first version, before
    # any ran
    2: {
        "dense_4k": {
            "top1": dict(mbs=1, dist_opt=True),
            "top2": dict(mbs=2, dist_opt=True),
            "top3": dict(pp=2, vpp=4, mbs=1),
            "top4": dict(pp=2, vpp=2, mbs=1),
            "top5": dict(pp=2, vpp=4, mbs=2),
            "tp": dict(tp=2, mbs=4),
            "full_recompute": dict(mbs=1, recompute="full", dist_opt=True),
            "cp": dict(cp=2, mbs=4, dist_opt=True),
        },
        "long_32k": {
            "top1": dict(mbs=1, recompute="full", dist_opt=True),
            "top2": dict(cp=2, mbs=2, recompute="full", dist_opt=True),
            "top3": dict(pp=2, vpp=16, mbs=1, recompute="full"),
            "top4": dict(cp=2, mbs=1, recompute="full", dist_opt=True),
            "top5": dict(pp=2, vpp=8, mbs=1, recompute="full"),
            "tp": dict(tp=2, mbs=2, recompute="full"),
            "sp": dict(tp=2, sp=True, mbs=4, recompute="full"),
            "pp_1f1b": dict(pp=2, mbs=1, recompute="full"),
        },
        "moe": {
            "top1": dict(ep=2, mbs=8, dist_opt=True),
            "top2": dict(ep=2, mbs=8),
            "top3": dict(ep=2, mbs=8, recompute="selective", dist_opt=True),
            "top4": dict(ep=2, mbs=8, recompute="selective"),
            "top5": dict(cp=2, ep=2, mbs=16, dist_opt=True),
            "tp": dict(tp=2, ep=2, sp=True, mbs=16),
            "dp_experts": dict(mbs=8, dist_opt=True),
            "pp_mbs1": dict(pp=2, vpp=4, mbs=1),
        },
    },
    # 4 GPUs: chosen by _choose(name, 4) on the H200 records of chapters 01-06, before any of them
    # ran
    4: {
        "dense_4k": {
            "top1": dict(dist_opt=True),
            "top2": dict(mbs=2, dist_opt=True),
            "top3": dict(pp=2, vpp=4, dist_opt=True),
            "top4": dict(pp=2, vpp=2, dist_opt=True),
            "top5": dict(pp=2, vpp=8, mbs=2, dist_opt=True),
            "tp": dict(tp=2, mbs=8, dist_opt=True),
            "full_recompute": dict(recompute="full", dist_opt=True),
            "cp": dict(cp=2, mbs=4, dist_opt=True),
        },
        "long_32k": {
            "top1": dict(pp=2, vpp=8, cp=2, dist_opt=True),
            "top2": dict(pp=2, vpp=8, cp=2),
            "top3": dict(pp=2, vpp=16, cp=2, dist_opt=True),
            "top4": dict(pp=2, vpp=4, cp=2, dist_opt=True),
            "top5": dict(tp=2, dist_opt=True),
            "full_recompute": dict(recompute="full", dist_opt=True),
            "sp": dict(tp=2, sp=True, dist_opt=True),
            "pp_1f1b": dict(pp=2, cp=2, dist_opt=True),
        },
        "moe": {
            "top1": dict(ep=4, mbs=8, dist_opt=True),
            "top2": dict(ep=4, mbs=8),
            "top3": dict(ep=4, mbs=8, recompute="selective", dist_opt=True),
            "top4": dict(ep=2, mbs=8, dist_opt=True),
            "top5": dict(ep=4, mbs=8, recompute="selective"),
            "tp": dict(tp=2, ep=4, sp=True, mbs=16, dist_opt=True),
            "dp_experts": dict(mbs=8, dist_opt=True),
            "pp_mbs1": dict(pp=2, vpp=4, ep=2, dist_opt=True),
        },
    },
}


def _choose(name: str, gpus: int, model=None, store=None, iters: int | None = None) -> dict:
    """The layouts of case `name` to measure on `gpus` GPUs, by key (top1..top5, then PROBES' keys):
    the best TOP of `search.search` (ranked by `model`, e.g. calibration.calibrate(); None: the
    roofline) and OTHERS chosen by PROBES. {} when no layout is predicted to fit."""
    from megalab.predict import search

    case = CASES[name]
    ranked = [
        c.cfg
        for c in search.search(
            case.base(iters), gpus, top=None, model=model, store=store, **case.limits
        )
    ]
    picked = {f"top{i + 1}": cfg for i, cfg in enumerate(ranked[:TOP])}
    for key, _, qualifies in PROBES:
        if len(picked) == TOP + OTHERS:
            break
        if any(qualifies(c) for c in picked.values()):
            continue
        best = next((c for c in ranked if qualifies(c) and c not in picked.values()), None)
        if best is not None:
            picked[key] = best
    return picked


def _frozen(names, gpus: int, iters: int) -> dict:
    """Per case of `names`, its CHOSEN layouts on `gpus` GPUs as RunConfigs, by key."""
    return {
        name: {
            key: CASES[name].base(_iters(name, iters)).replace(gpus=gpus, **kw)
            for key, kw in CHOSEN[gpus][name].items()
        }
        for name in names
    }


def runs(gpus: int = 2, iters: int = ITERS) -> dict:
    """What the records answer: the decision guide's runs, from the chapters that recorded them (4×
    H200 for chapters 01 and 02, one H200 otherwise, 4× H200 for the parity layouts), whatever
    `gpus` is; the cases measured on `gpus` GPUs ("cases"), and those of every GPU count of
    RECORDED_CASES ("cases_by_gpus")."""
    ch01, ch02 = ch01_data_parallel.runs(4, iters), ch02_tensor_parallel.runs(4, iters)
    ch03, ch04 = ch03_sequence_parallel.runs(2, iters), ch04_context_parallel.runs(2, iters)
    ch05, ch06 = ch05_pipeline_parallel.runs(2, iters), ch06_expert_parallel.runs(2, iters)
    long_seq = ch04_context_parallel.LONG_SEQ
    by_gpus = {n: _frozen(names, n, iters) for n, names in RECORDED_CASES.items()}
    return {
        "guide": {
            # mbs 1 against the largest that fits
            "micro_batch": [ch01["one_gpu"], ch01["fit_mbs"]],
            # DP 4, optimizer replicated / sharded
            "dist_opt": [ch01["weak"][-1], ch01["dist_opt"][-1]],
            # layers that fit, 1 GPU / DP 4 sharded
            "largest_model": [ch01["fit_layers"], ch01["fit_layers_dist_opt"]],
            # DP 4, TP 2 × DP 2, TP 4: same GPUs
            "tp_vs_dp": ch02["tp_vs_dp"],
            # one TE layer's activations: 4 and 8 layers
            "per_layer_te": ch03["per_layer"]["te"],
            # none, selective, full
            "recompute_te": ch03["recompute_1gpu"]["te"],
            "recompute_long": [
                next(c for c in ch04["seq_1gpu"] if c.seq == long_seq),
                *ch04["recompute"],
            ],
            # the longest sequence on one GPU
            "fit_seq": ch04["fit_seq"][1],
            # CP 4 against one GPU at 4k tokens
            "cp_short": ch04["parity"],
            # PP 4 and PP 4 × VPP 2 (their layout runs)
            "pipeline": ch05["parity"][:2],
            # equal FLOPs: dense against 64 experts
            "moe": [ch06["dense_equal_active"], ch06["one_gpu"][64]],
            # moe-small, EP 4 against one GPU
            "ep": ch06["parity"][0],
        },
        "cases": by_gpus.get(gpus, {}),
        "cases_by_gpus": by_gpus,
    }


def pending(gpus: int = 2, iters: int = ITERS) -> dict:
    """Queued for the next version: per case, the layouts that measure the ranking on `gpus` GPUs,
    by key (where CHOSEN holds the GPU count: its cases less those RECORDED_CASES holds there, today
    none; otherwise every case, chosen now by the search calibrated on the H200 records)."""
    if gpus in CHOSEN:
        return _frozen(
            [name for name in CHOSEN[gpus] if name not in RECORDED_CASES.get(gpus, ())], gpus, iters
        )
    from megalab.predict import calibration
    from megalab.jobs.running import NotRecorded

    try:
        model = calibration.calibrate(gpu="H200")
    except NotRecorded:
        model = None
    return {name: _choose(name, gpus, model, iters=_iters(name, iters)) for name in CASES}


def _iters(name: str, iters: int) -> int:
    """The case's own iterations where it sets fewer (the long-context steps), else `iters`."""
    return min(iters, CASES[name].iters)


def defining(gpus: int = 2, iters: int = ITERS) -> list:
    """The points that define the chapter's figures, re-measured by a quick reproduction beside the
    reference: each case's best-predicted layout on this machine."""
    cases = runs(gpus, iters)["cases"]
    return [case["top1"] for case in cases.values()]
