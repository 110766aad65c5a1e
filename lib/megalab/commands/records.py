"""`megalab results`, `env`, `experiments`, `chapters`, `reproduce` and `bench`: what is recorded, what
records it (the machine's fingerprint, the microbenchmarks, a chapter's recording plan), and the book's
pages executed over the records."""

from __future__ import annotations

import json
from pathlib import Path

from megalab.commands.shared import EXIT_OK, BadArgument, to_json, table


_RESULT_COLUMNS = ["label", "status", "step_time_s", "tflops_per_gpu", "mfu", "mem_reserved_peak_gib",
                   "loss_last", "gpu_name", "recorded_at", "key"]


def cmd_results(ns) -> int:
    from megalab.runs import running as results
    if ns.store and not Path(ns.store).is_dir():
        raise BadArgument(f"--store {ns.store}: no such folder: pass a results folder (one holding runs.jsonl)")
    store = results.Store(ns.store)
    if ns.import_file:
        before = len(store.load()) + len(store.load("bench"))
        added = store.import_records(ns.import_file)
        print(f"imported {added} new record(s) into {store.root} ({before} were there before)")
        return EXIT_OK
    records = store.load(ns.kind, status=ns.status, key=ns.key,
                         label=(lambda s: ns.label in (s or "")) if ns.label else None)
    if ns.json:
        print(to_json(records))
        return EXIT_OK
    if not records:
        print(f"no records in {store.path(ns.kind)} match")
        return EXIT_OK
    if ns.kind == "bench":
        for r in records:
            print(json.dumps(r))
        return EXIT_OK
    frame = results.to_frame(records)
    print(frame[[c for c in _RESULT_COLUMNS if c in frame.columns]].to_string(index=False))
    return EXIT_OK


def cmd_env(ns) -> int:
    from megalab.machine.env import fingerprint, git_commit
    info = {**fingerprint(), "git_commit": git_commit()}
    print(to_json(info) if ns.json else table(info))
    return EXIT_OK


def cmd_experiments(ns) -> int:
    from megalab.book.recording import plan
    for line in plan(ns.chapter, gpus=ns.gpus, gpu=ns.gpu, missing_only=ns.missing, pending=ns.pending,
                     host_gpus=ns.host_gpus):
        print(line)
    return EXIT_OK


def cmd_chapters(ns) -> int:
    from megalab.book import chapters
    from megalab.book.reproduce import notebooks
    print("chapters (megalab experiments NAME, megalab reproduce NAME; also as 01, 1 or data_parallel):")
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
    return int(reproduce(ns.chapters or None, ns.mode, ns.gpus, ns.force) or 0)


def cmd_bench(ns) -> int:
    from megalab.machine import bench
    try:
        return int(bench.main(ns.args) or 0)
    except SystemExit as e:  # its own parser: --help (0) or a usage error (2)
        return int(e.code or 0)
