"""Chapter 06, expert parallelism and mixture of experts: its runs, by name.

The seed tutorial's OLMoE-like model (hidden 1024, 16 layers, seq 4096, top-8 of 64 experts, expert
FFN 1024) with Megatron Core's MoE layers, Transformer Engine's grouped GEMM and the auxiliary
load-balancing loss; one sequence per micro-batch, 4 sequences per GPU per step.

`runs` holds what the records answer (one GPU: the models, their profiled steps and a micro-batch
sweep; the EP 4 parity of moe-small; the multi-GPU layouts at each GPU count of RECORDED_EP: all of
them on two and on four H200s, less what QUEUED names); `pending` the layouts queued for the
chapter's next version (everything at 8). Three layouts at 64 experts on four GPUs (DP, EP alltoall,
EP allgather) were also timed twice each, alternated in one call (tag `spread`, records.REPEAT_TAGS:
the notebook reads them apart by SPREAD_TAG).

The trainer changed under these records: from `FUSIONS_AT` on, Transformer Engine's linears
accumulate weight gradients straight into the fp32 main_grad, and MoE layers use Megatron's fused
permutation and router and TE's CUTLASS grouped GEMM (megalab.train.wiring). A configuration's
newest record answers it; the ones made before `FUSIONS_AT` ran the older trainer (the evidence
page sets them side by side). The chapter's step times come from the comparison group `ch06.ep`
(`_groups`, forced balance); ch06_analysis reads it. A second group, `ch06.ep-aux`, times the
layouts with the auxiliary loss and ETP, beside forced balance for EP and ETP; the routing lesson
`ch06.routing` (300 eager steps per balancing policy) shows the router collapse and recover.
"""

from __future__ import annotations

from megalab.runs import presets
from megalab.records.schema import TRAINER_CHANGES
from megalab.book.specs import (
    GROUP_ITERS,
    ITERS,
    PARITY_ITERS,
    Fit,
    Group,
    Lesson,
    Parity,
    Profiled,
    degrees,
)

EXPERTS = (64, 128, 256)  # the seed's rows: more experts at the same active compute
PROFILE_ITERS = 10  # the profiler traces steps 5-7
# at the same global batch of 4 sequences: 4, 2 and 1 micro-batches per step
MICRO_BATCHES = (1, 2, 4)
# when, and in which trainer, the MoE fusions landed
FUSIONS_AT, FUSIONS_REVISION = TRAINER_CHANGES[0][:2]
# GPU counts whose layouts (DP, EP, experts, dispatchers, ETP, routing, parity) are recorded
RECORDED_EP = (2, 4)
# ... less these: GPU count -> layout keys not recorded yet (none: both counts are whole)
QUEUED: dict = {}
# the four-GPU repeats, alternated on one host: DP, EP alltoall, EP allgather at 64 experts
SPREAD_TAG = "spread"
FIT_ITERS = 5  # a fit probe needs the peak of a step, not a timing
GPU = "H200"  # the reference records' GPU: the fits probe its memory


# the comparison groups' micro-batch (4 sequences per GPU as one micro-batch) and GPUs
GROUP_MBS, GROUP_GPUS = 4, 2
AUX_COEFF = 0.01  # the auxiliary loss's weight in ch06.ep-aux (RunConfig's default)


def _groups(gpus: int) -> dict:
    """DP, DP + distributed optimizer, EP and both dispatchers on GROUP_GPUS GPUs at micro-batch
    GROUP_MBS with forced balance (the vuiseng9/megatron-tutorials series' setting), timed on one
    host, alternated, with TE's CUDA graphs (attention and router captured, experts eager); EP
    alltoall profiled. From 2 GPUs on."""
    if gpus < GROUP_GPUS:
        return {}
    wide = _base(GROUP_ITERS).replace(
        gpus=GROUP_GPUS,
        mbs=GROUP_MBS,
        gbs=GROUP_MBS * GROUP_GPUS,
        moe_balance="force",
        cuda_graphs="te",
    )
    dp = [wide.replace(dist_opt=o) for o in (False, True)]
    ep = [wide.replace(ep=GROUP_GPUS, moe_dispatcher=d) for d in ("alltoall", "allgather")]
    return {"ep": Group("ch06.ep", dp + ep, profiled=len(dp)), "ep_aux": _aux_group(wide)}


