"""The results store: every run and microbenchmark ever recorded, as append-only JSON Lines.

Layout: `results/runs.jsonl` (training runs) and `results/bench.jsonl` (records with "kind": "bench"),
committed with the book. The folder is $MEGALAB_RESULTS, else `results/` in the megalab checkout,
else `./results`. One record per line (what a record holds: `records.py`).

Safety rules, because runs are killed, crash and run side by side:
- a writer holds an exclusive `fcntl.flock` on a sidecar `<file>.lock` while it appends;
- if the file does not end in "\\n" (a writer was killed mid-line) a "\\n" is written first, so the
  torn fragment stays alone on its line; lines are never rewritten, files never truncated;
- each record goes out as one `os.write` of its full bytes, then `fsync`;
- readers take a shared lock on the same file, skip torn lines and records with wrongly typed fields,
  and warn once with file:line and the reason; a process parses each state of a file once (the records
  handed out are shallow copies: their nested values are shared, read them, do not modify them);
- `import_records` checks every line of another store's file first (a bad one refuses the whole file),
  then merges it and skips ids already present.

Answering a configuration from these records (`megalab.run`) lives in `results.py`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import uuid
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

RUNS, BENCH, ERRATA = "runs.jsonl", "bench.jsonl", "errata.jsonl"
MAX_REASONS = 20  # reasons listed when an import is refused


class ImportRefused(ValueError):
    """A file to import is missing or holds records that do not fit the schema; nothing was imported."""


def default_root() -> Path:
    """$MEGALAB_RESULTS, else results/ in the megalab checkout, else ./results."""
    if os.environ.get("MEGALAB_RESULTS"):
        return Path(os.environ["MEGALAB_RESULTS"])
    from megalab.machine.env import repo_root
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "results"


def plain(obj: Any) -> Any:
    """Strict JSON: non-finite floats (a diverged loss) become null, keys become strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def _dumps(record: dict) -> bytes:
    return (json.dumps(plain(record), separators=(",", ":"), allow_nan=False) + "\n").encode()


def _content_id(record: dict) -> str:
    return hashlib.sha256(json.dumps(plain(record), sort_keys=True).encode()).hexdigest()[:32]


