"""Chapter 03, sequence parallelism and activation recomputation: its runs, by name.

Korthikanti et al. 2022 trained with dropout 0.1; so do these runs, so that the dropout masks their
formula counts exist. Activation memory per layer is measured as the difference between two layer
counts (the trainer's `act_gib`: memory allocated between the start of the first forward pass and
its loss), which cancels the embedding, the logits and the loss.

`runs` holds what the records answer (one GPU, TP 2 on two GPUs and TP 4 on four: RECORDED_TP; the
fits by layout at each degree: RECORDED_FITS, all four at TP 2 and gpt-22b's four at TP 4; the
profiled recompute steps at TP 2 and 4: RECORDED_PROFILE_RECOMPUTE_TP); `pending` the multi-GPU runs
queued for the chapter's next version (everything at TP 8, the seed tutorial's GPT-22B rows
included: SEED_TP), built by the same definitions so that their keys do not change when they move
into `runs`.
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

LAYERS = (4, 8)  # two depths: their difference is what one layer keeps
FIT_ITERS = 5  # a fit probe needs the peak of a step, not a timing
# TP degrees whose per-layer pairs, profiled steps and recompute runs are recorded
RECORDED_TP = (2, 4)
# the chapter's four layouts at each TP degree (_variants)
LAYOUTS = ("tp", "tp_sp", "tp_sp_selective", "tp_full")
# TP degree -> layouts whose fits (BIG's largest micro-batch) are recorded: all four,
RECORDED_FITS = {
    2: LAYOUTS,
    4: LAYOUTS,
}  # gpt-22b's at TP 4 too (full recompute's search: 30 ran, 31 did not)
RECORDED_SP_PARITY = (2, 4)  # TP degrees whose TP + SP parity is recorded
RECORDED_SP_SELECTIVE_PARITY = (2, 4)  # ... and TP + SP + selective recomputation parity
# TP degrees whose profiled recompute steps (none, selective) are recorded
RECORDED_PROFILE_RECOMPUTE_TP = (2, 4)
# (TP 2: the pair side by side on two GPUs each of a 4xH200 host)
# TP degrees whose recompute of chosen modules (MODULES) is recorded (the runs before
RECORDED_MODULES_TP = (2, 4)
# the trainer's workaround of a megatron-core bug are set aside in results/errata.jsonl)
# Megatron's recompute_modules beyond the default core_attn: the MLP, re-run from its input
MODULES = "mlp"
# the model whose largest micro-batch each layout fits, by TP degree (TP 2) ...
BIG = {2: "gpt-8.3b"}
# ... and at TP >= 4: the seed's GPT-22B experiment at half its TP (theory on an H200 at
BIG_WIDE = "gpt-22b"
# TP 4: TP fits 5 sequences, TP + SP 9, full recompute 32; recorded: 4, 8, 8 with
# selective recompute, 30 with full recompute)
# the seed tutorial's own GPT-22B table (issue 24), row by row at its TP degree only:
SEED_TP = 8
# without SP, with SP, with full recompute (_variants' names) ...
SEED_LAYOUTS = ("tp", "tp_sp", "tp_full")
# ... and the two whose forward/backward split it profiled
SEED_PROFILED = ("tp_sp", "tp_full")
# global batch 4 at dp 1 as one micro-batch: what the seed's "out of memory on 80 GB" without
SEED_MBS = 4
# SP implies (theory on an 80 GB H100 at TP 8: 76 GiB at mbs 4 before the CUDA context and
# NCCL buffers, 61 at mbs 2, 54 at mbs 1 would fit; with SP 56, full recompute 52). On an
# H200 all three fit: the row's peak is set beside 80 GB, not an OOM of its own


# the recorded fits of BIG's model at TP 2 (fit_mbs): the largest micro-batch of TP + SP and of TP
# with full recomputation, the two sides of the group `ch03.sp-vs-full`
GROUP_FITS = {"tp_sp": 8, "tp_full": 63}
# ... and of BIG_WIDE's (gpt-22b) at TP 4, the two sides of `ch03.sp-vs-full-tp4`
GROUP_FITS_TP4 = {"tp_sp": 8, "tp_full": 30}


def _pair(cfg) -> list:
    """The same run at both depths of LAYERS (per-layer activation memory is their difference /
    Δlayers)."""
    return [cfg.replace(layers=n) for n in LAYERS]


def _shape(iters: int):
    """gpt-1.2b's layer shape (h 1536, 16 heads) at seq 2048, where the attention scores (5·a·s/h =
    107 units of s·b·h) outweigh the rest of a layer (34); one micro-batch of one sequence."""
    return presets.get("gpt-1.2b").replace(seq=2048, dropout=0.1, iters=iters, mbs=1, gbs=1)


def _variants(t: int) -> dict:
    """The chapter's four layouts (LAYOUTS) at TP t."""
    return {
        "tp": dict(gpus=t, tp=t),
        "tp_sp": dict(gpus=t, tp=t, sp=True),
        "tp_sp_selective": dict(gpus=t, tp=t, sp=True, recompute="selective"),
        "tp_full": dict(gpus=t, tp=t, recompute="full"),
    }