def _aux_group(forced) -> Group:
    """ch06.ep-aux: the layouts with the auxiliary loss (weight 0.01) routing the tokens, beside
    forced balance where the layouts differ most. With the loss the router learns, the experts'
    loads drift apart, and an EP rank waits for the busiest; ETP splits every expert over the
    GPUs, so each rank does the same work whatever the router does. DP 2 + distributed optimizer,
    EP 2 with both dispatchers and ETP 2 with the loss; EP 2 (alltoall) and ETP 2 forced, the
    pairs that price the imbalance within one group. ETP 2 with the loss profiled."""
    aux = forced.replace(moe_balance="aux_loss", moe_aux_coeff=AUX_COEFF)
    layouts = [
        aux.replace(dist_opt=True),
        *(aux.replace(ep=GROUP_GPUS, moe_dispatcher=d) for d in ("alltoall", "allgather")),
        aux.replace(etp=GROUP_GPUS),
        forced.replace(ep=GROUP_GPUS),
        forced.replace(etp=GROUP_GPUS),
    ]
    return Group("ch06.ep-aux", layouts, profiled=3)


# the routing lesson: steps, of which the learning rate warms up over the first ROUTING_WARMUP
ROUTING_ITERS, ROUTING_WARMUP = 300, 100
# auxiliary-loss weights it compares (None: no auxiliary loss)
ROUTING_AUX = (0.01, 0.1, None)


def _lessons(gpus: int) -> dict:
    """The routing lesson, from GROUP_GPUS GPUs."""
    if gpus < GROUP_GPUS:
        return {}
    wide = _base(ROUTING_ITERS).replace(gpus=GROUP_GPUS, mbs=GROUP_MBS, gbs=GROUP_MBS * GROUP_GPUS)
    return {"routing": _routing(wide)}


def _routing(wide) -> Lesson:
    """ch06.routing: EP over the group's GPUs, routed in fp32, ROUTING_ITERS steps with a
    ROUTING_WARMUP-step learning-rate warm-up, the auxiliary loss at each weight of ROUTING_AUX and
    none: does balance recover from the imbalance at initialisation? Not a timing; eager, since only
    eager MoE runs record their routing (train.probes.counts_routing)."""
    base = wide.replace(
        ep=GROUP_GPUS,
        iters=ROUTING_ITERS,
        lr_warmup=ROUTING_WARMUP,
        moe_router_fp32=True,
        moe_balance="aux_loss",
    )
    return Lesson(
        "ch06.routing",
        [
            base.replace(moe_aux_coeff=a) if a else base.replace(moe_balance="none")
            for a in ROUTING_AUX
        ],
        needs=("routing",),
    )


def _base(iters: int):
    return presets.get("olmoe-like").replace(iters=iters, mbs=1, gbs=4)


def _dense(base):
    """A dense model whose MLP does what topk experts do per token (equal active compute)."""
    return base.replace(name="olmoe-like-dense", experts=0, ffn=base.moe_ffn_size * base.topk)


def runs(gpus: int = 2, iters: int = ITERS) -> dict:
    """What the records answer, whatever `gpus` is: one GPU, the moe-small EP 4 parity, and the
    multi-GPU layouts recorded at each GPU count of RECORDED_EP under "layouts"; the rest are in
    `pending`."""
    base = _base(iters)
    return {
        # 2.-6. the multi-GPU layouts recorded on two and four H200s (each timed run alone on the
        # host)
        "layouts": {t: _split(_layouts(base, t), QUEUED.get(t, ()))[0] for t in RECORDED_EP},
        # 1. total vs active: the MoE model beside a dense model of equal active size, one GPU
        "dense_equal_active": _dense(base),
        # 3. more experts at the same active compute, one GPU (256: out of memory, recorded)
        "one_gpu": {n: base.replace(experts=n) for n in EXPERTS},
        # where a one-GPU step's time goes: kernel timelines of the MoE model and its dense twin
        "profile_one_gpu": [
            Profiled(base.replace(iters=PROFILE_ITERS)),
            Profiled(_dense(base).replace(iters=PROFILE_ITERS)),
        ],
        # the host's per-layer work is per micro-batch: more tokens per micro-batch amortise it
        # (same global batch)
        "micro_batch": {m: base.replace(mbs=m) for m in MICRO_BATCHES},
        "micro_batch_dense": {m: _dense(base).replace(mbs=m) for m in MICRO_BATCHES},
        # 6. still correct: the recorded EP 4 parity of moe-small (local spec, lr 1e-4), both
        # dispatchers
        "parity": [
            Parity(
                presets.get("moe-small").replace(
                    mbs=2,
                    gbs=16,
                    iters=PARITY_ITERS,
                    lr=1e-4,
                    gpus=4,
                    ep=4,
                    impl="local",
                    moe_dispatcher=d,
                )
            )
            for d in ("alltoall", "allgather")
        ],
        "groups": _groups(gpus),
        # routing over hundreds of steps: runs read together, not timed
        "lessons": _lessons(gpus),
    }