# -- the store -------------------------------------------------------------------------------------
class Store:
    """A results folder: runs.jsonl and bench.jsonl, appended under a lock, read tolerantly."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_root()

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def path(self, kind: str = "run") -> Path:
        return self.root / (BENCH if kind == "bench" else RUNS)

    # writing
    def append(self, record: dict) -> dict:
        """Append one record (an "id" is added if missing) and return it as stored."""
        record = dict(record)
        record.setdefault("id", uuid.uuid4().hex)
        self._write(self.path(record.get("kind", "run")), [record])
        return record

    def _write(self, path: Path, records: list[dict], skip_known_ids: bool = False) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(_lock_path(path), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
            if skip_known_ids:
                known = {r.get("id") for r in _read(path, warn=False)}  # lock=False: we hold it
                fresh = []
                for r in records:
                    if r["id"] not in known:
                        known.add(r["id"])
                        fresh.append(r)
                records = fresh
            if not records:
                return 0
            data = b"".join(_dumps(r) for r in records)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data  # isolate a torn last line left by a killed writer
                view = memoryview(data)
                while view:  # one write on regular files; loop only if the kernel wrote less
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        return len(records)

    def import_records(self, path: str | os.PathLike) -> int:
        """Merge the records of another JSONL file (e.g. brought back from a GPU host); returns how
        many were new. Ids already in this store are skipped; nothing is overwritten. The whole file is
        checked first (records.record_problems): one bad line refuses all of it (ImportRefused, with
        file:line reasons) and nothing is written."""
        incoming = []
        for r in _read_strict(Path(path)):
            r = dict(r)
            r.setdefault("id", _content_id(r))  # stable, so a second import skips it too
            incoming.append(r)
        added = 0
        for kind in ("run", "bench"):
            batch = [r for r in incoming if (r.get("kind") == "bench") == (kind == "bench")]
            if batch:
                added += self._write(self.path(kind), batch, skip_known_ids=True)
        return added

    # reading
    def load(self, kind: str = "run", **filters) -> list[dict]:
        """Records in file order that match every filter (see `matches`); a record with a wrongly typed
        field (records.type_problems: a hand edit, say) is skipped with a warning naming file:line."""
        return [r for r in _read(self.path(kind), lock=True, check=True) if matches(r, **filters)]

    def errata(self) -> dict[str, str]:
        """Record id -> reason, from errata.jsonl: records found wrong after they were made. A record is
        never edited or removed; an erratum (one line: {"ids": [...], "reason": ...}) retracts it instead."""
        return {i: e.get("reason", "") for e in _read(self.root / ERRATA) for i in e.get("ids", [])}

    def runs_on(self, gpu_model: str, status: str):
        """(RunConfig, record) of each run of `status` on GPU model `gpu_model` (same_gpu_model), in file order,
        less the retracted ones (errata) and those whose config no longer loads."""
        from megalab.runs.config import RunConfig
        retracted = set(self.errata())
        for r in self.load("run", status=status):
            if r.get("id") in retracted or not same_gpu_model((r.get("env") or {}).get("gpu_name"), gpu_model):
                continue
            try:
                yield RunConfig.from_dict(r["config"]), r
            except (KeyError, TypeError, ValueError):
                continue

    def find(self, cfg_or_key, gpu_name: str | None = None, status: str | None = None,
             exclude: Iterable[str] = (), gpu_model: str | None = None, profiled: bool | None = None) -> list[dict]:
        """Records of this configuration (a RunConfig or its key), newest first; retracted ones (errata) left out.
        gpu_name matches the recorded name exactly (case aside), gpu_model any name of that model
        (same_gpu_model); profiled=False skips runs made under torch.profiler (slower steps), True keeps only them."""
        key = cfg_or_key if isinstance(cfg_or_key, str) else cfg_or_key.key
        skip = set(exclude) | set(self.errata())
        gpu_of = lambda r: (r.get("env") or {}).get("gpu_name")  # noqa: E731
        found = [r for r in self.load(key=key, status=status) if r.get("id") not in skip
                 and (gpu_name is None or same_gpu_name(gpu_of(r), gpu_name))
                 and (gpu_model is None or same_gpu_model(gpu_of(r), gpu_model))
                 and (profiled is None or ("profile" in (r.get("tags") or [])) == profiled)]
        order = {id(r): i for i, r in enumerate(found)}
        return sorted(found, key=lambda r: (r.get("recorded_at") or "", order[id(r)]), reverse=True)


def same_gpu_name(a: str | None, b: str | None) -> bool:
    """The same GPU name, case and surrounding spaces aside."""
    return bool(a) and bool(b) and a.strip().casefold() == b.strip().casefold()


def same_gpu_model(a: str | None, b: str | None) -> bool:
    """"NVIDIA H200" and "H200" name one model (megalab.machine.hardware); unknown names must match exactly."""
    from megalab.machine.hardware import UnknownGPU, gpu_spec
    try:
        return bool(a) and bool(b) and gpu_spec(a).name == gpu_spec(b).name
    except UnknownGPU:
        return same_gpu_name(a, b)


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _read_locked(path: Path) -> bytes:
    """The file's bytes under a shared lock, so a reader never sees half of a record being appended
    (reads of a regular file are not atomic against a concurrent write). Lock-free if read-only."""
    if not path.exists():
        raise FileNotFoundError(path)
    try:
        lock = open(_lock_path(path), "a")
    except OSError:  # a read-only store (e.g. a packaged copy): nobody appends to it
        return path.read_bytes()
    with lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        return path.read_bytes()


def _lines(data: bytes):
    """(line number, parsed JSON or None, why it is not JSON or None) for each non-blank line."""
    for n, line in enumerate(data.split(b"\n"), start=1):
        if line.strip():
            try:
                yield n, json.loads(line), None
            except ValueError as exc:
                yield n, None, getattr(exc, "msg", str(exc))


_PARSED: dict[str, dict] = {}  # path -> its last state read: digest, lines (_lines of its bytes), unfit (when asked)


def _parsed(path: Path, data: bytes) -> dict:
    """The state of a file whose bytes are `data`: its `lines` (_lines, parsed once per state: a chapter reads the
    store hundreds of times, and parsing it each time was most of a notebook's run) and, once _unfit has checked
    them, its `unfit` lines. Keyed by a digest of the whole content, so an append, a torn line or any other change
    is read afresh. The parsed records are shared between reads: _read hands out shallow copies, and nested
    values (summary, series, ...) must not be modified in place."""
    digest = hashlib.blake2b(data, digest_size=16).digest()
    state = _PARSED.get(str(path))
    if state is None or state["digest"] != digest:
        state = _PARSED[str(path)] = {"digest": digest, "lines": list(_lines(data)), "unfit": None}
    return state


def _unfit(state: dict) -> dict[int, str]:
    """Lines of a file state (_parsed) whose record holds a wrongly typed field, each with its first problem
    (checked once per state)."""
    from megalab.records.schema import type_problems
    if state["unfit"] is None:
        state["unfit"] = {n: problems[0] for n, obj, _ in state["lines"]
                          if isinstance(obj, dict) and (problems := type_problems(obj))}
    return state["unfit"]


def _read(path: Path, warn: bool = True, lock: bool = False, check: bool = False) -> list[dict]:
    try:
        data = _read_locked(path) if lock else path.read_bytes()
    except FileNotFoundError:
        return []
    state, parsed, bad = _parsed(path, data), [], []
    for n, obj, _ in state["lines"]:
        if isinstance(obj, dict):
            parsed.append((n, dict(obj)))
        else:
            bad.append((n, "not a JSON object (a torn line)"))
    unfit = _unfit(state) if check else {}
    out = [obj for n, obj in parsed if n not in unfit]
    bad = sorted(bad + list(unfit.items()))
    if bad and warn:
        where = "; ".join(f"{path}:{n}: {why}" for n, why in bad[:10]) + (" ..." if len(bad) > 10 else "")
        warnings.warn(f"skipped {len(bad)} torn or invalid line(s) in the results store: {where}",
                      stacklevel=3)
    return out


def _read_strict(path: Path) -> list[dict]:
    """Every record of a file to import, or ImportRefused listing file:line and what is wrong."""
    from megalab.records.schema import record_problems
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ImportRefused(f"{path}: no such file: pass the path of a runs.jsonl or bench.jsonl to import") from None
    except OSError as exc:
        raise ImportRefused(f"{path}: cannot be read ({exc.strerror}): pass a JSON Lines file") from None
    out, reasons = [], []
    for n, obj, error in _lines(data):
        if error:
            reasons.append(f"{path}:{n}: not JSON ({error}): a torn or hand-edited line")
            continue
        reasons += [f"{path}:{n}: {p}" for p in record_problems(obj)]
        out.append(obj)
    if not out and not reasons:
        reasons.append(f"{path}: holds no records")
    if reasons:
        more = f"\n... and {len(reasons) - MAX_REASONS} more" if len(reasons) > MAX_REASONS else ""
        raise ImportRefused("\n".join(reasons[:MAX_REASONS]) + more)
    return out


def matches(record: dict, **filters) -> bool:
    """Each filter name=value compares record[name], else record["config"][name], else
    record["env"][name]. A value None is ignored, a callable is a predicate, a list/tuple/set lists
    allowed values; tag="x" keeps records whose tags include x."""
    for name, want in filters.items():
        if want is None:
            continue
        if name == "tag":
            if want not in (record.get("tags") or []):
                return False
            continue
        for part in (record, record.get("config") or {}, record.get("env") or {}):
            if name in part:
                have = part[name]
                break
        else:
            return False
        if callable(want):
            if not want(have):
                return False
        elif isinstance(want, (list, tuple, set, frozenset)):
            if have not in want:
                return False
        elif have != want:
            return False
    return True


# -- module-level verbs over the default store -----------------------------------------------------
def as_store(store) -> Store:
    """A Store from a Store, a folder, or None (the default folder)."""
    return store if isinstance(store, Store) else Store(store)


def load(kind: str = "run", store: Store | str | None = None, **filters) -> list[dict]:
    """Records of the store (default: `default_root()`) matching the filters; see `matches`."""
    return as_store(store).load(kind, **filters)


def find(cfg_or_key, store: Store | str | None = None, **kw) -> list[dict]:
    """Records of one configuration, newest first (gpu_name=, status=, exclude= narrow it)."""
    return as_store(store).find(cfg_or_key, **kw)


def import_records(path: str | os.PathLike, store: Store | str | None = None) -> int:
    """Merge another results file into the store; returns the number of new records."""
    return as_store(store).import_records(path)
