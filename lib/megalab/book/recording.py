"""The GPU host's recording plan, printed from the chapters' run definitions.

`megalab experiments ch01 --missing` lists what results/ does not answer yet, as tools/gpu/pack.py
lines (`<tag> <megalab args>`), in an order that keeps the host busy and times baselines alone. A
chapter's comparison groups (specs.Group) come first, each as one block: a warm-up run, its
configurations alternated (A B C A B C), its profiled run, every line alone on the host; then its
lessons (specs.Lesson), each run once, alone.
"""

from __future__ import annotations

from megalab.book import chapters
from megalab.runs.config import RunConfig
from megalab.book.specs import (
    Fit,
    Group,
    Lesson,
    Parity,
    Profiled,
    groups,
    items,
    lessons,
    line_for,
)

__all__ = ["is_recorded", "plan"]


def _gpu_of(item) -> str | None:
    return getattr(item, "gpu", None)


def is_recorded(item, store=None) -> bool:
    """Does the store answer this item in cached mode with settled outcomes (ok, oom, invalid),
    every run of a fit or parity included? A timeout or crash on record is worth recording again,
    unless the run trained every step and only its exit was cut (records.trained)."""
    from megalab.jobs.running import SETTLED, NotRecorded, run
    from megalab.jobs.sweep import ProbeFailed

    if isinstance(item, Group):
        return _group_recorded(item, store)
    if isinstance(item, Lesson):
        return _lesson_recorded(item, store)
    try:
        if isinstance(item, RunConfig):
            found = run(item, mode="cached", store=store, quiet=True)
            return found.status in SETTLED or found.trained
        result = item.run(mode="cached", store=store, quiet=True)
    except (NotRecorded, ProbeFailed):
        return False
    if isinstance(item, Parity):
        return all(r.status in SETTLED for r in [*result.reference, result.layout])
    if isinstance(item, Profiled):
        return result.status in SETTLED
    return True


def _group_recorded(group: Group, store) -> bool:
    """Every configuration of the group timed `rounds` times, and its profiled run, in one recording
    (timings.group: one host, commit and trainer)."""
    from megalab.records.timings import NotOneGroup, group_runs, loose_key

    try:
        timed, profiled = group_runs(store, group.name, _gpu_of(group) or "H200")
    except (LookupError, NotOneGroup):
        return False
    counts = [sum(loose_key(c) == loose_key(cfg) for c, _ in timed) for cfg in group.configs]
    return profiled is not None and min(counts) >= group.rounds


def _lesson_recorded(lesson: Lesson, store) -> bool:
    """Every configuration of the lesson has a settled record tagged with its name."""
    from megalab.records.store import as_store

    gpu = _gpu_of(lesson) or "H200"
    tagged = {
        c.key for c, r in as_store(store).runs_on(gpu, "ok") if lesson.tag in (r.get("tags") or ())
    }
    return all(c.key in tagged for c in lesson.configs)


# their 1-GPU points are scaling baselines: timed alone
SOLO_SERIES = ("weak", "weak_large", "weak_mbs16", "strong", "one_stage")


def _jobs(
    chapter: str,
    gpus: int,
    gpu: str,
    missing_only: bool,
    store,
    pending: bool = False,
    host_gpus: int | None = None,
) -> list[tuple]:
    """(order, line) pairs for pack.py: timing baselines alone first, then the widest jobs, fits
    early (they are chains of probes), reference runs, a `wait`, the parity layouts, and last the
    fits that take the whole host. On a host of `host_gpus` GPUs, a timed run narrower than the host
    runs alone too (pack.py would start another job beside it); profiled runs, fits and parity share
    the host."""
    from megalab.jobs.sweep import reference_of

    found = (chapters.pending if pending else chapters.runs)(chapter, gpus)
    jobs, refs = [], set()
    solo_keys = {
        c.key
        for name in SOLO_SERIES
        for c in items(found.get(name, []))
        if isinstance(c, RunConfig) and c.gpus == 1
    }
    seen = set()  # run keys and plan lines already planned
    for item in items(found):
        if (_gpu_of(item) or "H200") != gpu or (missing_only and is_recorded(item, store)):
            continue
        if isinstance(item, RunConfig):
            if item.key in seen:  # the same run in two series (a baseline of both): record it once
                continue
            seen.add(item.key)
            alone = item.key in solo_keys or (host_gpus is not None and item.gpus < host_gpus)
            order = 0 if alone else (2 if item.gpus == gpus else 4) - item.gpus / 1e3
            jobs.append((order, line_for(chapter + "!" * alone, "run", item)))
            continue
        line = item.plan_line(chapter)
        if line in seen:
            continue
        seen.add(line)
        if isinstance(item, Fit):
            jobs.append((8 if item.cfg.gpus == gpus else 3, line))
        elif isinstance(item, Parity):
            from megalab.records.store import find

            ref = reference_of(item.cfg)
            if ref.key not in refs:  # two repeats: the run-to-run spread sets the parity band
                refs.add(ref.key)
                have = (
                    len(find(ref, store=store, status="ok", profiled=False, gpu_model=gpu))
                    if missing_only
                    else 0
                )
                jobs += [(5, line_for(f"{chapter}-ref", "run", ref))] * max(0, 2 - have)
            jobs.append((7, line))
        else:
            jobs.append((1, line))
    # first, each a block: a group's warm-up run sets a fresh host going; then the lessons
    for block in [*groups(found), *lessons(found)]:
        if (_gpu_of(block) or "H200") == gpu and not (missing_only and is_recorded(block, store)):
            jobs += [(-1, line) for line in block.plan_lines()]
    jobs.sort(key=lambda j: j[0])
    if any(o == 7 for o, _ in jobs):
        jobs.insert(next(i for i, (o, _) in enumerate(jobs) if o == 7), (6, "wait"))
    return jobs


def plan(
    chapter: str,
    gpus: int = 4,
    gpu: str = "H200",
    missing_only: bool = False,
    store=None,
    pending: bool = False,
    host_gpus: int | None = None,
) -> list[str]:
    """pack.py lines (`<tag> <megalab args>`) for a chapter's records on `gpu` (fits for another GPU
    model left out), in an order that keeps the host busy; see tools/gpu/pack.py. `pending`: the
    runs queued for the chapter's next version instead of the ones it reads now. `host_gpus`: the
    GPUs of the host that runs the plan, when it has more than `gpus` (timed runs then run
    alone)."""
    chapter = chapters.key_of(chapter)
    return [line for _, line in _jobs(chapter, gpus, gpu, missing_only, store, pending, host_gpus)]


def read_plan(path) -> list[tuple[str, RunConfig]]:
    """(tag, RunConfig) of each `megalab run` line of a plan file (`<tag> <flags>`; # comments,
    blank lines)."""
    import argparse
    import shlex
    from pathlib import Path

    from megalab.runs.flags import add_config_args, config_from_args

    parser = add_config_args(argparse.ArgumentParser())
    parser.add_argument("--profile", action="store_true")
    out = []
    for line in Path(path).read_text().splitlines():
        words = shlex.split(line.split("#", 1)[0])
        if words and words[0] != "wait" and words[1:2] not in (["fit"], ["parity"]):
            out.append((words[0], config_from_args(parser.parse_args(words[1:]))))
    return out
