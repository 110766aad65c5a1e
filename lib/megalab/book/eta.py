"""How long a live reproduction of a page should take (`megalab reproduce chNN --mode live`, printed
before it starts): what it launches, each launch costed from the records.

    e = eta.estimate("01_data_parallel/data_parallel", gpus=2)   # full and quick, in seconds
    for launch in eta.launches("01_data_parallel/data_parallel", 2, quick=True): ...

What a reproduction launches, as megalab.book.live and megalab.jobs decide it (full: every run
measured, as `--mode live --force`; quick: its chapter's defining points, megalab.book.chapters):
- ahead (live.warm): the plain runs that can share a process, one launch per process kind: the
  first pays the launch, each other only its re-initialisation;
- in the notebook: each run it asks that nothing measured before (one measured already is read
  back, megalab.jobs.reproduction); every probe a memory search bisects to (which fits as the
  probe's record says, else as theory's memory model does); a parity's two single-GPU references
  (shared by the parities of one reference) and its layout; the comparison groups as Group.run
  measures them (a warm-up only when nothing ran before);
- quick: a run that is not a defining point is read from the records, but one nothing records
  (a search or a parity at a GPU count the book was not recorded on) is launched all the same.
A launch costs its launch to first step (its newest record's, else the median of the newest
launches), its steps (that record's; unrecorded, a recorded run of the same shape scaled by layers
and micro-batches) and GAP_S; a page adds PAGE_S. A reproduction that measured runs already
(resumed) reads them back: estimate leaves them out.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

# Measured on 2×H200 (quick reproductions of ch01 and ch02): a run's exit, its record and the next
# run's launch take 3-8 s after its last step (median 5 s) ...
GAP_S = 5.0
# ... and the notebook's kernel and cells (10-15 s between runs) with its evidence page.
PAGE_S = 30.0
NEWEST = 100  # launches whose median start-up a new launch is costed at (launches get cheaper)


def _work(steps: list) -> float | None:
    """Seconds of a run's own steps, step 0 (compilation, allocation) included."""
    timed = [t for t in steps if t is not None]
    return sum(timed) if timed else None


def _shape(cfg) -> tuple:
    """What sets the time of one layer of one micro-batch: its width, sequence, micro-batch,
    model-parallel split, kernels."""
    return (
        cfg.hidden,
        cfg.ffn,
        cfg.seq,
        cfg.mbs,
        cfg.tp,
        cfg.cp,
        cfg.ep,
        cfg.experts,
        cfg.cuda_graphs,
        cfg.recompute,
        cfg.impl,
        cfg.fp8,
    )