def _fits(ts: list, recorded: bool) -> dict:
    """{TP degree: the layouts whose fits are recorded (or, recorded=False, not yet)} over `ts`,
    empty ones left out."""
    found = {t: [n for n in LAYOUTS if (n in RECORDED_FITS.get(t, ())) == recorded] for t in ts}
    return {t: names for t, names in found.items() if names}


def _one(iters: int):
    """One GPU, micro-batch 4: what recompute costs in time."""
    return _shape(iters).replace(mbs=4, gbs=4)


def _stable(t: int, **kw) -> Parity:
    """The Llama-style gpt-350m at lr 1e-4 (it trains without spikes; see the performance page), TP
    t + SP."""
    return Parity(llama_350m(mbs=4, gbs=16, iters=PARITY_ITERS, gpus=t, tp=t, sp=True, **kw))


def _recompute_tp(t: int, iters: int, recompute: str):
    """The timed recompute run at TP t + SP: the 40-layer gpt-1.2b at micro-batch 8 (recompute_tp,
    and profiled)."""
    return _one(iters).replace(gpus=t, tp=t, sp=True, mbs=8, gbs=8, recompute=recompute)


def _big(t: int, iters: int):
    """BIG's model at TP t (gpt-8.3b at TP 2, gpt-22b from TP 4 on) at seq 2048, with the chapter's
    dropout."""
    return presets.get(BIG.get(t, BIG_WIDE)).replace(seq=2048, dropout=0.1, iters=iters)


def _tp(ts: list, iters: int, gpu: str, fits: dict) -> dict:
    """TP and SP at each TP degree of `ts`: per-layer memory, profiled collectives, what recompute
    costs; and what fits (gpt-8.3b at TP 2, gpt-22b from TP 4 on: BIG) in the layouts `fits` names
    by degree (_fits)."""
    shape = _shape(iters)
    return {
        # TP replicates 10 s·b·h per layer; SP shards it
        "per_layer_tp": {
            t: {name: _pair(shape.replace(**kw)) for name, kw in _variants(t).items()} for t in ts
        },
        "profile_tp": [
            Profiled(shape.replace(layers=8, mbs=4, gbs=4, gpus=t, tp=t, sp=sp))
            for t in ts
            for sp in (False, True)
        ],
        # what fits: the largest micro-batch of BIG's model per layout
        "fit_mbs": {
            t: {
                name: Fit(_big(t, iters).replace(mbs=1, gbs=1, iters=FIT_ITERS, **kw), "mbs", gpu)
                for name, kw in _variants(t).items()
                if name in names
            }
            for t, names in fits.items()
        },
        "recompute_tp": {
            t: [_recompute_tp(t, iters, r) for r in ("none", "selective", "full")] for t in ts
        },
    }


def _profile_recompute(ts: list, iters: int) -> dict:
    """Where recompute's time goes at TP t + SP: the timed runs without and with selective
    recompute, profiled (GPU kernels by kind, NCCL included; not timings)."""
    return {
        "profile_recompute_tp": {
            t: [Profiled(_recompute_tp(t, iters, r)) for r in ("none", "selective")] for t in ts
        }
    }


