"""A live reproduction of one page (`megalab reproduce chNN --mode live`): which one it resumes,
what it records (megalab.records.reproductions), what `--quick` re-measures, and how long it should
take.

    live = begin(notebook, parameters, quick=False, fresh=False)   # None in cached mode
    print(live.estimate(page, gpus))      # megalab.book.eta: what it launches, from the records
    with reproduction.active(live.id):    # the notebook's kernel runs under it
        warm(live)                        # its shareable runs first, one launch per world size
        execute(...)
    live.end("finished")                  # or "interrupted", "failed": seconds, runs launched

Resume: the same command run again after an interrupt (Ctrl-C, a crash, a killed process) takes up
the newest unfinished reproduction of the same page, GPU count, mode and quick setting; the runs it
measured are read back, not launched (megalab.jobs.reproduction). `fresh` starts a new one.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

# what a quick one launches, and how long it takes
from megalab.book.eta import Estimate, chapter_of, estimate, quick_keys  # noqa: F401
from megalab.records import reproductions


def page_of(notebook) -> str:
    """'04_context_parallel/context_parallel' for
    book/04_context_parallel/context_parallel.ipynb."""
    parts = Path(notebook).with_suffix("").parts
    return "/".join(parts[1:] if parts[:1] == ("book",) else parts)


# -- one reproduction
# -------------------------------------------------------------------------------
@dataclass
class Live:
    """One execution of a live reproduction of a page (begin makes it; end records how it ended)."""

    id: str
    page: str
    gpus: int
    mode: str
    quick: bool
    env: dict
    store: object
    read_back: int  # runs it measured before this execution: read back, not launched
    resumed: bool
    t0: float

    def measured(self) -> int:
        """How many runs this reproduction has recorded so far."""
        return len(self.store.load("run", tag=reproductions.tag(self.id)))

    def launch(self) -> str:
        """'launch to first step: median 14.2 s over 9 runs' of the runs this reproduction made
        (reproductions.launch), or '' when none has start-up marks."""
        seconds, n = reproductions.launch(self.id, self.store)
        return (
            ""
            if seconds is None
            else (f"launch to first step: median {seconds:.1f} s over {n} runs")
        )

    def end(self, event: str) -> dict:
        """Record how this execution ended ("finished", "interrupted" or "failed"), its seconds and
        the runs it launched and read back."""
        record = reproductions.make(
            self.id,
            self.page,
            self.gpus,
            self.mode,
            event,
            self.env,
            quick=self.quick,
            seconds=time.perf_counter() - self.t0,
            launched=self.measured() - self.read_back,
            read_back=self.read_back,
        )
        return self.store.append(record)


def begin(notebook, parameters: dict, quick: bool = False, fresh: bool = False, store=None):
    """Start (or resume) the live reproduction of a notebook executed with `parameters`; None when
    it measures nothing (mode cached). The started record is appended for a new one."""
    from megalab.machine.env import local_gpus
    from megalab.records.schema import utc_now
    from megalab.records.store import as_store

    mode = parameters.get("mode")
    if mode not in reproductions.MODES:
        return None
    store = as_store(store)
    gpu_name, count = local_gpus()
    gpus = int(parameters.get("gpus") or count)
    env = {"gpu_name": gpu_name, "gpu_count": count}
    page = page_of(notebook)
    found = None if fresh else reproductions.unfinished(page, gpus, mode, quick, store)
    live = Live(
        id=found or reproductions.new_id(page, gpus, utc_now()),
        page=page,
        gpus=gpus,
        mode=mode,
        quick=quick,
        env=env,
        store=store,
        read_back=0,
        resumed=found is not None,
        t0=time.perf_counter(),
    )
    if found is None:
        keys = quick_keys(page, gpus) if quick else []
        store.append(
            reproductions.make(
                live.id, page, gpus, mode, "started", env, quick=quick, quick_keys=keys
            )
        )
    live.read_back = live.measured()
    return live


# -- measured ahead, in shared launches
# ------------------------------------------------------------------------
def ahead(run: Live) -> list:
    """The runs a live reproduction measures before its notebook runs, in shared launches (warm):
    its chapter's plain runs (each configuration once; in a quick reproduction only its defining
    points) that fit on run.gpus, that this machine would launch now and that can share a process
    (train.batch.reusable: eager megalab runs), less what this reproduction has measured. Not the
    comparison groups' runs (each timed alone, fresh), profiled runs, fits or parity runs: the
    notebook launches those as it reaches them."""
    from megalab.book import chapters
    from megalab.book.specs import groups, items
    from megalab.jobs.running import would_launch
    from megalab.runs.config import RunConfig
    from megalab.train.batch import reusable

    chapter = chapter_of(run.page)
    if chapter is None:
        return []
    found = chapters.defining(chapter, run.gpus) if run.quick else chapters.runs(chapter, run.gpus)
    grouped = {c.key for g in groups(found) for c in (*g.configs, *g.quick_runs(), g.warmup)}
    done = {r.get("key") for r in run.store.load("run", tag=reproductions.tag(run.id))}
    cfgs = {c.key: c for c in items(found) if isinstance(c, RunConfig)}
    mode = "live" if run.quick else run.mode  # a quick one re-measures its defining points
    fit = [
        c
        for k, c in cfgs.items()
        if k not in grouped and k not in done and c.gpus <= run.gpus and reusable(c)
    ]
    return [c for c, here in zip(fit, would_launch(fit, mode, run.store)) if here]


def warm(run: Live, timeout_s: float | None = None) -> list:
    """Measure `ahead(run)` now, the runs of one world size in one launch (megalab.jobs.reuse:
    the interpreter, imports and process group paid once), each recorded as one of this
    reproduction's runs: the notebook then reads them back. Their records say they ran in a
    shared process. Returns the Results."""
    from megalab.jobs.running import DEFAULT_TIMEOUT_S, measure_many

    cfgs = ahead(run)
    if not cfgs:
        return []
    print(
        f"megalab reproduce: measuring {len(cfgs)} run(s) ahead, one launch per world size",
        file=sys.stderr,
    )
    tags = [reproductions.tag(run.id)]
    return measure_many(cfgs, run.store, tags, timeout_s or DEFAULT_TIMEOUT_S, quiet=True)


def add_args(p) -> None:
    """--quick, --resume, --fresh and --no-reuse (the options of a live reproduction) on a
    parser."""
    p.add_argument(
        "--quick",
        action="store_true",
        help="live: re-measure only each figure's defining points (the rest from the records)",
    )
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--resume",
        action="store_true",
        help="live: go on with the unfinished reproduction of the page, if any (the default)",
    )
    how.add_argument(
        "--fresh",
        action="store_true",
        help="live: start a new reproduction, re-measuring the runs an unfinished one made",
    )
    p.add_argument(
        "--no-reuse",
        dest="reuse",
        action="store_false",
        help="live: launch every run in its own processes (default: the runs outside comparison "
        "groups that can share a process are measured first, one launch per world size)",
    )


def wall_time(page: str, gpus: int | None = None, quick: bool = False, store=None):
    """reproductions.wall_time of `page`; a quick one counts only where it re-measured the points
    its chapter defines today (quick_keys): a figure given new defining points has no quick time
    until it is reproduced again."""
    current = (
        (lambda r: list(r.get("quick_keys") or []) == quick_keys(r["page"], r["gpus"]))
        if quick
        else None
    )
    return reproductions.wall_time(page, gpus, quick=quick, store=store, current=current)


def time_to_reproduce(page: str, gpus: int | None = None, quick: bool = False, gpu: str = "H200"):
    """A chapter's "How to reproduce" wall time (wall_time) where a live reproduction finished,
    else the same WallTime carrying the estimate from the recorded runs' start-up and step times
    (estimate; on `gpus`, or 4 when None), with the newest reproduction that finished on another
    GPU count having launched runs (`elsewhere`): never a time made up."""
    from dataclasses import replace

    took = wall_time(page, gpus, quick=quick)
    e = None if took.measured else estimate(page, gpus or 4, gpu)
    if e is None:
        return took
    other = wall_time(page, None, quick=quick)
    return replace(
        took,
        gpus=gpus or 4,
        gpu_name=gpu,
        estimated_s=e.quick_s if quick else e.full_s,
        elsewhere=other if other.measured and other.launched else None,
    )
