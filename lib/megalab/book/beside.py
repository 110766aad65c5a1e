"""A reader's reproduction beside the book's reference, where it measured only part of a figure.

A live reproduction on fewer GPUs than the book's (`megalab reproduce ch02 --mode live --quick
--gpus 2`) re-measures a comparison group's configurations that fit its machine; the wider ones
(TP 4 on a 2-GPU host) it cannot. The page's claims, glued values and hidden checks read the
whole figure, so there the book's recording answers (Group.run), and the reader's points stand
beside it:

    g = group.run(mode, gpu)         # the book's recording where yours lacks some of its points
    beside.partial(g)                 # True then
    beside.yours(g)                   # your recording of the group (timings.group), or None
    beside.note(g, ...)               # one line: what your GPUs re-measured, what they did not

A quick reproduction times each configuration once, where the book alternated them over two or
three rounds: its recording is too thin for the page's claims (their intervals, "at least twice
each"), so the book's recording answers there too, with yours beside it. A group your GPUs measured
whole, in as many rounds as the book's (a full 4-GPU reproduction of a 4-GPU chapter), is your
recording, as before: nothing here changes it.
"""

from __future__ import annotations

__all__ = ["YOURS", "with_reference", "partial", "yours", "note", "show"]

YOURS = "measured: your GPUs"  # the reader's bars beside the book's, in a figure's legend


def with_reference(mine, book, reproduction: str, gpu_model: str):
    """`mine` (a reader's recording of a group, timings.group) when it has every configuration
    `book` (the book's recording) has, in as many rounds; else `book`, marked: attrs["yours"] says
    where yours is (its reproduction tag and GPU model: yours() reads it back), which of its
    configurations it re-measured and in how many rounds; attrs["not_remeasured"] lists the
    book's configurations it did not (labels)."""
    from megalab.records.timings import loose_key

    measured = {loose_key(c) for c in mine["cfg"]}
    missing = [label for label, c in book["cfg"].items() if loose_key(c) not in measured]
    rounds = int(mine["runs"].min())
    if not missing and rounds >= int(book["runs"].min()):
        return mine
    out = book.copy()
    out.attrs = {
        **book.attrs,
        "yours": {
            "reproduction": reproduction,
            "gpu": gpu_model,
            "measured": [str(label) for label in mine.index],
            "rounds": rounds,
        },
        "not_remeasured": [str(label) for label in missing],
    }
    return out


def partial(g) -> bool:
    """Whether `g` is the book's recording standing for a reader's partial or thinner one
    (with_reference)."""
    return "yours" in g.attrs


def yours(g, store=None):
    """The reader's own recording behind a partial group `g` (timings.group of its reproduction),
    or None when `g` is not partial."""
    from megalab.records.timings import group

    if not partial(g):
        return None
    mark = g.attrs["yours"]
    return group(store, g.attrs["name"], mark["gpu"], mark["reproduction"])


def _words(cfg) -> str:
    from megalab.book.frame import describe

    eager = ", eager" if cfg.cuda_graphs == "none" else ""  # the others have CUDA graphs
    return f"{describe(cfg.replace(cuda_graphs='none'), model=True)}{eager}, global batch {cfg.gbs}"


def note(*groups) -> str:
    """One paragraph for the page where any of `groups` is partial: what the reader's GPUs
    re-measured (each configuration's median step, beside the book's) and what the book's records
    answer for (wider than the reader's machine, or another batch); '' otherwise."""
    from megalab.records.timings import loose_key

    said, kept = [], []
    for g in groups:
        if not partial(g):
            continue
        book = {loose_key(c): ms for c, ms in zip(g["cfg"], g["median_ms"])}
        mine = yours(g)
        for c, ms in zip(*(() if mine is None else (mine["cfg"], mine["median_ms"]))):
            theirs = book.get(loose_key(c))
            beside = "" if theirs is None else f", the book's {theirs:,.0f} ms"
            said.append(f"{_words(c)} ({ms:,.0f} ms a step{beside})")
        cfgs = dict(g["cfg"].items())
        kept += [_words(cfgs[label]) for label in g.attrs["not_remeasured"]]
    if not said and not kept:
        return ""
    said, kept = list(dict.fromkeys(said)), list(dict.fromkeys(kept))
    marked = [g for g in groups if partial(g)]
    mine = min(g.attrs["yours"]["rounds"] for g in marked)
    answer = (
        f"The book's records answer for what they did not: {'; '.join(kept)}. "
        if kept
        else f"Each was timed {'once' if mine == 1 else f'{mine} times'}, where the book "
        f"alternated them over {int(min(g['runs'].min() for g in marked))} rounds. "
    )
    return (
        f"Your GPUs re-measured {'; '.join(said) or 'none of these points'}. {answer}"
        "The figure and numbers below are the book's."
    )


def show(*groups) -> None:
    """Print note(*groups) where there is one (a cell of the page; nothing in the book's own
    execution)."""
    if said := note(*groups):
        print(said)
