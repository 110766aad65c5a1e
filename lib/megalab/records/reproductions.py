"""Reproductions of the book's pages: when `megalab reproduce` measured a page live, on what, and
how long it took; what a chapter's "How to reproduce" quotes (`wall_time`).

A reproduction is one page executed live (or auto) with one GPU count; its id names the page, the
GPUs and when it started ("04_context_parallel/context_parallel.2gpu.20261128T113000Z.1f3a"). Each
execution of it appends two records to `reproductions.jsonl` in the results store: "started"
(before the first cell) and how it ended ("finished", "interrupted" or "failed", with its seconds
and the runs it launched and read back). An interrupted reproduction is resumed by the same command
(megalab.book.live): the live runs it made carry the tag `reproduction:<id>` and are read back.
Its wall time is the sum of its executions' seconds.

    {"schema": 1, "id": ..., "kind": "reproduction", "reproduction": <id>, "page": ...,
     "gpus": 2, "mode": "live", "quick": false, "event": "finished", "seconds": 412.0,
     "launched": 6, "read_back": 2, "quick_keys": [...], "env": {"gpu_name": ..., "gpu_count": 2},
     "recorded_at": ...}
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from megalab.records.schema import (
    REPRODUCTION_PREFIX,
    REPRODUCTION_EVENTS as EVENTS,
    REPRODUCTION_MODES as MODES,  # noqa: F401  (re-exported: which modes are recorded)
    SCHEMA,
    reproduction_problems as problems,
    utc_now,
)

KIND = "reproduction"
ENDS = EVENTS[1:]
TAG_PREFIX = REPRODUCTION_PREFIX


class InvalidReproduction(ValueError):
    """A reproduction record with a missing or wrong field; the message names it."""


def tag(reproduction: str) -> str:
    """The tag of the live runs a reproduction made."""
    return TAG_PREFIX + reproduction


def new_id(page: str, gpus: int, started_at: str) -> str:
    """'<page>.<gpus>gpu.<started, compact UTC>.<4 hex digits>' (two started in one second
    differ)."""
    return f"{page}.{gpus}gpu.{started_at.replace('-', '').replace(':', '')}.{uuid.uuid4().hex[:4]}"


def make(
    reproduction: str,
    page: str,
    gpus: int,
    mode: str,
    event: str,
    env: dict,
    quick: bool = False,
    seconds: float | None = None,
    launched: int | None = None,
    read_back: int | None = None,
    quick_keys=(),
) -> dict:
    """One reproduction record; InvalidReproduction, naming the field, before anything is
    written."""
    record = {
        "schema": SCHEMA,
        "id": uuid.uuid4().hex,
        "kind": KIND,
        "reproduction": reproduction,
        "page": page,
        "gpus": gpus,
        "mode": mode,
        "quick": quick,
        "event": event,
        "seconds": None if seconds is None else float(seconds),
        "launched": launched,
        "read_back": read_back,
        "quick_keys": list(quick_keys),
        "env": {"gpu_name": env.get("gpu_name"), "gpu_count": env.get("gpu_count")},
        "recorded_at": utc_now(),
    }
    if found := problems(record):
        raise InvalidReproduction(f"reproduction record of {page!r}: " + "; ".join(found))
    return record


def load(store=None) -> list[dict]:
    """Every reproduction record of the store, in file order."""
    from megalab.records.store import as_store

    return as_store(store).load(KIND)


def started(reproduction: str, store=None) -> dict | None:
    """The "started" record of a reproduction (its first), or None."""
    return next(
        (
            r
            for r in load(store)
            if r.get("reproduction") == reproduction and r.get("event") == "started"
        ),
        None,
    )


def unfinished(page: str, gpus: int, mode: str, quick: bool = False, store=None) -> str | None:
    """The id of the newest reproduction of this page, GPU count, mode and quick setting that never
    finished (interrupted, failed or killed), or None: what `megalab reproduce` resumes."""
    records = [
        r
        for r in load(store)
        if (r.get("page"), r.get("gpus"), r.get("mode"), bool(r.get("quick")))
        == (page, gpus, mode, quick)
    ]
    done = {r["reproduction"] for r in records if r.get("event") == "finished"}
    open_ = [r["reproduction"] for r in records if r["reproduction"] not in done]
    return open_[-1] if open_ else None


def launch(reproductions, store=None) -> tuple[float | None, int]:
    """(median seconds from launch to the end of the first step, runs counted) over the trained
    runs the reproductions (ids) made, from their records' start-up marks (summary.startup_s):
    issue 48's launch measure. (None, 0) when none has one."""
    from statistics import median

    from megalab.records.store import as_store

    tags = {tag(r) for r in ([reproductions] if isinstance(reproductions, str) else reproductions)}
    seconds = [
        r["summary"]["startup_s"]
        for r in as_store(store).load("run")
        if tags & set(r.get("tags") or ()) and (r.get("summary") or {}).get("startup_s") is not None
    ]
    return (float(median(seconds)) if seconds else None), len(seconds)


