"""The step-time model calibrated on the book's own records, and checked on records the fit never
saw.

    >>> from megalab import calibration, presets, search
    >>> cal = calibration.calibrate()              # the H200 records of the results store
    >>> cal.constants   # six Constants: name, unit, fitted value, meaning
    >>> cal.report()   # |relative error| by layout family: fit vs held out, before vs after
    >>> cal.predict(cfg)   # compute_s, host_s, comm_s, bubble_s, optimizer_s, total_s, ...
    >>> search.search(presets.get("gpt-8.3b"), 2, gbs=32, seq=2048, model=cal)
    >>> cal.interval(0.8)   # (lo, hi): 80% of held-out records ran within predicted × [lo, hi]
    >>> mine = calibration.calibrate_host(host=None, start=cal)   # your machine's own constants

Regime: the records it fits run without CUDA graphs (eager), where the host issues every kernel
and, at small micro-batches, sets the pace (host_layer). A graphed step replays each layer's kernels
with one launch; `calibrate_host(..., graphs=True)` fits the constants of graphed runs instead.

Records (`usable_records`): status ok, not retracted (the store's errata), not profiled (the
profiler slows steps), not packed beside other runs (they shared the host), not a warm-up run
(timings' clean timings: the first run on a fresh host is slow), compiled, Transformer Engine layers
(the local spec's unfused attention is a different kernel set, which none of the constants
describes), without CUDA graphs (a graph replays a layer's kernels with one launch: the host floor,
host_layer, is gone), the trainer's own weight-gradient fusion (the peer pairs turn it off: the
model has no term for the unfused add), on one GPU model; the newest record of each configuration
(iterations and seed aside). Three kinds are kept out:
- chapter 07's case runs (tag CASE_TAG): they test the ranking the model makes, so they never fit
it;
- repeats made for another comparison (records.REPEAT_TAGS: chapter 03's back-to-back spread, the
CUDA-graph
  pairs): the configuration's own record, the one its chapter reads, counts;
- multi-GPU runs of a second host of the same GPU model, as far as its link tells it apart
  (`reference_link`: the link its probe reported differs from the one most multi-GPU records
  report). host_layer is one host's constant: a second 2×H200 host (probe: "none", 32 CPU cores
  against 64) ran gpt-1.2b at CP 2 and 8k tokens in 448 ms, where the 4×H200 host that made most
  records ran it in 202 ms. Since env reads NV# links, 2×H200 hosts report the 4×H200 host's
  "NVLink (NV18)": their eager multi-GPU runs (chapter 3's gpt-8.3b groups, GPU-bound) now fit too.
  Telling hosts apart by CPU count as well (env cpu_count) would set them aside.

The model and its six constants are `step_model`'s. They are fitted by least squares on
log(predicted / measured) step time: a 30 ms step and an 8 s step count alike, an error of ×2 weighs
as much as one of ÷2, and the quantity minimised is the one reported (relative error).
Levenberg-Marquardt on the logarithm of each constant, so every constant stays positive. Constants
the records leave free (no record depends on them: `Constant.records` is 0) keep step_model's first
guess.

Why these six: the records at small micro-batches sit on a floor of a few milliseconds per layer and
micro-batch whatever the layer's FLOPs (host_layer); above it, GEMM-heavy runs reach a share of the
benched matmul rate that grows with the layer's width (gemm_eff, gemm_width) and attention-heavy
long sequences a lower one (attn_eff); TP, SP, CP and PP runs lose more than their bytes at the
benched bandwidth, per call (comm_call); MoE steps grow with the number of local experts
(expert_gemm). The width term came from chapter 07's dense case (Llama 3 8B, hidden 4096, never
fitted): with one GEMM efficiency for every width the model predicted its eight steps 15-27% too
long, with the width term -1% to +10%, from records at most 3072 wide. A saturating GEMM efficiency
in tokens per micro-batch, eff = e_max·x/(x + x_half), was tried in place of attn_eff: with the host
floor in the model, x_half fits to ~100 tokens, below every record's micro-batch, so the records
show no effect of the token count.

Validation: in each layout family (`family`), the configurations are ordered by sha256 of their
layout key (iterations, seed and runner aside, so that Megatron-LM's run of a layout sits with
megalab's) and every fourth from the first is held out: a quarter of each family, rounded up, so
that no family goes untested; the rest are fitted. The split depends on the configurations only,
never on the fit.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from megalab import theory
from megalab.runs.config import RunConfig
from megalab.predict.step_model import CONSTANTS, Rates, combine, guesses, parts
from megalab.theory.flops import spec

__all__ = [
    "FAMILIES",
    "Constant",
    "Calibration",
    "calibrate",
    "calibrate_host",
    "family",
    "host_timings",
    "for_search",
    "keeps",
    "reference_link",
    "usable_records",
]

FAMILIES = ("1 GPU", "DP", "TP", "PP", "CP", "EP")
TERMS = ("compute_s", "host_s", "comm_s", "bubble_s", "optimizer_s")
HOLD_OUT_EVERY = 4  # a quarter of the configurations, by hash
# what a host sets (calibrate_host re-fits them); the GPU's efficiencies are the GPU model's
HOST_CONSTANTS = ("host_layer", "comm_call", "expert_gemm")
# the tag of chapter 07's case runs (tools/gpu/pack.py tags a plan line's records with it)
CASE_TAG = "ch07"
MAX_ITERS = 200


@dataclass(frozen=True)
class Constant:
    """One fitted constant: its value in `unit`, what it means, and how many fit records constrain
    it."""

    name: str
    unit: str
    value: float
    meaning: str
    records: int


def family(cfg) -> str:
    """The layout family a configuration tests, most specific axis first: "EP" (any MoE model),
    "CP", "PP", "TP", "DP" (data parallel only), "1 GPU"."""
    if cfg.experts:
        return "EP"
    for name, on in (
        ("CP", cfg.cp > 1),
        ("PP", cfg.pp > 1),
        ("TP", cfg.tp > 1),
        ("DP", cfg.gpus > 1),
    ):
        if on:
            return name
    return "1 GPU"


def reference_link(store=None, gpu: str = "H200") -> str | None:
    """The interconnect most multi-GPU clean timings of `gpu` report: the host whose records the
    model fits."""
    from collections import Counter
    from megalab.records import timings

    links = Counter(
        (r.get("env") or {}).get("interconnect")
        for group in timings.repeats(store, gpu).values()
        for cfg, r in group
        if cfg.gpus > 1
    )
    return links.most_common(1)[0][0] if links else None


def keeps(record, link: str | None) -> bool:
    """Whether a calibration may use this clean timing: not a chapter 07 case run, not a repeat made
    for another comparison (records.REPEAT_TAGS: the configuration's own record counts, as the
    chapters read it), not a reader's live reproduction (the book's model does not move when someone
    reproduces a chapter), and a one-GPU run or one made on the host whose link probe reported
    `link` (reference_link)."""
    from megalab.records.schema import is_repeat, is_reproduced

    one_gpu = (record.get("config") or {}).get("gpus", 1) == 1
    return (
        CASE_TAG not in (record.get("tags") or [])
        and not is_repeat(record)
        and not is_reproduced(record)
        and (one_gpu or (record.get("env") or {}).get("interconnect") == link)
    )


def usable_records(store=None, gpu: str = "H200") -> list[dict]:
    """The run records a calibration may use (see the module docstring), newest per configuration,
    oldest first."""
    from megalab.records import timings

    link = reference_link(store, gpu)
    return [
        r
        for cfg, r in timings.timed(store, gpu, lambda r: keeps(r, link)).values()
        if (r.get("summary") or {}).get("step_time_s")
        and cfg.compile
        and cfg.impl == "te"
        and not cfg.problems()
        and cfg.cuda_graphs == "none"
        and cfg.grad_accum_fusion == "auto"
    ]


def _hash(cfg) -> int:
    key = cfg.replace(iters=1, seed=0, runner="megalab").key
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)


def _held_out(cfgs: list) -> list[bool]:
    """Which configurations validate rather than fit (module docstring): in each family, ordered by
    hash, every HOLD_OUT_EVERY-th from the first."""
    hashes = [_hash(c) for c in cfgs]
    held = [False] * len(cfgs)
    for fam in FAMILIES:
        mine = sorted({h for c, h in zip(cfgs, hashes) if family(c) == fam})
        out = set(mine[::HOLD_OUT_EVERY])
        held = [was or h in out for was, h in zip(held, hashes)]
    return held


def _stack(dicts: list[dict]) -> dict:
    import numpy as np

    return {k: np.array([d[k] for d in dicts], dtype=float) for k in dicts[0]}


def _fit(
    p: dict, measured, fixed: dict | None = None, start: dict | None = None
) -> tuple[dict, dict]:
    """Least squares on log(predicted/measured) over the constants' logarithms (Levenberg-Marquardt,
    forward-difference Jacobian) from `start` (SI; default step_model's guesses), those in `fixed`
    (SI) held; returns the constants (SI) and how many records constrain each (0 for a held one)."""
    import numpy as np

    fixed, start = fixed or {}, {**guesses(), **(start or {})}
    names = [n for n in CONSTANTS if n not in fixed]

    def residuals(q):
        return np.log(combine(p, {**dict(zip(names, np.exp(q))), **fixed})["total_s"] / measured)

    q = np.log([start[n] for n in names])
    r, lam, h = residuals(q), 1e-3, 1e-6
    cost = r @ r
    for _ in range(MAX_ITERS):
        J = np.column_stack([(residuals(q + h * e) - r) / h for e in np.eye(len(q))])
        A, g = J.T @ J, J.T @ r
        while lam < 1e10:
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
            new_r = residuals(q + step)
            if new_r @ new_r < cost:
                break
            lam *= 10
        else:
            break  # no step lowers the cost: a minimum
        q, r, gain, lam = q + step, new_r, cost - new_r @ new_r, lam / 10
        cost = r @ r
        if gain < 1e-12 * max(cost, 1e-12):
            break
    used = {n: int((np.abs(J[:, j]) > 1e-3).sum()) for j, n in enumerate(names)}
    return {**dict(zip(names, np.exp(q))), **fixed}, {**used, **{n: 0 for n in fixed}}


def _roofline(cfg, rates: Rates) -> float:
    """What search ranks with today: theory.step_time_estimate at the benched matmul rate and the
    large-message all-reduce bandwidth over the most GPUs benched, up to cfg.gpus."""
    counts = sorted(n for op, n in rates.nccl if op == "all_reduce" and n <= cfg.gpus)
    bw = max(rates.nccl[("all_reduce", counts[-1])][1]) if counts else None
    rate = rates.matmul_tflops["fp8" if cfg.fp8 else "bf16"]
    return theory.step_time_estimate(cfg, rates.gpu, matmul_tflops=rate, bus_bw=bw)["total_s"]


@dataclass
class Calibration:
    """A calibrated step-time model: its constants, the records it was fitted and checked on, and
    `predict(cfg)` for any layout (what `search.search(..., model=)` ranks with)."""

    gpu: str
    constants: tuple[Constant, ...]
    rates: Rates
    records: object  # pandas DataFrame, one row per usable record (frame())

    def value(self, name: str) -> float:
        """A constant in SI units (seconds, not ms or µs)."""
        c = next(c for c in self.constants if c.name == name)
        return c.value * CONSTANTS[name][1]

    def interval(self, level: float = 0.8) -> tuple[float, float]:
        """(lo, hi): the central `level` of the held-out records ran between lo and hi times their
        prediction (measured/predicted quantiles): a predicted step's error bar is predicted × lo
        to predicted × hi. The fit records answer when none is held out."""
        import numpy as np

        df = self.records
        held = df[df["set"] == "held out"] if (df["set"] == "held out").any() else df
        ratio = 1 / (1 + held["err_after"].to_numpy())
        tail = (1 - level) / 2
        return float(np.quantile(ratio, tail)), float(np.quantile(ratio, 1 - tail))

    def predict(self, cfg) -> dict:
        """Predicted step of `cfg` on this GPU model, in seconds by term: compute_s, host_s (the GPU
        waiting on the host), comm_s (comm_by_axis_s: tp, cp, ep, pp, dp), bubble_s, optimizer_s,
        total_s; plus tokens_per_s, tflops_per_gpu, mfu."""
        out = combine(parts(cfg, self.rates), {c.name: self.value(c.name) for c in self.constants})
        out = {
            k: ({a: float(s) for a, s in v.items()} if isinstance(v, dict) else float(v))
            for k, v in out.items()
        }
        total = out["total_s"]
        return {
            **out,
            "tokens_per_s": cfg.gbs * cfg.seq / total,
            "tflops_per_gpu": theory.tflops_per_gpu(cfg, total),
            "mfu": theory.mfu(cfg, total, self.gpu),
        }

    def frame(self):
        """One row per usable record: label, key, cfg (its RunConfig), id, family, set ("fit" or
        "held out"), measured_s,
        roofline_s (before), predicted_s (after), their relative errors, and the predicted terms."""
        return self.records.copy()

    def report(self):
        """|relative error| of step time (predicted/measured − 1) by set and layout family, and
        "all": n, median and max before (the roofline search ranks with today) and after
        calibration. Only whole steps are measured, so a term's error shows through the families
        that carry it; the share_* columns give each term's median share of the predicted step in
        that family."""
        import pandas as pd

        df = self.records.assign(
            before=lambda d: d["err_before"].abs(), after=lambda d: d["err_after"].abs()
        )
        for term in TERMS:
            df[f"share_{term[:-2]}"] = df[term] / df["predicted_s"]
        shares = [f"share_{t[:-2]}" for t in TERMS]
        rows = [_row(where, fam, g, shares) for (where, fam), g in df.groupby(["set", "family"])]
        rows += [_row(where, "all", g, shares) for where, g in df.groupby("set")]
        rank = {f: i for i, f in enumerate((*FAMILIES, "all"))}
        rows.sort(key=lambda r: (r["set"] != "fit", rank[r["family"]]))
        return pd.DataFrame(rows)

    def summary(self) -> str:
        """One line: what it was fitted on and how well it predicts records it did not see."""
        held = self.records[self.records["set"] == "held out"]["err_after"].abs()
        fit = int((self.records["set"] == "fit").sum())
        how = (
            f"held-out median |error| {held.median():.0%}, max {held.max():.0%}"
            if len(held)
            else "none held out"
        )
        return (
            f"step-time model calibrated on {fit} {self.gpu} records ({len(held)} held out: "
            f"{how}); "
            f"rates {self.rates.source}"
        )


def _row(where: str, fam: str, g, shares: list[str]) -> dict:
    return {
        "set": where,
        "family": fam,
        "n": len(g),
        "before_median": g["before"].median(),
        "before_max": g["before"].max(),
        "after_median": g["after"].median(),
        "after_max": g["after"].max(),
        **{s: g[s].median() for s in shares},
    }


def calibrate(store=None, gpu: str = "H200", fixed: dict | None = None) -> Calibration:
    """Fit step_model's constants on the usable records of GPU model `gpu` in `store` (default: the
    results store) and check them on the held-out ones; `fixed` holds some constants at a value (in
    their units; e.g. {"gemm_width": 0}: one GEMM efficiency for every width, the model before
    chapter 07's dense case). Raises NotRecorded when too few records qualify."""
    from megalab.jobs.running import NotRecorded
    from megalab.records.store import as_store

    name = spec(gpu).name
    store = as_store(store)
    recs = usable_records(store, name)
    if len(recs) <= len(CONSTANTS):
        raise NotRecorded(
            f"{len(recs)} usable {name} run record(s) in {store.root}; the fit needs more than "
            f"{len(CONSTANTS)}: record runs on {name} (compiled, not profiled, not packed)"
        )
    cfgs = [RunConfig.from_dict(r["config"]) for r in recs]
    measured = [r["summary"]["step_time_s"] for r in recs]
    ids = [r.get("id") for r in recs]
    return _calibration(name, cfgs, measured, ids, Rates.recorded(name, store), fixed)


def _calibration(name, cfgs, measured, ids, rates, fixed=None, start=None, held=None):
    """Fit on the configurations not `held` (default: _held_out's quarter), check on the held ones;
    `fixed` (in the constants' units) held at their value, the fit started at `start` (SI)."""
    import numpy as np
    import pandas as pd

    measured = np.array(measured, dtype=float)
    p = _stack([parts(c, rates) for c in cfgs])
    held = np.array(_held_out(cfgs) if held is None else held, dtype=bool)
    si = {n: v * CONSTANTS[n][1] for n, v in (fixed or {}).items()}
    fitted, used = _fit({k: v[~held] for k, v in p.items()}, measured[~held], si, start)
    constants = tuple(
        Constant(n, unit, float(fitted[n] / scale), meaning, used[n])
        for n, (unit, scale, _, meaning) in CONSTANTS.items()
    )
    terms = combine(p, fitted)
    before = np.array([_roofline(c, rates) for c in cfgs])
    frame = pd.DataFrame(
        {
            "label": [c.label for c in cfgs],
            "key": [c.key for c in cfgs],
            "cfg": cfgs,
            "id": ids,
            "family": [family(c) for c in cfgs],
            "set": np.where(held, "held out", "fit"),
            "measured_s": measured,
            "roofline_s": before,
            "predicted_s": terms["total_s"],
            "err_before": before / measured - 1,
            "err_after": terms["total_s"] / measured - 1,
            **{t: terms[t] for t in TERMS},
        }
    )
    return Calibration(name, constants, rates, frame)


def host_timings(store=None, host: str | None = None, gpu: str = "H200", graphs: bool = False):
    """[(RunConfig, median step seconds, runs)] per configuration timed on `host` (a record's
    `timings.host_of`: hostname, CPU cores, GPU; None: the host of the newest clean timing), with
    CUDA graphs (`graphs`) or without: clean timings (timings.timed's rules: ok, not profiled,
    packed or a warm-up) of megalab's compiled Transformer Engine runs, chapter 07's case runs
    included,
    each configuration's newest trainer revision; repeats (a comparison group's A B A B) give their
    median."""
    from statistics import median

    from megalab.records import timings
    from megalab.records.schema import trainer_revision

    name = spec(gpu).name
    runs = [
        (key, cfg, r)
        for (key, _), group in timings.repeats(store, name).items()
        for cfg, r in group
        if (r.get("summary") or {}).get("step_time_s")
        and cfg.compile
        and cfg.impl == "te"
        and not cfg.problems()
        and cfg.runner == "megalab"
        and (cfg.cuda_graphs != "none") == graphs
    ]
    runs.sort(key=lambda kcr: kcr[2].get("recorded_at") or "")
    if host is None and runs:
        host = timings.host_of(runs[-1][2])
    by_key: dict = {}
    for key, cfg, r in runs:
        if timings.host_of(r) != host:
            continue
        rev = trainer_revision(r)
        if by_key.get(key, (None, None, []))[1] != rev:
            by_key[key] = (cfg, rev, [])  # a newer trainer: its runs replace the older ones
        by_key[key][2].append(r["summary"]["step_time_s"])
    return [(cfg, float(median(t)), len(t)) for cfg, _, t in by_key.values()]


def calibrate_host(
    store=None,
    host: str | None = None,
    gpu: str = "H200",
    graphs: bool = False,
    start: Calibration | None = None,
) -> Calibration:
    """The step-time model's host constants (HOST_CONSTANTS: the host's time per layer and
    micro-batch, per blocking collective, per expert GEMM) re-fitted on `host_timings(store, host,
    gpu, graphs)` (your `megalab run` records; None: the host of the newest), at the rates `megalab
    bench` recorded for `gpu` in `store`. The GPU's efficiencies, and a host constant none of these
    runs depends on, keep `start`'s values (a Calibration, e.g. calibrate()'s; default step_model's
    guesses). A quarter of each layout family is held out (_held_out) while the fit keeps more runs
    than free constants; otherwise all fit. NotRecorded when the runs cannot fix the constants
    they depend on: record more (different micro-batches, widths, layouts)."""
    from megalab.jobs.running import NotRecorded
    from megalab.records.store import as_store

    name = spec(gpu).name
    store = as_store(store)
    timed = host_timings(store, host, name, graphs)
    rates = Rates.recorded(name, store)
    begin = guesses() | (
        {c.name: start.value(c.name) for c in start.constants} if start is not None else {}
    )
    cfgs = [c for c, _, _ in timed]
    free = [n for n in _constrained(cfgs, rates, begin) if n in HOST_CONSTANTS]
    fixed = {n: begin[n] / CONSTANTS[n][1] for n in CONSTANTS if n not in free}
    held = _held_out(cfgs)
    if len(cfgs) - sum(held) <= len(free):
        held = [False] * len(cfgs)
    if len(cfgs) <= len(free):
        where = host or "the newest host"
        raise NotRecorded(
            f"{len(cfgs)} {'graphed' if graphs else 'eager'} {name} configuration(s) timed on "
            f"{where}; fitting {', '.join(free) or 'nothing'} needs more than {len(free)}: "
            "`megalab run` more layouts or micro-batches there"
        )
    measured = [t for _, t, _ in timed]
    return _calibration(name, cfgs, measured, [None] * len(cfgs), rates, fixed, begin, held)


def _constrained(cfgs, rates, at: dict) -> list[str]:
    """The constants whose change (at the values `at`, SI) moves some configuration's predicted
    step."""
    import numpy as np

    if not cfgs:
        return []
    p = _stack([parts(c, rates) for c in cfgs])
    base = combine(p, at)["total_s"]
    out = []
    for n in CONSTANTS:
        moved = combine(p, {**at, n: at[n] * 1.01})["total_s"]
        if (np.abs(np.log(moved / base)) > 1e-5).any():
            out.append(n)
    return out


def for_search(gpu: str = "H200", store=None) -> Calibration | None:
    """What `search.search(..., model=)` ranks with on GPU model `gpu`: the model calibrated on its
    records, or None (the roofline, which the ranking then says) when the store holds too few to
    fit."""
    from megalab.jobs.running import NotRecorded

    try:
        return calibrate(store, gpu)
    except NotRecorded:
        return None