def _seed(ts: list, iters: int) -> dict:
    """The seed tutorial's GPT-22B rows at TP t (SEED_TP): global batch 4 in one micro-batch
    (SEED_MBS), timed in each of SEED_LAYOUTS, and SEED_PROFILED's two profiled (GPU kernels by kind
    and step 3's forward and backward passes: the trainer's --profile)."""
    rows = {
        t: {
            name: _big(t, iters).replace(mbs=SEED_MBS, gbs=SEED_MBS, **kw)
            for name, kw in _variants(t).items()
            if name in SEED_LAYOUTS
        }
        for t in ts
    }
    return {
        "seed_tp": rows,
        "profile_seed_tp": {t: [Profiled(rows[t][name]) for name in SEED_PROFILED] for t in ts},
    }


def _modules(ts: list, iters: int) -> dict:
    """Selective recompute of the MLP (Megatron's recompute_modules) at TP t + SP: its per-layer
    memory and its cost in time, beside the recompute_tp runs."""
    shape, one = _shape(iters), _one(iters)
    kw = dict(sp=True, recompute="selective", recompute_modules=MODULES)
    return {
        "per_layer_modules": {t: _pair(shape.replace(gpus=t, tp=t, **kw)) for t in ts},
        "recompute_modules_tp": {t: one.replace(gpus=t, tp=t, mbs=8, gbs=8, **kw) for t in ts},
    }


def _sized(t: int, fits: dict, name: str):
    """A comparison group's member: BIG's model at TP t, layout `name` (_variants) at its recorded
    largest micro-batch `fits[name]`, eager, stopping on a tight median."""
    big = _big(t, GROUP_ITERS).replace(cuda_graphs="none", stop_when_tight=True)
    return big.replace(mbs=fits[name], gbs=fits[name], **_variants(t)[name])


def _groups(gpus: int) -> dict:
    """The comparison groups at TP 2 (from 2 GPUs on): gpt-8.3b's throughput at the largest
    micro-batch each side fits (TP + SP against full recomputation, GROUP_FITS), and what selective
    (core_attn), MLP and full recomputation cost at TP 2 + SP's micro-batch. Both run eager:
    Megatron graphs no full recomputation outside a whole-iteration graph, nor a selective one
    that draws dropout (layout_rules). The host-bound risk is small at this size (one 72-layer
    micro-batch of 8 × 2048 tokens: 1.0 s a step eager on record, about 0.36 s of it host work); the
    profiled member gives the GPU-busy share. A step of full recomputation at micro-batch 63 takes
    about 10 s: each run stops once its median is tight (stop_when_tight), GROUP_ITERS at most.
    From 4 GPUs on, the same comparison for gpt-22b at TP 4 (GROUP_FITS_TP4): `sp_vs_full_tp4`."""
    if gpus < 2:
        return {}
    sp = _sized(2, GROUP_FITS, "tp_sp")
    wide = {}
    if gpus >= 4:
        sides = [_sized(4, GROUP_FITS_TP4, name) for name in ("tp_sp", "tp_full")]
        wide = {"sp_vs_full_tp4": Group("ch03.sp-vs-full-tp4", sides)}
    return {
        "sp_vs_full": Group("ch03.sp-vs-full", [sp, _sized(2, GROUP_FITS, "tp_full")]),
        **wide,
        "recompute": Group(
            "ch03.recompute",
            [
                sp,
                sp.replace(recompute="selective"),
                sp.replace(recompute="selective", recompute_modules=MODULES),
                sp.replace(recompute="full"),
            ],
            rounds=3,  # selective core_attn costs about 4%: under 10%
        ),
    }