def _layouts(base, top: int) -> dict:
    """The multi-GPU layouts at `top` GPUs (4 sequences per GPU): DP against EP, expert counts,
    dispatchers, ETP, routing, a profiled step and parity."""
    wide = lambda **kw: base.replace(gpus=top, gbs=4 * top, **kw)  # noqa: E731  4 sequences per GPU
    return {
        # 2. DP (experts replicated; distributed optimizer off and on) against EP = GPUs
        "dp": [wide(dist_opt=o) for o in (False, True)],
        "ep": [wide(ep=top)],
        # 3. more experts at the same active compute, with and without EP
        "experts_ep": {n: wide(experts=n, ep=top) for n in EXPERTS},
        "experts_dp": {n: wide(experts=n, dist_opt=True) for n in EXPERTS},
        # 4. the dispatchers (across expert counts and top-k), and expert tensor parallelism against
        # EP
        "dispatcher": {d: wide(ep=top, moe_dispatcher=d) for d in ("alltoall", "allgather")},
        "dispatcher_experts": {
            n: wide(experts=n, ep=top, moe_dispatcher="allgather") for n in EXPERTS[1:]
        },
        "dispatcher_topk": {
            d: wide(topk=2, ep=top, moe_dispatcher=d) for d in ("alltoall", "allgather")
        },
        "etp": [wide(etp=top)],
        # both: each expert split in 2, experts over top/2
        "etp_ep": [wide(etp=2, ep=top // 2)] if top >= 4 else [],
        # the seed's 8-GPU rows: 256 experts at every EP x ETP split with both above 1 (EP 4 x ETP
        # 2, EP 2 x ETP 4), expert DP = top / (ep * etp) = 1. Only from 8 GPUs: at 4 the one split
        # is etp_ep's, recorded at 64 experts, and the recorded two- and four-GPU layouts keep their
        # keys
        **(
            {
                "etp_ep_experts": {
                    t: wide(experts=EXPERTS[-1], ep=top // t, etp=t) for t in degrees(top)[1:-1]
                }
            }
            if top >= 8
            else {}
        ),
        # 3. the largest expert count that fits, EP against DP with the distributed optimizer (fit
        # searches around theory's prediction, in steps of 8 experts per EP rank)
        "fit_experts": {
            name: Fit(wide(iters=FIT_ITERS, **kw), "experts", GPU, step=8 * kw.get("ep", 1))
            for name, kw in (("EP", dict(ep=top)), ("DP + dist. optimizer", dict(dist_opt=True)))
        },
        "profile": [Profiled(wide(ep=top, iters=PROFILE_ITERS))],
        # 5. routing: tokens per expert per layer (every MoE run records them), the auxiliary loss
        # (the ep run) against forced balance (random router logits) and none
        "routing": {b: wide(ep=top, moe_balance=b) for b in ("force", "none")},
        # 6. still correct: the chapter's own model at EP = GPUs against one GPU (lr as moe-small's
        # parity)
        "parity": [Parity(wide(ep=top, iters=PARITY_ITERS, lr=1e-4))],
    }


def pending(gpus: int = 2, iters: int = ITERS, recorded: bool = False) -> dict:
    """Queued for the next version: the layouts at `gpus` GPUs (the EP degree) not recorded yet (all
    of them beyond RECORDED_EP, the keys QUEUED names within it); nothing on one GPU. recorded=True
    returns them whether recorded or not (what the notebook predicts at `gpus`)."""
    top = degrees(gpus)[-1]
    if top == 1:
        return {}
    plan = _layouts(_base(iters), top)
    return plan if recorded or top not in RECORDED_EP else _split(plan, QUEUED.get(top, ()))[1]


def _split(plan: dict, queued) -> tuple[dict, dict]:
    """(recorded, queued): the layout keys `queued` names go to the second."""
    return {k: v for k, v in plan.items() if k not in queued}, {k: plan[k] for k in queued}


def defining(gpus: int = 2, iters: int = ITERS) -> list:
    """The points that define the chapter's figures, re-measured by a quick reproduction beside the
    reference: DP against EP at the widest layout and one round of the EP comparison group with its
    CUDA-graph settings (the page reads its loss parities from the records: none re-measured)."""
    r = runs(gpus, iters)
    widest = max((k for k in r["layouts"] if k <= gpus), default=None)  # none on 1 GPU
    top = r["layouts"][widest] if widest else {}
    return [
        *top.get("dp", ()),
        *top.get("ep", ()),
        *[g for n, g in r["groups"].items() if n == "ep"],
    ]
