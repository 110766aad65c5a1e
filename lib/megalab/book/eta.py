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
Each launch is costed by megalab.records.costs (its launch to first step, its steps, its exit); a
page adds PAGE_S. A reproduction that measured runs already
(resumed) reads them back: estimate leaves them out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from megalab.records.costs import Costs

# Measured on 2×H200 (quick reproductions of ch01 and ch02): the notebook's kernel and cells take
# 10-15 s between runs; with its evidence page about 30 s
PAGE_S = 30.0


def chapter_of(page: str) -> str | None:
    """The chapter ('ch04') a page belongs to, or None (the planner, the hardware page, ...)."""
    from megalab.book import chapters

    try:
        return chapters.resolve(page.split("/")[0])
    except chapters.UnknownChapter:
        return None


def quick_keys(page: str, gpus: int, gpu: str = "H200") -> list[str]:
    """The run keys a quick reproduction of `page` launches: its chapter's defining points
    (megalab.book.chapters.defining); [] for a page of no chapter, or one that marks none."""
    from megalab.book import chapters
    from megalab.book.specs import keys_of

    chapter = chapter_of(page)
    if chapter is None or gpus < 1:
        return []
    return list(
        dict.fromkeys(k for item in chapters.defining(chapter, gpus) for k in keys_of(item))
    )


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
    from megalab.book import chapters
    from megalab.book.specs import Fit, Parity, Profiled, groups, items
    from megalab.jobs.sweep import reference_of
    from megalab.runs.config import RunConfig
    from megalab.train.batch import process_key, reusable

    chapter = chapter_of(page)
    if chapter is None or gpus < 1:
        return []
    costs = costs or Costs()
    # a page shows the book's runs, whatever `gpus` (the wider ones from the records), and times
    # the comparison groups `gpus` GPUs can form (chapters.BOOK_GPUS)
    r = chapters.runs(chapter, max(gpus, chapters.BOOK_GPUS))
    if gpus < chapters.BOOK_GPUS and "groups" in r:
        r = {**r, "groups": chapters.runs(chapter, gpus).get("groups", {})}
    defining = chapters.defining(chapter, gpus)
    keys = set(quick_keys(page, gpus, costs.gpu)) if quick else None
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
        elif isinstance(item, Parity):
            # two distinct references (their spread), shared by every parity of that reference; a
            # layout wider than `gpus` is read from the records, its one-GPU references measured
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
    page: str,
    gpus: int,
    gpu: str = "H200",
    store=None,
    reproduction: str | None = None,
    launcher: str | None = None,
) -> Estimate | None:
    """How long a live reproduction of `page` should take on `gpus` GPUs of model `gpu`, full and
    quick: the page's PAGE_S and what it launches (launches), each costed from the records as
    `launcher` starts runs (default: as they would start here, megalab.jobs.launch.launcher). The
    runs `reproduction` already measured are left out. None for a page of no chapter."""
    from megalab.jobs.launch import launcher as starts
    from megalab.records import reproductions

    if chapter_of(page) is None or gpus < 1:
        return None
    costs = Costs(store, gpu, launcher=launcher or starts())
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