@dataclass(frozen=True)
class WallTime:
    """How long a live reproduction of a page took: `seconds` is None when none finished."""

    page: str
    gpus: int | None
    seconds: float | None = None
    gpu_name: str | None = None
    mode: str | None = None
    quick: bool = False
    launched: int = 0
    read_back: int = 0
    executions: int = 0
    launch_s: float | None = None  # median launch to first step over its runs (launch)
    # where none finished: the time the recorded runs' start-up and steps predict (live.estimate),
    # and the GPU model they were recorded on
    estimated_s: float | None = None
    # where none finished on these GPUs: the newest that finished on another count, launching runs
    elsewhere: "WallTime | None" = None

    @property
    def measured(self) -> bool:
        return self.seconds is not None

    @property
    def minutes(self) -> float | None:
        return None if self.seconds is None else self.seconds / 60

    def __str__(self) -> str:
        """One worded sentence, wrapped at 88 columns so that a printed cell output never clips."""
        import textwrap

        how = "Quick" if self.quick else "Full"
        on = f"{self.gpus} GPUs" if self.gpus else "GPUs"
        if not self.measured and self.estimated_s is not None:
            text = (
                f"{how} live reproduction on {self.gpus} × {self.gpu_name or 'GPU'}: about "
                f"{self.estimated_s / 60:.0f} minutes, estimated from the recorded runs' start-up "
                "and step times (no reproduction of it is recorded)."
            )
        elif not self.measured:
            command = (
                f"megalab reproduce {self.page.split('/')[0]} --mode live"
                f"{' --quick' if self.quick else ''}"
            )
            text = f"{how} live reproduction on {on}: not yet measured; {command} records its time."
        else:
            text = (
                f"{how} live reproduction on {self.gpus} × {self.gpu_name or 'GPU'}: "
                f"{self.minutes:.{1 if self.minutes < 10 else 0}f} minutes ({self.launched} runs "
                f"launched, {self.read_back} read "
                "back from the records"
                + (
                    f"; launch to first step {self.launch_s:.0f} s, the median"
                    if self.launch_s is not None
                    else ""
                )
                + ")."
            )
        if self.elsewhere is not None:
            text += " Measured: " + str(self.elsewhere)
        return textwrap.fill(text, 88, break_on_hyphens=False)


def wall_time(
    page: str, gpus: int | None = None, quick: bool = False, store=None, current=None
) -> WallTime:
    """The newest finished live reproduction of `page` (a notebook as recorded,
    "04_context_parallel/context_parallel", or a chapter's folder, "04_context_parallel": its pages
    summed), on `gpus` GPUs when given: seconds summed over its executions (an interrupted one
    resumed counts each part). `current(started_record)`, when given, keeps only reproductions
    whose started record it accepts (megalab.book.live.wall_time: a quick one that re-measured
    today's defining points). Never made up: `measured` is False when none finished."""
    records = [
        r
        for r in load(store)
        if r.get("page") == page or str(r.get("page", "")).split("/")[0] == page
        if (gpus is None or r.get("gpus") == gpus) and bool(r.get("quick")) == quick
    ]
    if current is not None:
        kept = {r["reproduction"] for r in records if r.get("event") == "started" and current(r)}
        records = [r for r in records if r["reproduction"] in kept]
    done = [r for r in records if r.get("event") == "finished"]
    newest: dict[str, str] = {}  # page -> its newest finished reproduction
    for r in done:
        newest[r["page"]] = r["reproduction"]
    if not newest:
        return WallTime(page, gpus, quick=quick)
    ids = set(newest.values())
    ends = [r for r in records if r["reproduction"] in ids and r.get("event") in ENDS]
    last = done[-1]
    return WallTime(
        page=page,
        gpus=last["gpus"],
        seconds=sum(r["seconds"] for r in ends),
        gpu_name=(last.get("env") or {}).get("gpu_name"),
        mode=last["mode"],
        quick=quick,
        launched=sum(r.get("launched") or 0 for r in ends),
        read_back=sum(r.get("read_back") or 0 for r in done if r["reproduction"] in ids),
        executions=len(ends),
        launch_s=launch(ids, store)[0],
    )
