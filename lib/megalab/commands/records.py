"""`megalab results`, `env`, `experiments`, `chapters`, `reproduce` and `bench`: what is recorded,
what records it (the machine's fingerprint, the microbenchmarks, a chapter's recording plan), and
the book's pages executed over the records."""

from __future__ import annotations

import json
from pathlib import Path

from megalab.commands.shared import EXIT_OK, BadArgument, printable, table, to_json


_RESULT_COLUMNS = [
    "label",
    "status",
    "step_time_s",
    "tflops_per_gpu",
    "mfu",
    "mem_reserved_peak_gib",
    "loss_last",
    "gpu_name",
    "recorded_at",
    "key",
]
# what the table reads of a record
_LISTED = ("label", "key", "status", "config", "env", "recorded_at")


def _listed(record: dict) -> dict:
    """The part of a record the table shows (its series and profile are let go while the store
    streams by)."""
    summary = record.get("summary") or {}
    return {
        **{k: record[k] for k in _LISTED if k in record},
        "summary": {k: summary.get(k) for k in _RESULT_COLUMNS if k in summary},
    }


def cmd_results(ns) -> int:
    from megalab.jobs import running as results

    if ns.store and not Path(ns.store).is_dir():
        raise BadArgument(
            f"--store {ns.store}: no such folder: pass a results folder (one holding runs.jsonl)"
        )
    store = results.Store(ns.store)
    if ns.import_file:
        store.check()
        before = sum(1 for kind in ("run", "bench") for _ in store.stream(kind))
        added = store.import_records(ns.import_file)
        print(
            printable(
                f"imported {added} new record(s) into {store.root} ({before} were there before)"
            )
        )
        return EXIT_OK
    found = store.stream(
        ns.kind,
        status=ns.status,
        key=ns.key,
        label=(lambda s: ns.label in (s or "")) if ns.label else None,
    )
    if ns.json or ns.kind == "bench":  # JSON escapes every control character
        shown = 0
        for n, r in enumerate(found):
            print((("[" if n == 0 else ",") + "\n" + to_json(r)) if ns.json else json.dumps(r))
            shown += 1
        if ns.json:
            print("]" if shown else "[]")
        if shown or ns.json:
            return EXIT_OK
        found = []
    rows = [_listed(r) for r in found]
    if not rows:
        print(printable(f"no records in {store.path(ns.kind)} match"))
        return EXIT_OK
    frame = results.to_frame(rows)
    print(
        printable(frame[[c for c in _RESULT_COLUMNS if c in frame.columns]].to_string(index=False))
    )
    return EXIT_OK


def cmd_env(ns) -> int:
    from megalab.machine.env import fingerprint, git_commit

    info = {**fingerprint(), "git_commit": git_commit()}
    print(to_json(info) if ns.json else table(info))
    return EXIT_OK


def cmd_experiments(ns) -> int:
    from megalab.book.recording import plan

    for line in plan(
        ns.chapter,
        gpus=ns.gpus,
        gpu=ns.gpu,
        missing_only=ns.missing,
        pending=ns.pending,
        host_gpus=ns.host_gpus,
    ):
        print(line)
    return EXIT_OK


def cmd_chapters(ns) -> int:
    from megalab.book import chapters
    from megalab.book.reproduce import notebooks

    print(
        "chapters (megalab experiments NAME, megalab reproduce NAME; also as 01, 1 or "
        "data_parallel):"
    )
    for key, module in chapters.CHAPTERS.items():
        print(f"  {key}  {module.__name__.rsplit('.', 1)[1][2:]}")
    print("other pages (megalab reproduce NAME):")
    for page in notebooks():
        name = page.parent.name if page.parent.name != "book" else page.stem
        if name[:2] not in {key[2:] for key in chapters.CHAPTERS}:
            print(f"  {name}")
    return EXIT_OK


def cmd_reproduce(ns) -> int:
    from megalab.book.reproduce import reproduce

    if ns.gpus is not None and ns.gpus & (ns.gpus - 1):
        raise BadArgument(
            f"--gpus {ns.gpus}: the chapters' layouts scale over powers of two: pass 1, 2, 4 or 8"
        )
    if ns.quick and ns.mode == "cached":
        raise BadArgument("--quick re-measures a chapter's defining points: pass --mode live")
    return int(
        reproduce(ns.chapters or None, ns.mode, ns.gpus, ns.force, quick=ns.quick, fresh=ns.fresh)
        or 0
    )


def cmd_bench(ns) -> int:
    from megalab.jobs import bench

    try:
        return int(bench.main(ns.args) or 0)
    except SystemExit as e:  # its own parser: --help (0) or a usage error (2)
        return int(e.code or 0)
