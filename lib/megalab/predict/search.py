"""The layout search: every way to lay a model out on N GPUs, the ones that run and fit, fastest
first.

    megalab plan --search --preset gpt-8.3b --gpus 2 --gbs 32 --seq 2048 --top 5

    >>> from megalab import presets, search
    >>> found = search.search(presets.get("gpt-8.3b"), gpus=2, gbs=32, seq=2048)
    >>> found[0].cfg, found[0].step_s, found.frame()

Enumerates tp, pp (vpp where it divides the layers per stage), cp, ep and etp (MoE models), sp (tp >
1), every micro-batch size dividing gbs/dp, recompute none/selective/full and the distributed
optimizer (when there is a data-parallel group to shard over); dp = gpus/(tp·pp·cp). Nothing here
decides what may run: `layout_rules.problems` refuses what Megatron would, `theory.memory` drops
what is predicted not to fit (or to need at least what a recorded run of the same model ran out of
memory at: `memory_cap`), and `theory.step_time_estimate` ranks the rest, at the matmul rate and bus
bandwidth recorded for the GPU model by `megalab bench` when the store has them, else at the
datasheet's; `model=calibration.calibrate()` ranks with the step-time model calibrated on the book's
records instead. Each candidate says why it is not first: the term of its predicted step time (or
memory) furthest above the best's.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from megalab import theory
from megalab.runs.axes import MODEL_PARALLEL, SIZES
from megalab.runs.config import InvalidLayout, RunConfig
from megalab.theory.flops import spec

__all__ = ["VARIES", "Candidate", "Ranking", "UnknownAxis", "memory_cap", "search"]

# Said with every ranking until chapter 07 calibrates the model on the book's records: the
# roofline's compute ignores micro-batch and GEMM shape, takes one bus bandwidth for every
# collective, charges the pipeline only its bubble and expert tensor parallelism nothing
CAVEAT = (
    "predicted by an uncalibrated roofline (a lower bound: recorded runs take several times "
    "longer; "
    "it favours pipelines at micro-batch 1): compare the top layouts by measuring them"
)
CALIBRATED = (
    "predicted by the model named above (its error on records it was not fitted on, above): "
    "compare the top layouts by measuring them"
)

RECOMPUTE = ("none", "selective", "full")
VARIES = (*SIZES, "sp", "mbs", "recompute", "dist_opt")  # what the search varies (SIZES: runs.axes)
_COMM = ("tp", "dp", "cp", "pp", "ep")  # theory.comm_bytes_per_step's axes
# further terms a model= may predict
_OTHER = {"host": "host overhead", "optimizer": "optimizer step"}


class UnknownAxis(ValueError):
    """A limit names something the search does not vary; the message lists what it does."""


@dataclass(frozen=True)
class Candidate:
    """One layout that runs and fits, with its predicted step time split, memory and MFU (SI
    units)."""

    rank: int  # 1 = predicted fastest
    cfg: RunConfig
    step_s: float  # theory.step_time_estimate total_s
    compute_s: float
    bubble_s: float
    comm_s: float
    mem_gib: float  # theory.memory total, most loaded GPU
    mfu: float
    measured: bool  # the store holds an ok record of this layout on this GPU model
    # its step time (newest such record), for prediction against measurement
    measured_s: float | None
    why: str  # why it is not first: "bubble +12 ms"; "" for the first
    comm_by_axis_s: dict = field(repr=False)
    # a model's further terms: {"host": s, "optimizer": s}
    other_s: dict = field(default_factory=dict, repr=False)

    @property
    def layout(self) -> str:
        """'TP(2)·PP(2)·CP(1)·EP(1)·DP(1)', with vpp, etp and sp when they are on."""
        c = self.cfg
        extra = [f"vpp{c.vpp}"] * (c.vpp > 1) + [f"etp{c.etp}"] * (c.etp > 1) + ["sp"] * c.sp
        return " ".join([theory.layout(c), *extra])


@dataclass
class Ranking:
    """The search's answer: the best candidates (fastest first) and how many layouts fell out, and
    why.

    Iterate it, index it (`ranking[0]` is the best), or take `frame()` (one row per candidate)."""

    candidates: list[Candidate]
    model: str
    gpus: int
    gpu: str
    gbs: int
    seq: int
    enumerated: int  # layouts generated
    invalid: int  # refused by layout_rules.problems (Megatron would not start them)
    too_big: int  # valid, but theory.memory predicts more than the GPU holds
    ranked: int  # valid and fitting (candidates holds the first `top` of them)
    # where the matmul rate and the bus bandwidth come from (or which model ranked)
    rates: str
    caveat: str = CAVEAT  # what the ranking's predictions are worth, printed above the table
    # GiB: the smallest prediction at which a recorded run of this model ran
    memory_cap: float | None = None
    # out of memory on this GPU model (None: no such run); nothing at or above it ranks

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self.candidates)

    def __len__(self) -> int:
        return len(self.candidates)

    def __getitem__(self, i):
        return self.candidates[i]

    def summary(self) -> str:
        """One line: what was searched, how many layouts were dropped for which reason, which rates
        ranked them."""
        cap = (
            ""
            if self.memory_cap is None
            else (
                f" (at or above {self.memory_cap:.1f} GiB, where a recorded run "
                f"of this model ran out of memory)"
            )
        )
        return (
            f"{self.model} on {self.gpus}x {self.gpu}, gbs {self.gbs}, seq {self.seq}: "
            f"{self.enumerated} layouts, "
            f"{self.invalid} refused by Megatron's rules, {self.too_big} predicted not to "
            f"fit{cap}, "
            f"{self.ranked} ranked; {self.rates}"
        )

    def frame(self):
        """A pandas DataFrame, one row per candidate: rank, label, layout, mbs, recompute, dist_opt,
        the predicted split (step_s, compute_s, bubble_s, comm_s), mem_gib, mfu, measured,
        measured_s, why, key; and host_s, optimizer_s when a model= predicted them."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "rank": c.rank,
                    "label": c.cfg.label,
                    "layout": c.layout,
                    "mbs": c.cfg.mbs,
                    "recompute": c.cfg.recompute,
                    "dist_opt": c.cfg.dist_opt,
                    "step_s": c.step_s,
                    "compute_s": c.compute_s,
                    "bubble_s": c.bubble_s,
                    "comm_s": c.comm_s,
                    "mem_gib": c.mem_gib,
                    "mfu": c.mfu,
                    "measured": c.measured,
                    "measured_s": c.measured_s,
                    "why": c.why,
                    "key": c.cfg.key,
                    **{f"{k}_s": v for k, v in c.other_s.items()},
                }
                for c in self.candidates
            ]
        )

    def table(self) -> str:
        """The summary line, then a compact text table of the candidates (what `megalab plan
        --search` prints)."""
        w = max([len(c.layout) for c in self.candidates] + [6]) + 2
        head = (
            f"{'#':>3}  {'layout':<{w}}{'mbs':>4}  "
            f"{'recompute':<10}{'dist-opt':<9}{'ms':>8}{'GiB':>7}{'MFU':>6}  "
            f"{'measured':<9}why not first"
        )
        rows = [
            f"{c.rank:>3}  {c.layout:<{w}}{c.cfg.mbs:>4}  "
            f"{c.cfg.recompute:<10}{'yes' if c.cfg.dist_opt else 'no':<9}"
            f"{c.step_s * 1e3:>8.1f}{c.mem_gib:>7.1f}{c.mfu:>6.0%}  {_measured(c):<9}{c.why or '-'}"
            for c in self.candidates
        ]
        if not rows:
            rows = [
                f"no layout of {self.model} is predicted to fit on {self.gpus}x {self.gpu}: add "
                f"GPUs, "
                f"or lower gbs or seq"
            ]
            return "\n".join([self.summary(), *rows])
        return "\n".join([self.summary(), self.caveat, head, *rows])


