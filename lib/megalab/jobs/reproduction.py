"""The live reproduction a run belongs to, as `megalab.run` sees it from inside a notebook.

`megalab reproduce` (megalab.book.live) names the reproduction in $MEGALAB_REPRODUCTION for the
notebook's kernel. Then `run`, in live or auto mode:
- tags what it launches `reproduction:<id>`;
- answers a configuration this reproduction already measured (ahead of the notebook, earlier in
  it, or in an execution cut short and run again) from that record instead of launching it again:
  each call takes the oldest such record not yet handed out in this execution, else the oldest
  handed out (a configuration two of a chapter's lists share, the reference of several parities);
  repeats that must differ (a parity's two references, a group's rounds) exclude the records they
  hold already, and the one nothing answers is launched;
- in a quick reproduction, answers a configuration that is not one of its figures' defining points
  (the started record's `quick_keys`) from the store, when recorded, and measures the defining
  points live (in auto mode too, where this machine's GPU model has a record of them) when this
  machine has the GPUs;
- answers a configuration wider than the reproduction's GPUs (`--gpus 2`, a page showing TP 4)
  from the store, never launching it (megalab.book.beside: the book's points, the reader's beside).
Outside a reproduction (the variable unset) nothing changes.
"""

from __future__ import annotations

import contextlib
import os

ENV = "MEGALAB_REPRODUCTION"


class Context:
    """One execution of a reproduction: its id, its quick keys, its GPUs (None: not said), the
    records handed out so far."""

    def __init__(self, reproduction: str, quick_keys=None, gpus: int | None = None):
        self.id = reproduction
        self.quick_keys = None if quick_keys is None else frozenset(quick_keys)
        self.gpus = gpus
        self.handed: set[str] = set()

    @property
    def tag(self) -> str:
        from megalab.records.reproductions import tag

        return tag(self.id)

    def measured(self, cfg, store, exclude=(), profile: bool = False, tags=()) -> dict | None:
        """The oldest record of `cfg` this reproduction made, not in `exclude`, that this execution
        has not handed out yet, else the oldest it has (None: launch it). A comparison group's run
        (a group.* tag among `tags`) is answered only by a record of that group: a configuration two
        groups share is timed in each."""
        groups = {t for t in tags if str(t).startswith("group.")}
        found = [
            r
            for r in store.find(cfg, exclude=exclude, profiled=profile)
            if self.tag in (r.get("tags") or ()) and groups <= set(r.get("tags") or ())
        ]
        if not found:
            return None
        fresh = [r for r in found if r["id"] not in self.handed]
        record = (fresh or found)[-1]  # find is newest first
        self.handed.add(record["id"])
        return record

    def defines(self, cfg) -> bool:
        """Whether a quick reproduction re-measures `cfg` (one of its figures' defining points)."""
        return self.quick_keys is not None and cfg.key in self.quick_keys

    def wider(self, cfg) -> bool:
        """Whether `cfg` needs more GPUs than this reproduction has: the records answer for it."""
        return self.gpus is not None and cfg.gpus > self.gpus

    def skips(self, cfg) -> bool:
        """Whether a quick reproduction leaves `cfg` to the records (not a defining point)."""
        return self.quick_keys is not None and cfg.key not in self.quick_keys


_CURRENT: Context | None = None


def current(store=None) -> Context | None:
    """The reproduction this process runs under ($MEGALAB_REPRODUCTION), or None."""
    global _CURRENT
    name = os.environ.get(ENV)
    if not name:
        return None
    if _CURRENT is None or _CURRENT.id != name:
        from megalab.records.reproductions import started

        first = started(name, store) or {}
        quick = first.get("quick_keys") if first.get("quick") else None
        _CURRENT = Context(name, quick, first.get("gpus"))
    return _CURRENT


@contextlib.contextmanager
def active(reproduction: str):
    """Run a block (a notebook's execution) under `reproduction`: $MEGALAB_REPRODUCTION set for the
    kernel it starts, and a fresh execution (nothing handed out yet); the variable is restored
    after."""
    global _CURRENT
    before = os.environ.get(ENV)
    os.environ[ENV] = reproduction
    _CURRENT = None
    try:
        yield
    finally:
        _CURRENT = None
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
