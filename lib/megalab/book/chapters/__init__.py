"""Each chapter's runs, defined once: one module per chapter, `runs(gpus, ...)` returning them by
name.

A notebook asks for its runs here (`chapters.runs("ch01", gpus)`), and the GPU host's plan is
printed from the same definitions (`megalab experiments ch01 --missing`, megalab.book.recording). A
chapter is named "ch01", "01", "1" or "01_data_parallel" alike.

A new chapter: a module `chNN_<topic>.py` with `runs(gpus=4, iters=ITERS, ...) -> dict` (optionally
`pending(gpus)` for runs queued for its next version, `defining(gpus)` for the runs a quick
reproduction re-measures), a line in CHAPTERS, a notebook in
`book/NN_<topic>/` and a line in `_toc.yml`.
"""

from __future__ import annotations

import functools
from types import ModuleType

from megalab.book.chapters import (
    ch01_data_parallel,
    ch02_tensor_parallel,
    ch03_sequence_parallel,
    ch04_context_parallel,
    ch05_pipeline_parallel,
    ch06_expert_parallel,
    ch07_choosing_a_layout,
    performance_runs,
)

__all__ = [
    "BOOK_GPUS",
    "CHAPTERS",
    "PAGES",
    "UnknownChapter",
    "resolve",
    "key_of",
    "runs",
    "pending",
    "defining",
    "data_parallel",
    "tensor_parallel",
    "sequence_parallel",
    "context_parallel",
    "pipeline_parallel",
    "expert_parallel",
    "choosing_a_layout",
]

# the GPUs of the book's pages: a page executed for fewer (`megalab reproduce chNN --gpus 2`) still
# shows these layouts, the wider ones from the records, the reader's own points beside them
# (megalab.book.beside); only its comparison groups are timed on the reader's GPUs
BOOK_GPUS = 4

CHAPTERS: dict[str, ModuleType] = {
    "ch01": ch01_data_parallel,
    "ch02": ch02_tensor_parallel,
    "ch03": ch03_sequence_parallel,
    "ch04": ch04_context_parallel,
    "ch05": ch05_pipeline_parallel,
    "ch06": ch06_expert_parallel,
    "ch07": ch07_choosing_a_layout,
}
# pages that are not chapters but record runs the same way (`megalab experiments performance`)
PAGES: dict[str, ModuleType] = {"performance": performance_runs}



def _with_book_groups(runs_of):
    """A chapter's `runs`, whose comparison groups the reader's GPUs cannot form (ch01's overlap
    needs DP 2: none on 1 GPU) are the book's (BOOK_GPUS): Group.run then reads them from the
    records, as it does any group wider than the GPUs at hand, and the page's cells find every
    group they read."""

    @functools.wraps(runs_of)
    def runs(gpus: int = BOOK_GPUS, *args, **kw) -> dict:
        out = runs_of(gpus, *args, **kw)
        if gpus < BOOK_GPUS and "groups" in out:
            book = runs_of(BOOK_GPUS, *args, **kw)["groups"]
            out["groups"] = {**book, **out["groups"]}
        return out

    return runs


data_parallel = _with_book_groups(ch01_data_parallel.runs)
tensor_parallel = _with_book_groups(ch02_tensor_parallel.runs)
sequence_parallel = _with_book_groups(ch03_sequence_parallel.runs)
context_parallel = _with_book_groups(ch04_context_parallel.runs)
pipeline_parallel = _with_book_groups(ch05_pipeline_parallel.runs)
expert_parallel = _with_book_groups(ch06_expert_parallel.runs)
choosing_a_layout = _with_book_groups(ch07_choosing_a_layout.runs)


class UnknownChapter(KeyError):
    """No chapter has this name; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


def _folder(module: ModuleType) -> str:
    """'01_data_parallel' for megalab.book.chapters.ch01_data_parallel."""
    return module.__name__.rsplit(".", 1)[1][2:]


def resolve(name: str) -> str:
    """The registry key ('ch01') for 'ch01', '01', '1', '01_data_parallel' or 'data_parallel'."""
    text = str(name).strip().rstrip("/").rsplit("/", 1)[-1]
    for key, module in CHAPTERS.items():
        folder = _folder(module)
        if text in (key, key[2:], str(int(key[2:])), folder, folder[3:]):
            return key
    valid = ", ".join(f"{k} ({_folder(m)})" for k, m in CHAPTERS.items())
    raise UnknownChapter(f"unknown chapter {name!r}: pick one of {valid}")


def runs(name: str, gpus: int = 4, **kw) -> dict:
    """A chapter's runs by name, scaled to `gpus`."""
    return _module(name).runs(gpus, **kw)


def pending(name: str, gpus: int = 4) -> dict:
    """Runs queued for a chapter's next version (recorded by `megalab experiments chNN --pending`,
    then moved into its `runs` once their records are committed); {} when nothing is queued."""
    module = _module(name)
    return module.pending(gpus) if hasattr(module, "pending") else {}


def key_of(name: str) -> str:
    """resolve's key for a chapter; a page of PAGES ('performance') by its own name."""
    return name if name in PAGES else resolve(name)


def _module(name: str) -> ModuleType:
    return PAGES[name] if name in PAGES else CHAPTERS[resolve(name)]


def defining(name: str, gpus: int = 4, **kw) -> list:
    """The runs that define a chapter's figures (its module's `defining(gpus)`: the points a reader
    re-measures beside the reference with `megalab reproduce chNN --mode live --quick`, with the
    chapter's own CUDA-graph and comparison-group settings, since they are its own RunConfigs); []
    when the chapter marks none (a quick reproduction then launches only what nothing records).
    The comparison groups (specs.Group) it marks are those its timing figures read (Group.run):
    each comes with what a quick reproduction launches of it (Group.quick_runs: its warm-up and
    configurations, each stopping on a tight median), so the reader's points are timed like the
    book's."""
    from megalab.book import specs

    module = _module(name)
    marked = list(module.defining(gpus, **kw)) if hasattr(module, "defining") else []
    quick = [
        c
        for g in marked
        if isinstance(g, specs.Group) and g.warmup.gpus <= gpus
        for c in g.quick_runs()
    ]
    have = {k for item in marked for k in specs.keys_of(item)}
    return marked + list({c.key: c for c in quick if c.key not in have}.values())