def _measured(c: Candidate) -> str:
    return f"{c.measured_s * 1e3:.0f} ms" if c.measured_s is not None else "-"


# -- enumeration
# ------------------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _allowed(limits: dict, axis: str, values) -> list:
    """The values of `axis` to try: `values`, narrowed to what the caller's limit allows."""
    if axis not in limits:
        return list(values)
    want = limits[axis]
    want = set(want) if isinstance(want, (list, tuple, set, frozenset)) else {want}
    return [v for v in values if v in want]


def _layouts(base: RunConfig, gpus: int, limits: dict) -> Iterator[RunConfig]:
    """Every combination of the axes, in a fixed order; validity is left to
    layout_rules.problems."""
    moe, divs = base.experts > 0, _divisors(gpus)
    for tp, pp, cp in itertools.product(*(_allowed(limits, a, divs) for a in MODEL_PARALLEL)):
        if gpus % (tp * pp * cp):
            continue
        dp = gpus // (tp * pp * cp)
        vpps = _divisors(base.layers // pp) if pp > 1 and base.layers % pp == 0 else [1]
        eps = _divisors(gpus // pp) if moe else [1]
        # [1]: the rules say why it cannot
        micro = _divisors(base.gbs // dp) if base.gbs % dp == 0 else [1]
        for vpp, ep, etp, sp, mbs, rc in itertools.product(
            _allowed(limits, "vpp", vpps),
            _allowed(limits, "ep", eps),
            _allowed(limits, "etp", eps),
            _allowed(limits, "sp", (False, True) if tp > 1 else (False,)),
            _allowed(limits, "mbs", micro),
            _allowed(limits, "recompute", RECOMPUTE),
        ):
            # experts' optimizer state shards over expert-DP
            edp = gpus // (pp * ep * etp) if moe else 1
            shards = dp * cp > 1 or edp > 1  # the distributed optimizer needs a group to shard over
            for do in _allowed(limits, "dist_opt", (False, True) if shards else (False,)):
                yield base.replace(
                    gpus=gpus,
                    tp=tp,
                    pp=pp,
                    vpp=vpp,
                    cp=cp,
                    ep=ep,
                    etp=etp,
                    sp=sp,
                    mbs=mbs,
                    recompute=rc,
                    dist_opt=do,
                )


# -- rates and records
# ------------------------------------------------------------------------------
def _rates(gpu: str, dtype: str, gpus: int, store) -> tuple[float | None, float | None, str]:
    """(matmul TFLOP/s, bus GB/s, where they come from): recorded on this GPU model when the store
    has them (the best square matmul; the large-message all-reduce over the most GPUs recorded, up
    to `gpus`), else None (step_time_estimate then takes the datasheet's dense peak and NVLink
    bandwidth)."""
    from megalab.jobs import bench
    from megalab.jobs.running import NotRecorded

    said = []
    try:
        tflops = bench.best_matmul_tflops(dtype, gpu=gpu, store=store)
        said.append(f"matmul {tflops:.0f} TFLOP/s measured")
    except NotRecorded:
        tflops = None
        said.append(f"matmul at the {gpu} datasheet peak")
    bw = None
    if gpus > 1:
        try:
            nccl = bench.load("nccl", store=store, gpu=gpu)
            counts = sorted(
                {int(n) for n in nccl.loc[nccl["op"] == "all_reduce", "gpus"] if n <= gpus}
            )
            if counts:
                bw = bench.best_bus_bandwidth("all_reduce", counts[-1], store=store, gpu=gpu)
                said.append(
                    f"bus {bw:.0f} GB/s measured (all-reduce over {counts[-1]} GPUs, large "
                    f"messages)"
                )
        except NotRecorded:
            pass
        if bw is None:
            said.append(f"bus at the {gpu} datasheet NVLink bandwidth")
    return tflops, bw, "rates: " + ", ".join(said)


def _architecture(cfg: RunConfig) -> tuple:
    """What makes two configurations the same model, whatever their layout, batch and sequence."""
    return (
        cfg.name,
        cfg.layers,
        cfg.hidden,
        cfg.heads,
        cfg.ffn_size,
        cfg.vocab,
        cfg.experts,
        cfg.moe_ffn_size,
        cfg.topk,
    )


def memory_cap(store, model_cfg: RunConfig, gpu: str) -> float | None:
    """The smallest memory theory.memory predicts for a recorded out-of-memory run of `model_cfg`'s
    model (any layout, batch or sequence) on GPU model `gpu`, in GiB; None when there is none. Such
    a run needed more than the card holds, so theory under-counts this model by at least the card
    over that prediction: the search ranks nothing predicted at or above it (chapter 07's MoE case:
    EP 2 predicted at 122 GiB ran out of memory on a 141 GiB H200). Retracted records (errata) do
    not count."""
    arch = _architecture(model_cfg)
    caps = [
        theory.memory(cfg, gpu)["total"]
        for cfg, _ in store.runs_on(gpu, "oom")
        if _architecture(cfg) == arch
    ]
    return min(caps) if caps else None


def _measured_index(store, gpu: str) -> dict[str, float | None]:
    """Loose config key -> step time of the newest clean ok record on this GPU model
    (timings.timed)."""
    from megalab.records import timings

    return {
        key: (r.get("summary") or {}).get("step_time_s")
        for key, (_, r) in timings.timed(store, gpu).items()
    }


# -- ranking --------------------------------------------------------------------------------------
def _comm_names(cfg) -> dict[str, str]:
    """Each axis's traffic, named by the collective that carries it (theory.comm_bytes_per_step)."""
    return {
        "tp": "SP all-gather/reduce-scatter" if cfg.sp else "TP all-reduce",
        "dp": "DP reduce-scatter/all-gather" if cfg.dist_opt else "DP all-reduce",
        "cp": "CP KV exchange",
        "pp": "PP send/recv",
        "ep": "EP all-to-all" if cfg.moe_dispatcher == "alltoall" else "EP all-gather",
    }


def _why(c: dict, best: dict) -> str:
    """The term where `c` is furthest above the best, as one phrase."""
    ms = lambda s: f"+{s * 1e3:.0f} ms" if s >= 0.0005 else f"+{s * 1e3:.2g} ms"  # noqa: E731
    terms = {"bubble": c["bubble_s"] - best["bubble_s"]}
    extra = theory.extra_flops(c["cfg"])
    compute = c["compute_s"] - best["compute_s"]
    terms[f"recompute +{extra:.0%} FLOPs" if extra > 0 else "compute"] = compute
    for axis, name in _comm_names(c["cfg"]).items():
        terms[name] = c["comm_by_axis_s"][axis] - best["comm_by_axis_s"][axis]
    # a model's further terms (host overhead, optimizer)
    for name, s in c.get("other_s", {}).items():
        terms[_OTHER.get(name, name)] = s - best.get("other_s", {}).get(name, 0.0)
    name, worst = max(terms.items(), key=lambda kv: kv[1])
    net = c["step_s"] - best["step_s"]
    # a term it loses on, and the step it loses by whenever that differs (other terms add to it or
    # cancel part of it)
    if worst > 1e-9 and net >= 0.0005:
        phrase = f"{name} ({ms(worst)})" if name.startswith("recompute") else f"{name} {ms(worst)}"
        return phrase if ms(net) == ms(worst) else f"{phrase}, {ms(net)} in all"
    more = c["mem_gib"] - best["mem_gib"]
    return f"same time, needs {more:.1f} GiB more" if more > 0.05 else "ties with #1"


def _modelled(cfg: RunConfig, model) -> dict:
    """`model.predict(cfg)`'s split as the search keeps it: comm_by_axis_s (its axes, others 0) and
    its host and optimizer terms, where it has them."""
    est = model.predict(cfg)
    by_axis = {a: 0.0 for a in _COMM} | dict(est.get("comm_by_axis_s") or {})
    other = {k: est[f"{k}_s"] for k in _OTHER if f"{k}_s" in est}
    return {
        "cfg": cfg,
        "step_s": est["total_s"],
        "compute_s": est["compute_s"],
        "bubble_s": est["bubble_s"],
        "comm_s": est["comm_s"],
        "mfu": est["mfu"],
        "comm_by_axis_s": by_axis,
        "other_s": other,
    }


def _score(cfg: RunConfig, gpu: str, tflops, bw) -> dict:
    est = theory.step_time_estimate(cfg, gpu, matmul_tflops=tflops, bus_bw=bw)
    by_axis = theory.comm_by_axis_s(cfg, gpu, bus_bw=bw)
    return {
        "cfg": cfg,
        "step_s": est["total_s"],
        "compute_s": est["compute_s"],
        "bubble_s": est["bubble_s"],
        "comm_s": est["comm_s"],
        "mfu": est["mfu"],
        "comm_by_axis_s": by_axis,
    }


def search(
    model_cfg: RunConfig,
    gpus: int,
    gpu: str = "H200",
    gbs: int | None = None,
    seq: int | None = None,
    top: int | None = 10,
    store=None,
    model=None,
    **limits,
) -> Ranking:
    """Every layout of `model_cfg`'s model on `gpus` GPUs of model `gpu` at global batch `gbs` and
    sequence `seq` (default: the config's), ranked by predicted step time; the best `top` (None:
    all) as a Ranking.

    `limits` narrow an axis to a value or a collection of values: `tp=2`, `pp=(1, 2)`,
    `recompute="none"`, `dist_opt=True` (axes: VARIES). The model's other fields (impl, fp8,
    overlap, cp_comm, dispatcher ...) are kept as given. Equal predicted times rank the smaller
    memory first, then the layout's numbers in order. `store` (default: the results store) gives the
    measured rates and marks layouts it holds a record of. `model` (default: the roofline,
    theory.step_time_estimate) ranks with any object whose `predict(cfg)` returns
    step_time_estimate's split (compute_s, bubble_s, comm_s, total_s, mfu; optionally
    comm_by_axis_s, host_s, optimizer_s), such as calibration.calibrate()'s, made for the same GPU
    model. Raises InvalidLayout when the model itself cannot run (whatever the layout), UnknownAxis
    for a limit on something the search does not vary.
    """
    from megalab.records.store import as_store
    from megalab.records.timings import loose_key

    if top is not None and top < 1:
        raise ValueError(f"top={top}: pass 1 or more, or None for every layout")
    unknown = sorted(set(limits) - set(VARIES))
    if unknown:
        raise UnknownAxis(
            f"the search does not vary {', '.join(unknown)}: limit one of {', '.join(VARIES)}"
        )
    gbs, seq = model_cfg.gbs if gbs is None else gbs, model_cfg.seq if seq is None else seq
    trivial = dict(gpus=1, tp=1, pp=1, vpp=1, cp=1, ep=1, etp=1, sp=False, mbs=1, dist_opt=False)
    base = model_cfg.replace(gbs=gbs, seq=seq, **trivial)
    found = base.problems() + ([f"gpus={gpus} must be at least 1"] if gpus < 1 else [])
    if found:  # the model, not a layout, is wrong: no layout would run
        raise InvalidLayout("\n".join(found))
    name = spec(gpu).name
    if model is not None and getattr(model, "gpu", name) != name:
        raise ValueError(
            f"the model was calibrated on {model.gpu}, the search is for {name}: "
            f"calibrate on {name} (calibration.calibrate(gpu={name!r}))"
        )
    store = as_store(store)
    if model is None:
        tflops, bw, rates = _rates(name, "fp8" if base.fp8 else "bf16", gpus, store)
        score, caveat = (lambda cfg: _score(cfg, name, tflops, bw)), CAVEAT
    else:
        rates = (
            model.summary() if hasattr(model, "summary") else f"ranked by {type(model).__name__}"
        )
        score, caveat = (lambda cfg: _modelled(cfg, model)), CALIBRATED
    measured = _measured_index(store, name)
    cap = memory_cap(store, base, name)
    enumerated = invalid = too_big = 0
    scored = []
    for cfg in _layouts(base, gpus, limits):
        enumerated += 1
        if cfg.problems():
            invalid += 1
            continue
        mem = theory.memory(cfg, name)
        if not mem["fits"] or (cap is not None and mem["total"] >= cap):
            too_big += 1
            continue
        scored.append({**score(cfg), "mem_gib": mem["total"]})
    order = lambda s: (
        round(s["step_s"] * 1e6),
        round(s["mem_gib"], 3),  # noqa: E731
        tuple(getattr(s["cfg"], a) for a in (*SIZES, "mbs")),
        s["cfg"].sp,
        RECOMPUTE.index(s["cfg"].recompute),
        s["cfg"].dist_opt,
    )
    scored.sort(key=order)
    candidates = []
    for i, s in enumerate(scored[:top] if top else scored):
        ms = measured.get(loose_key(s["cfg"]), False)
        candidates.append(
            Candidate(
                rank=i + 1,
                why=_why(s, scored[0]) if i else "",
                measured=ms is not False,
                measured_s=ms or None,
                **s,
            )
        )
    return Ranking(
        candidates,
        model_cfg.name,
        gpus,
        name,
        gbs,
        seq,
        enumerated,
        invalid,
        too_big,
        len(scored),
        rates,
        caveat,
        cap,
    )