def runs(gpus: int = 2, iters: int = ITERS, gpu: str = "H200") -> dict:
    """What the records answer: one layer term by term, what recompute costs on one GPU and where
    its time goes (profiled steps), the largest micro-batch with and without full recompute; TP and
    SP at the recorded TP degrees (RECORDED_TP: per-layer memory, profiled collectives, recompute
    cost; RECORDED_FITS: gpt-8.3b's fits at TP 2, gpt-22b's at TP 4 but full recompute's); and TP +
    SP, with and without selective recompute, against one GPU. `gpus`: the most GPUs to scale to (2
    reads TP 2, 4 and 8 read TP 2 and TP 4)."""
    shape, one = _shape(iters), _one(iters)
    ts = degrees(gpus)
    return {
        # 1. one layer, term by term: fused (TE) vs materialized (local) attention, and recompute
        "per_layer": {
            name: _pair(shape.replace(**kw))
            for name, kw in {
                "te": {},
                "local": dict(impl="local"),
                "local_selective": dict(impl="local", recompute="selective"),
                "te_full": dict(recompute="full"),
            }.items()
        },
        # 2. what recompute costs on one GPU (TE and the local spec), and how large a micro-batch it
        # buys
        "recompute_1gpu": {
            impl: [one.replace(impl=impl, recompute=r) for r in ("none", "selective", "full")]
            for impl in ("te", "local")
        },
        "fit_mbs_1gpu": {
            r: Fit(one.replace(mbs=1, gbs=1, iters=FIT_ITERS, recompute=r), "mbs", gpu)
            for r in ("full", "none")
        },
        # where the time of each recompute choice goes: GPU kernels by kind (profiled; not a timing)
        "profile_recompute_1gpu": [
            Profiled(one.replace(recompute=r), gpu) for r in ("none", "selective", "full")
        ],
        # the same on one 80 GB H100, by the trainer that also times each forward and backward pass
        # (profile.schedule)
        "profile_recompute_h100": [
            Profiled(one.replace(recompute=r), "H100") for r in ("none", "selective", "full")
        ],
        # 3. TP and SP at the recorded degrees
        **_tp([t for t in ts if t in RECORDED_TP], iters, gpu, _fits(ts, recorded=True)),
        **_profile_recompute([t for t in ts if t in RECORDED_PROFILE_RECOMPUTE_TP], iters),
        **_modules([t for t in ts if t in RECORDED_MODULES_TP], iters),
        # 4. still correct: TP + SP, and TP + SP + selective recompute, against one GPU
        "parity": [_stable(t) for t in ts if t in RECORDED_SP_PARITY],
        "parity_selective": [
            _stable(t, recompute="selective") for t in ts if t in RECORDED_SP_SELECTIVE_PARITY
        ],
        # timed on one host, alternated (eager: see _groups)
        "groups": _groups(gpus),
    }


def pending(gpus: int = 2, iters: int = ITERS, gpu: str = "H200") -> dict:
    """Queued for the next version: TP and SP at the TP degrees not recorded yet (8: per-layer
    memory, profiled collectives, recompute cost), what fits gpt-22b where its fits are not recorded
    (full recompute at 4, all at 8), the profiled recompute steps (8) and the MLP's recompute at the
    degrees not recorded, their parities, and the seed tutorial's GPT-22B rows where TP 8 is among
    the degrees (_seed; nothing at 2 or 4 GPUs)."""
    tops = [t for t in degrees(gpus) if t > 1]
    return {
        **_tp([t for t in tops if t not in RECORDED_TP], iters, gpu, _fits(tops, recorded=False)),
        **_profile_recompute([t for t in tops if t not in RECORDED_PROFILE_RECOMPUTE_TP], iters),
        **_modules([t for t in tops if t not in RECORDED_MODULES_TP], iters),
        **_seed([t for t in tops if t == SEED_TP], iters),
        # still correct: TP + SP + selective recompute, and TP + SP, at the degrees not recorded yet
        "parity": [
            _stable(t, recompute="selective") for t in tops if t not in RECORDED_SP_SELECTIVE_PARITY
        ]
        + [_stable(t) for t in tops if t not in RECORDED_SP_PARITY],
    }


def defining(gpus: int = 2, iters: int = ITERS, gpu: str = "H200") -> list:
    """The points that define the chapter's figures, re-measured by a quick reproduction beside the
    reference: the measured memory points (per layer on one GPU, with Transformer Engine, and at the
    widest TP with and without SP), the first loss parity, and one round of the SP-against-full-
    recompute comparison group (eager, as recorded)."""
    r = runs(gpus, iters, gpu)
    tp = (
        r["per_layer_tp"][max(k for k in r["per_layer_tp"] if k <= gpus)]
        if r["per_layer_tp"]
        else {}
    )
    return [
        *r["per_layer"]["te"],
        *tp.get("tp", ()),
        *tp.get("tp_sp", ()),
        *r["parity"][:1],
        *[g for n, g in r["groups"].items() if n == "sp_vs_full"],
    ]