def _layer_passes(cfg) -> int:
    """Layers of a pipeline stage times the micro-batches of a step: what a step repeats."""
    return max(1, cfg.layers // max(cfg.pp, 1)) * cfg.num_microbatches


class Costs:
    """The records' costs on GPU model `gpu`, read in one pass (retracted records aside): per run
    key its steps' seconds (`work`; `fewest`: its first warm-up + MIN_TIMED steps, what a run
    stopping on a tight median trains) and status; the median launch to first step of the newest
    launches (`launch_s`) and of a run in a shared launch (`reused_s`); seconds per layer pass by
    shape (for a configuration nobody recorded); how often each key is recorded on any GPU."""

    def __init__(self, store=None, gpu: str = "H200"):
        from megalab.metrics import WARMUP_STEPS
        from megalab.records.store import as_store, same_gpu_model
        from megalab.records.timings import MIN_TIMED
        from megalab.runs.config import RunConfig

        self.store, self.gpu = as_store(store), gpu
        retracted = set(self.store.errata())
        self.work, self.fewest, self.status, self.anywhere = {}, {}, {}, Counter()
        self.launched = {}  # key -> its newest record's launch to first step, when it had one
        fresh, reused, first, per_pass = [], [], [], {}
        for r in self.store.load("run"):
            if r.get("id") in retracted:
                continue
            self.anywhere[r.get("key")] += 1
            if not same_gpu_model((r.get("env") or {}).get("gpu_name"), gpu):
                continue
            steps = (r.get("series") or {}).get("step_time_s") or []
            summary = r.get("summary") or {}
            self.status[r.get("key")] = r.get("status")
            if (work := _work(steps)) is None:
                continue
            self.work[r.get("key")] = work
            self.fewest[r.get("key")] = _work(steps[: WARMUP_STEPS + MIN_TIMED])
            self.launched.pop(r.get("key"), None)
            if summary.get("startup_s") is not None and steps[0] is not None:
                at = (summary.get("startup_marks_s") or {}).get("batch_position") or 0
                (reused if at else fresh).append(summary["startup_s"] - steps[0])
                first.append(steps[0])
                if not at:
                    self.launched[r.get("key")] = fresh[-1]
            if r.get("status") == "ok" and summary.get("step_time_s"):
                cfg = RunConfig.from_dict(r["config"])
                per_pass.setdefault(_shape(cfg), []).append(
                    summary["step_time_s"] / _layer_passes(cfg)
                )
        # with no launch recorded on this GPU model: the 2×H200 ones of the module's docstring
        self.launch_s = statistics.median(fresh[-NEWEST:]) if fresh else 15.0
        self.reused_s = statistics.median(reused[-NEWEST:]) if reused else 1.0
        self.first_s = statistics.median(first[-NEWEST:]) if first else 8.0
        self.per_pass = {k: statistics.median(v[-NEWEST:]) for k, v in per_pass.items()}

    def recorded(self, cfg) -> bool:
        """Whether cfg's own record (or, stopping on a tight median, its full-length one) costs
        it."""
        return cfg.key in self.work or (
            cfg.stop_when_tight and cfg.replace(stop_when_tight=False).key in self.fewest
        )

    def steps_s(self, cfg) -> float:
        """Seconds of cfg's steps: recorded, else predicted from a run of the same shape."""
        from megalab.metrics import WARMUP_STEPS
        from megalab.records.timings import MIN_TIMED

        if cfg.key in self.work:
            return self.work[cfg.key]
        if cfg.stop_when_tight and (same := cfg.replace(stop_when_tight=False).key) in self.fewest:
            return self.fewest[same]
        steps = min(cfg.iters, WARMUP_STEPS + MIN_TIMED) if cfg.stop_when_tight else cfg.iters
        each = self.per_pass.get(_shape(cfg))
        if each is None:  # no run of its shape: those of its width, per token of a micro-batch
            same = [s / (k[2] * k[3]) for k, s in self.per_pass.items() if k[0] == cfg.hidden]
            each = statistics.median(same or [1e-5]) * cfg.seq * cfg.mbs
        return self.first_s + (steps - 1) * each * _layer_passes(cfg)

    def fresh(self, cfg) -> float:
        """A run in its own launch: its launch to first step as recorded (else launch_s), its
        steps, GAP_S."""
        loose = cfg.replace(stop_when_tight=False).key
        launch = self.launched.get(cfg.key, self.launched.get(loose, self.launch_s))
        return launch + self.steps_s(cfg) + GAP_S

    def failed(self, cfg) -> float:
        """A probe that does not fit: its launch and the step that runs out of memory."""
        return self.launch_s + self.work.get(cfg.key, self.first_s) + GAP_S


@dataclass(frozen=True)
class Launch:
    """One run a reproduction launches: what, why, and its seconds."""

    label: str
    why: str
    seconds: float
    recorded: bool  # costed from its own record, not predicted
    key: str


def launches(page: str, gpus: int, quick: bool, costs: Costs | None = None) -> list[Launch]:
    """What a live reproduction of `page` on `gpus` GPUs launches, in order (ahead, then its
    chapter's runs, searches, parities, groups), each costed; [] for a page of no chapter."""
    from megalab.book import chapters, live
    from megalab.book.specs import Fit, Parity, Profiled, groups, items
    from megalab.jobs.sweep import reference_of
    from megalab.runs.config import RunConfig
    from megalab.train.batch import process_key, reusable

    chapter = live.chapter_of(page)
    if chapter is None or gpus < 1:
        return []
    costs = costs or Costs()
    r = chapters.runs(chapter, gpus)
    defining = chapters.defining(chapter, gpus)
    keys = set(live.quick_keys(page, gpus, costs.gpu)) if quick else None
    out: list[Launch] = []

    def measures(c, question: bool = False) -> bool:
        """Whether the reproduction launches c: full, all that fits here; quick, its defining
        points, and a search's probe or a parity's run that nothing records (a question the
        notebook asks; a plain run it reads without record is rare, and not counted)."""
        wanted = keys is None or c.key in keys or (question and not costs.anywhere[c.key])
        return c.gpus <= gpus and wanted

    made = Counter()  # records this reproduction holds, by (key, profiled): read back when asked

    def add(c, why: str, seconds: float, profiled: bool = False) -> None:
        made[c.key, profiled] += 1
        out.append(Launch(c.label, why, seconds, costs.recorded(c), c.key))

    grouped = {c.key for g in groups(defining if quick else r) for c in (*g.configs, g.warmup)}
    grouped |= {c.key for g in groups(defining if quick else r) for c in g.quick_runs()}
    plain = [c for c in (defining if quick else items(r)) if isinstance(c, RunConfig)]
    ahead = {c.key: c for c in plain if c.key not in grouped and c.gpus <= gpus and reusable(c)}
    shared = set()
    for c in ahead.values():
        first = process_key(c) not in shared
        shared.add(process_key(c))
        add(c, "ahead", costs.fresh(c) if first else costs.reused_s + costs.steps_s(c))
    for item in items(r):
        if isinstance(item, RunConfig) and measures(item) and not made[item.key, False]:
            add(item, "run", costs.fresh(item))
        elif isinstance(item, Profiled) and measures(item.cfg, question=True):
            if not made[item.cfg.key, True]:
                add(item.cfg, "profiled", costs.fresh(item.cfg), profiled=True)
        elif isinstance(item, Fit) and item.cfg.gpus <= gpus and item.gpu == costs.gpu:
            for probe, fits in _probes(item, quick, costs):
                if measures(probe, question=True) and not made[probe.key, False]:
                    add(probe, "search", costs.fresh(probe) if fits else costs.failed(probe))
        elif isinstance(item, Parity) and item.cfg.gpus <= gpus:
            # two distinct references (their spread), shared by every parity of that reference
            for c, n in ((reference_of(item.cfg), 2), (item.cfg, 1)):
                have = made[c.key, False] + (
                    0 if keys is None or c.key in keys else costs.anywhere[c.key]
                )
                for _ in range(max(0, n - have) if c.gpus <= gpus else 0):
                    add(c, "parity", costs.fresh(c))
    timed = [g for g in groups(defining if quick else r) if g.warmup.gpus <= gpus]
    for i, g in enumerate(timed):
        for c, _, profiled in g._runs(1 if quick else g.rounds, i == 0 and not out, quick):
            add(c, "group " + g.name + (" profiled" if profiled else ""), costs.fresh(c))
    return out


def _probes(fit, quick: bool, costs: Costs) -> list[tuple]:
    """(probe, fits) of the probes fit() launches, bisecting as it does (sweep.bisect): from the
    probes recorded on fit.gpu (quick: it reads them; full: it launches them all), each fitting as
    recorded, else as theory's memory model says."""
    from megalab import theory
    from megalab.jobs.sweep import bisect, with_value

    lo, hi = fit.window
    cfgs = [
        with_value(fit.cfg, fit.vary, v)
        for v in range(-(-lo // fit.step) * fit.step, hi + 1, fit.step)
    ]
    settled = {
        i: costs.status[c.key] == "ok"
        for i, c in enumerate(cfgs)
        if quick and costs.status.get(c.key) in ("ok", "oom", "invalid")
    }
    probed = []

    def fits(i: int) -> bool:
        status = costs.status.get(cfgs[i].key)
        ok = status == "ok" if status in ("ok", "oom") else theory.memory(cfgs[i], fit.gpu)["fits"]
        probed.append((cfgs[i], ok))
        return ok

    bisect(len(cfgs), settled, fits)
    return probed


@dataclass(frozen=True)
class Estimate:
    """The time a live reproduction should take, full and quick, in seconds (launches: PAGE_S
    and each launch's cost); `counted` of its `runs` launches are costed from their own records,
    the others from runs of the same shape."""

    page: str
    gpus: int
    gpu: str
    full_s: float
    quick_s: float
    runs: int
    counted: int
    quick_runs: int
    done: int = 0  # launches this reproduction measured already (read back, not counted)

    def __str__(self) -> str:
        left = f", {self.done} already measured by this reproduction" if self.done else ""
        return (
            f"{self.page} on {self.gpus} GPU(s): about {self.full_s / 60:.0f} min to finish in "
            f"full, {self.quick_s / 60:.0f} min with --quick ({self.quick_runs} runs); from the "
            f"start-up and step times recorded on {self.gpu}: {self.counted} of its {self.runs} "
            f"runs from their own records, the others from runs of the same shape{left}"
        )


def estimate(
    page: str, gpus: int, gpu: str = "H200", store=None, reproduction: str | None = None
) -> Estimate | None:
    """How long a live reproduction of `page` should take on `gpus` GPUs of model `gpu`, full and
    quick: the page's PAGE_S and what it launches (launches), each costed from the records. The
    runs `reproduction` already measured are left out. None for a page of no chapter."""
    from megalab.records import reproductions

    from megalab.book import live

    if live.chapter_of(page) is None or gpus < 1:
        return None
    costs = Costs(store, gpu)
    full, fast = launches(page, gpus, False, costs), launches(page, gpus, True, costs)
    done = Counter()
    if reproduction is not None:
        tag = reproductions.tag(reproduction)
        done = Counter(r.get("key") for r in costs.store.load("run", tag=tag))

    def seconds(runs: list[Launch]) -> float:
        left, total = Counter(done), PAGE_S
        for x in runs:
            if left[x.key] > 0:  # measured by this reproduction: read back
                left[x.key] -= 1
            else:
                total += x.seconds
        return total

    return Estimate(
        page=page,
        gpus=gpus,
        gpu=gpu,
        full_s=seconds(full),
        quick_s=seconds(fast),
        runs=len(full),
        counted=sum(x.recorded for x in full),
        quick_runs=len(fast),
        done=sum((done & Counter(x.key for x in full)).values()),
    )
