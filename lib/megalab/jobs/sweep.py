"""Questions that take several runs: what is the largest batch that fits, and is a layout correct?

fit     bisection for the largest micro-batch / sequence / layer count that runs without OOM.
parity  train the same model on one GPU and on a layout, compare the loss curves step by step.

Every probe goes through `megalab.run`, so it is recorded (live) or read back (cached) like any run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VARY = ("mbs", "seq", "layers", "experts")
PARITY_FACTOR = 3.0
PARITY_FLOOR = 0.02
SPIKE_JUMP = 1.0  # nats: a step whose loss rises this much over the step before is a spike


def spike_steps(steps, losses) -> list[int]:
    """Steps whose loss jumps up by more than SPIKE_JUMP nats over the step before (one-step
    spikes)."""
    losses = list(losses)
    return [int(st) for st, a, b in zip(list(steps)[1:], losses, losses[1:]) if b - a > SPIKE_JUMP]


# -- fit -------------------------------------------------------------------------------------------
def _step(cfg, vary: str) -> int:
    if vary == "layers":
        return cfg.pp * cfg.vpp  # every pipeline chunk holds the same number of layers
    if vary == "seq":
        return 128  # a multiple of 2*cp*tp for every layout this book runs
    if vary == "experts":
        # every EP rank holds the same number of experts (and a multiple of 8, as the book's)
        return 8 * cfg.ep
    return 1


def with_value(cfg, vary: str, value: int):
    """cfg with `vary` set to value. Varying mbs keeps the number of micro-batches, so
    gbs = mbs * dp * num_microbatches stays a valid global batch."""
    if vary not in VARY:
        raise ValueError(f"vary={vary!r}: pick one of {', '.join(VARY)}")
    if vary == "mbs":
        return cfg.replace(mbs=value, gbs=value * cfg.dp * max(1, cfg.num_microbatches))
    return cfg.replace(**{vary: value})


class EmptyRange(ValueError):
    """A fit has no value to probe: lo above hi, or no multiple of step between them (or more than
    MAX_VALUES)."""


# values a fit may range over: each is looked up in the store before the bisection starts
MAX_VALUES = 4096


@dataclass
class FitResult:
    """The largest value that ran ("ok"), or None if even `lo` did not, and every probe in order."""

    vary: str
    largest: int | None
    probes: list = field(default_factory=list)  # [(value, Result)]

    @property
    def table(self):
        """One row per probe, sorted by value: value, status, fits, source, speed and memory."""
        import pandas as pd

        rows = [
            {
                self.vary: v,
                "status": r.status,
                "fits": r.ok,
                "source": r.source,
                # an OOM probe's few steps before the crash are no speed measurement: blank them
                "step_time_s": r.summary.get("step_time_s") if r.ok else None,
                "tflops_per_gpu": r.summary.get("tflops_per_gpu") if r.ok else None,
                "mem_reserved_peak_gib": r.summary.get("mem_reserved_peak_gib"),
                "label": r.label,
            }
            for v, r in self.probes
        ]
        return (
            pd.DataFrame(rows).sort_values(self.vary).reset_index(drop=True)
            if rows
            else pd.DataFrame()
        )

    @property
    def best(self):
        """The Result of the largest value that fits; LookupError when no probe fit (widen the
        window)."""
        if self.largest is None:
            tried = ", ".join(f"{v}: {r.status}" for v, r in self.probes)
            raise LookupError(
                f"no {self.vary} in the window fits ({tried}): lower `lo` or check the GPU model"
            )
        return dict(self.probes)[self.largest]

    def _repr_html_(self):
        return f"<p>largest {self.vary} that fits: <b>{self.largest}</b></p>" + self.table.to_html(
            index=False
        )


class ProbeFailed(RuntimeError):
    """A fit probe ended neither ok nor out of memory (timeout, crash): it says nothing about
    fitting."""


def fit(
    cfg,
    vary: str = "mbs",
    lo: int = 1,
    hi: int = 64,
    mode: str = "auto",
    step: int | None = None,
    store=None,
    tags=(),
    **run_kw,
) -> FitResult:
    """Largest value of `vary` in [lo, hi] (multiples of `step`) whose run finishes with status ok.

    Probes lo, then hi, then bisects: O(log n) runs. ok fits; oom (and an invalid layout) does not;
    any other status (a timeout, a crash) raises ProbeFailed, since it answers nothing: re-run that
    probe. Assumes fitting is monotone. `tags` are added to every probe's record.

    Except in live mode, the probes already recorded inside the window come first: the largest that
    fit and the smallest above it that did not bracket the answer, so only what lies between is
    probed (and a window that moved, because theory's prediction improved, still finds the probes
    recorded before).
    """
    from megalab.jobs.running import run

    step = step or _step(cfg, vary)
    # the multiples of step in [lo, hi], never listed whole
    values = range(-(-lo // step) * step, hi + 1, step)
    if not values:
        raise EmptyRange(
            f"no multiple of {step} in [{lo}, {hi}]: widen the range (lo <= hi) or pass another "
            f"step"
        )
    if len(values) > MAX_VALUES:
        raise EmptyRange(
            f"[{lo}, {hi}] holds {len(values):,} multiples of {step}: narrow it to {MAX_VALUES} "
            f"at most "
            f"(e.g. --hi {values[MAX_VALUES - 1]})"
        )
    values = list(values)
    out = FitResult(vary, None)
    known = {} if mode == "live" else _recorded_probes(cfg, vary, values, store, run_kw.get("gpu"))
    out.probes += sorted(known.items())

    def fits(i: int) -> bool:
        if values[i] in known:
            return known[values[i]].ok
        probe = with_value(cfg, vary, values[i]).validate()
        result = run(probe, mode=mode, tags=["fit", f"fit-{vary}", *tags], store=store, **run_kw)
        out.probes.append((values[i], result))
        if result.status not in ("ok", "oom", "invalid"):
            raise ProbeFailed(
                f"probe {vary}={values[i]} ({result.label}) ended with status {result.status}: "
                f"it says nothing about memory; re-run it (megalab run ... --mode live)"
            )
        return result.ok

    settled = {i: known[v].ok for i, v in enumerate(values) if v in known}
    good = bisect(len(values), settled, fits)
    out.largest = None if good is None else values[good]
    return out


def bisect(n: int, settled: dict, fits) -> int | None:
    """The largest index in range(n) that fits, assuming fitting is monotone: from the indices
    `settled` already ({index: fits}; the largest that fit and the smallest above it that did not
    bracket the answer), probing fits(i) for the first, then the last, then halving what lies
    between. None when the first does not fit."""
    good = max((i for i, ok in settled.items() if ok), default=None)
    above = [i for i, ok in settled.items() if not ok and (good is None or i > good)]
    bad = min(above) if above else None
    if good is None:
        if bad == 0 or not fits(0):
            return None
        good = 0
    if bad is None:
        bad = n
        if good < n - 1:
            if fits(n - 1):
                good = n - 1
            else:
                bad = n - 1
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good


def _recorded_probes(cfg, vary: str, values: list[int], store=None, gpu: str | None = None) -> dict:
    """{value: Result} of the probes the store already settles (ok, oom, invalid) among `values`, on
    GPU model `gpu` when given (an 80 GB card's probes say nothing about a 141 GB one): what fit()
    starts from."""
    from megalab.runs.config import InvalidLayout
    from megalab.jobs.running import NotRecorded, run

    known = {}
    for v in values:
        try:
            result = run(with_value(cfg, vary, v), mode="cached", store=store, quiet=True, gpu=gpu)
        except (NotRecorded, InvalidLayout):
            continue
        if result.status in ("ok", "oom", "invalid"):
            known[v] = result
    return known


# -- parity ----------------------------------------------------------------------------------------
def reference_of(cfg):
    """The single-GPU run of the same model, data, seed and global batch: every parallel size 1,
    the same mbs (so more micro-batches: gbs/mbs), no sequence parallelism or optimizer sharding.
    The token dispatcher moves tokens between expert-parallel ranks; with ep=1 every choice computes
    the same thing, so the reference uses the default one (alltoall) and serves every dispatcher."""
    return cfg.replace(
        gpus=1,
        tp=1,
        pp=1,
        vpp=1,
        cp=1,
        ep=1,
        etp=1,
        sp=False,
        dist_opt=False,
        overlap=False,
        moe_dispatcher="alltoall",
    )


@dataclass
class ParityResult:
    """Does the layout train like one GPU? passes when max |loss - reference loss| <= band.

    band = max(PARITY_FACTOR x spread, PARITY_FLOOR), where spread is the largest per-step loss
    difference between repeated single-GPU runs (kernel nondeterminism). A correct layout only
    reorders floating-point sums, which moves a bf16 loss by ~1e-3..1e-2 within tens of steps even
    when the single-GPU run repeats bit for bit; a layout bug (wrong gradient scaling, a missing
    all-reduce) moves it by > 0.1 within a few steps. Hence the floor.
    """

    passes: bool
    max_abs_diff: float | None
    band: float | None
    spread: float | None
    series: object  # DataFrame: step, reference, reference_2.., layout, abs_diff
    reference: list = field(default_factory=list)  # [Result] single-GPU repeats
    layout: object = None  # Result
    reason: str = ""

    @property
    def spikes(self) -> list[int]:
        """Steps where the single-GPU reference's loss jumps up by more than SPIKE_JUMP nats over
        the step before. A layout on the same trajectory spikes at the same step, and there its tiny
        reduction-order differences are amplified (the book's performance page shows it)."""
        return spike_steps(self.series["step"], self.series["reference"])

    @property
    def layout_spikes(self) -> list[int]:
        """The layout's own spike steps, by the same rule."""
        return spike_steps(self.series["step"], self.series["layout"])

    @property
    def max_abs_diff_off_spikes(self) -> float | None:
        """max |Δloss| over the steps that are not reference spikes: a diagnostic beside the
        verdict, which stays the strict one (every step within the band)."""
        off = self.series[~self.series["step"].isin(self.spikes)]["abs_diff"].dropna()
        return float(off.max()) if len(off) else None

    def curves(self, name: str = "layout") -> dict:
        """{label: {"step", "loss"}} for charts.loss_parity: the reference run first, then the
        layout. A curve measured here now (a live run) is named "... (yours)" and says "source":
        "yours"."""
        s = self.series
        ref = f"1 GPU ({self.reference[0].label})" if self.reference else "reference"
        lay = self.layout.label if self.layout is not None else name
        curves, first = {}, (self.reference or [None])[0]
        for label, column, result in ((ref, "reference", first), (lay, "layout", self.layout)):
            mine = getattr(result, "source", None) == "live"
            curves[f"{label} (yours)" if mine else label] = {
                "step": list(s["step"]),
                "loss": list(s[column]),
                **({"source": "yours"} if mine else {}),
            }
        return curves

    def __repr__(self) -> str:
        verdict = "passes" if self.passes else "FAILS"
        return (
            f"ParityResult({verdict}: max |Δloss| = {self.max_abs_diff}, band = {self.band}, "
            f"spread = {self.spread}{', ' + self.reason if self.reason else ''})"
        )


def _losses(result) -> dict:
    s = result.series
    return {st: lo for st, lo in zip(s.get("step") or [], s.get("loss") or []) if lo is not None}


def _max_diff(a: dict, b: dict) -> float | None:
    common = sorted(set(a) & set(b))
    return max(abs(a[s] - b[s]) for s in common) if common else None


def parity(
    cfg,
    reference_cfg=None,
    mode: str = "auto",
    repeats: int = 2,
    store=None,
    factor: float = PARITY_FACTOR,
    floor: float = PARITY_FLOOR,
    tags=(),
    **run_kw,
) -> ParityResult:
    """Run (or read) the single-GPU reference `repeats` times and the layout once; compare losses.

    Both need init="layout_invariant" (the default) so the weights start identical. All runs are
    recorded with the tag "parity".
    """
    import pandas as pd

    from megalab.jobs.running import run

    ref_cfg = reference_cfg or reference_of(cfg)
    refs, seen = [], []
    for _ in range(max(1, repeats)):
        r = run(
            ref_cfg,
            mode=mode,
            tags=["parity", "reference", *tags],
            store=store,
            exclude=seen,
            **run_kw,
        )
        refs.append(r)
        seen.append(r.record.get("id"))
    lay = run(cfg, mode=mode, tags=["parity", "layout", *tags], store=store, **run_kw)
    curves = [_losses(r) for r in refs]
    frame = pd.DataFrame({"step": sorted(set().union(*curves, _losses(lay)))})
    for i, c in enumerate(curves):
        frame["reference" if i == 0 else f"reference_{i + 1}"] = frame["step"].map(c)
    frame["layout"] = frame["step"].map(_losses(lay))
    frame["abs_diff"] = (frame["layout"] - frame["reference"]).abs()
    failed = [r for r in [*refs, lay] if not r.ok]
    if failed:
        return ParityResult(
            False,
            None,
            None,
            None,
            frame,
            refs,
            lay,
            reason=f"{failed[0].label} ended with status {failed[0].status}",
        )
    diffs = [d for c in curves[1:] if (d := _max_diff(curves[0], c)) is not None]
    spread = max(diffs) if diffs else None
    band = max(factor * (spread or 0.0), floor)
    worst = _max_diff(curves[0], _losses(lay))
    if worst is None:
        return ParityResult(
            False, None, band, spread, frame, refs, lay, reason="no common steps to compare"
        )
    return ParityResult(worst <= band, worst, band, spread, frame, refs, lay)
