"""The results store: every run and microbenchmark ever recorded, as append-only JSON Lines.

Layout: `results/runs.jsonl` (training runs) and `results/bench.jsonl` (records with "kind":
"bench"), committed with the book. The folder is $MEGALAB_RESULTS, else `results/` in the megalab
checkout, else `./results`. One record per line (what a record holds: `records.py`).

Safety rules, because runs are killed, crash and run side by side:
- a writer holds an exclusive `fcntl.flock` on a sidecar `<file>.lock` while it appends;
- if the file does not end in "\\n" (a writer was killed mid-line) a "\\n" is written first, so the
  torn fragment stays alone on its line; lines are never rewritten, files never truncated;
- each record goes out as one `os.write` of its full bytes, then `fsync`;
- readers take a shared lock on the same file, skip torn lines and records with wrongly typed
fields,
  and warn once with file:line and the reason; a process parses each state of a file once (the
  records
  handed out are shallow copies: their nested values are shared, read them, do not modify them);
- `import_records` checks every line of another store's file first (a bad one refuses the whole
file),
  then merges it and skips ids already present, all or nothing: a write that fails (a full disk) is
  cut
  back to the size the file had under the lock, in every file the import touched;
- only regular files are read or written: a symlinked, FIFO or device `runs.jsonl` (or lock) is
refused
  (StoreUnusable), and so is a line nested deeper than MAX_DEPTH or holding a number no float can
  hold;
- `stream` reads one line at a time (the command line's `megalab results` over a store of any size).

Answering a configuration from these records (`megalab.run`) lives in `results.py`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import re
import stat
import uuid
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

RUNS, BENCH, ERRATA = "runs.jsonl", "bench.jsonl", "errata.jsonl"
REPRODUCTIONS = "reproductions.jsonl"  # records with "kind": "reproduction" (records.reproductions)
FILES = {"bench": BENCH, "reproduction": REPRODUCTIONS}  # a record's kind -> its file (else RUNS)
MAX_REASONS = 20  # reasons listed when an import is refused
# nesting a record may have (a made record has 6): deeper ones crash json and pandas far away
MAX_DEPTH = 32
# a fast first look for 19 digits in a row
_DIGITS_AS_0 = bytes.maketrans(b"123456789", b"000000000")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class ImportRefused(ValueError):
    """A file to import is missing or holds records that do not fit the schema; nothing was
    imported."""


class NotRecorded(LookupError):
    """No recorded result matches this configuration; the message gives the command that records
    it."""


class StoreUnusable(ValueError):
    """The results folder or one of its files cannot be used (missing, not a folder, not a regular
    file, a full disk); the message says what to change. Nothing was written."""


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
        self.from_env = root is None and bool(os.environ.get("MEGALAB_RESULTS"))
        self.root = Path(root) if root is not None else default_root()

    def check(self, writing: bool = False) -> None:
        """Raise StoreUnusable if the folder cannot be a store: not a folder, or, named by
        $MEGALAB_RESULTS (a typo there must not read as an empty store), missing when read."""
        name = f"MEGALAB_RESULTS={self.root}" if self.from_env else f"results folder {self.root}"
        if self.root.exists() and not self.root.is_dir():
            raise StoreUnusable(
                f"{name}: not a folder: point it at a results folder (one holding runs.jsonl)"
            )
        if self.from_env and not writing and not self.root.exists():
            raise StoreUnusable(
                f"{name}: no such folder: fix the path (mkdir it for a new store), or unset it "
                f"to use results/"
            )

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def path(self, kind: str = "run") -> Path:
        return self.root / FILES.get(kind, RUNS)

    # writing
    def append(self, record: dict) -> dict:
        """Append one record (an "id" is added if missing) and return it as stored."""
        record = dict(record)
        record.setdefault("id", uuid.uuid4().hex)
        self._write(self.path(record.get("kind", "run")), [record])
        return record

    def _write(self, path: Path, records: list[dict], skip_known_ids: bool = False) -> int:
        return self._write_all({path: records}, skip_known_ids)

    def _write_all(self, batches: dict[Path, list[dict]], skip_known_ids: bool = False) -> int:
        """Append each path's records under its lock (all locks held together, taken in path order),
        all or nothing: a failed write cuts every file back to its size under the lock
        (StoreUnusable)."""
        self.check(writing=True)
        self.root.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            for path in sorted(batches):
                # released on close, or when the process dies
                stack.enter_context(_locked(path, fcntl.LOCK_EX))
            if skip_known_ids:
                batches = {path: _fresh(path, records) for path, records in batches.items()}
            data = {
                path: b"".join(_dumps(r) for r in records)
                for path, records in batches.items()
                if records
            }
            opened = []  # (fd, size before): what to cut back to if a later write fails
            try:
                for path, body in data.items():
                    opened.append(_append(path, body))
            except BaseException:
                for fd, size in opened:
                    # only our bytes: every writer waits on the locks we hold
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                raise
            finally:
                for fd, _ in opened:
                    os.close(fd)
        return sum(len(r) for r in batches.values())

    def import_records(self, path: str | os.PathLike) -> int:
        """Merge the records of another JSONL file (e.g. brought back from a GPU host); returns how
        many were new. Ids already in this store are skipped; nothing is overwritten. The whole file
        is checked first (records.record_problems): one bad line refuses all of it (ImportRefused,
        with file:line reasons) and nothing is written."""
        incoming = []
        for r in _read_strict(Path(path)):
            r = dict(r)
            r.setdefault("id", _content_id(r))  # stable, so a second import skips it too
            incoming.append(r)
        batches: dict[Path, list[dict]] = {}
        for r in incoming:
            batches.setdefault(self.path(r.get("kind", "run")), []).append(r)
        return self._write_all({p: b for p, b in batches.items() if b}, skip_known_ids=True)

    # reading
    def load(self, kind: str = "run", **filters) -> list[dict]:
        """Records in file order that match every filter (see `matches`); a record with a wrongly
        typed field (records.type_problems: a hand edit, say) is skipped with a warning naming
        file:line."""
        self.check()
        return [r for r in _read(self.path(kind), lock=True, check=True) if matches(r, **filters)]

    def stream(self, kind: str = "run", **filters):
        """The records `load` returns, one at a time, read a line at a time and kept by nobody: a
        store of any size in little memory (no cache; `load` is faster for a chapter's hundreds of
        reads)."""
        from megalab.records import type_problems

        self.check()
        path, bad = self.path(kind), []
        try:
            f, size = _open_snapshot(path)
        except FileNotFoundError:
            return
        with f:
            n, read = 0, 0
            for line in f:
                n, read = n + 1, read + len(line)
                if read > size:  # appended after the snapshot: the next reader sees it whole
                    break
                if not line.strip():
                    continue
                obj, why = _parse_line(line)
                if why is None and not isinstance(obj, dict):
                    why = "not a JSON object (a torn line)"
                if why is None and (problems := type_problems(obj)):
                    why = problems[0]
                if why is not None:
                    bad.append((n, why))
                elif matches(obj, **filters):
                    yield obj
        _warn_skipped(path, bad)

    def errata(self) -> dict[str, str]:
        """Record id -> reason, from errata.jsonl: records found wrong after they were made. A
        record is never edited or removed; an erratum (one line: {"ids": [...], "reason": ...})
        retracts it instead."""
        self.check()
        return {
            i: e.get("reason", "")
            for e in _read(self.root / ERRATA)
            if isinstance(e.get("ids"), list)
            for i in e["ids"]
            if isinstance(i, str)
        }

    def runs_on(self, gpu_model: str, status: str):
        """(RunConfig, record) of each run of `status` on GPU model `gpu_model` (same_gpu_model), in
        file order, less the retracted ones (errata) and those whose config no longer loads."""
        from megalab.runs.config import RunConfig

        retracted = set(self.errata())
        for r in self.load("run", status=status):
            if r.get("id") in retracted or not same_gpu_model(
                (r.get("env") or {}).get("gpu_name"), gpu_model
            ):
                continue
            try:
                yield RunConfig.from_dict(r["config"]), r
            except (KeyError, TypeError, ValueError):
                continue

    def find(
        self,
        cfg_or_key,
        gpu_name: str | None = None,
        status: str | None = None,
        exclude: Iterable[str] = (),
        gpu_model: str | None = None,
        profiled: bool | None = None,
    ) -> list[dict]:
        """Records of this configuration (a RunConfig or its key), newest first; retracted ones
        (errata) left out. gpu_name matches the recorded name exactly (case aside), gpu_model any
        name of that model (same_gpu_model); profiled=False skips runs made under torch.profiler
        (slower steps), True keeps only them."""
        key = cfg_or_key if isinstance(cfg_or_key, str) else cfg_or_key.key
        skip = set(exclude) | set(self.errata())
        gpu_of = lambda r: (r.get("env") or {}).get("gpu_name")  # noqa: E731
        found = [
            r
            for r in self.load(key=key, status=status)
            if r.get("id") not in skip
            and (gpu_name is None or same_gpu_name(gpu_of(r), gpu_name))
            and (gpu_model is None or same_gpu_model(gpu_of(r), gpu_model))
            and (profiled is None or ("profile" in (r.get("tags") or [])) == profiled)
        ]
        order = {id(r): i for i, r in enumerate(found)}
        return sorted(found, key=lambda r: (r.get("recorded_at") or "", order[id(r)]), reverse=True)


def same_gpu_name(a: str | None, b: str | None) -> bool:
    """The same GPU name, case and surrounding spaces aside."""
    return bool(a) and bool(b) and a.strip().casefold() == b.strip().casefold()


def same_gpu_model(a: str | None, b: str | None) -> bool:
    """ "NVIDIA H200" and "H200" name one model (megalab.machine.hardware); unknown names must match
    exactly."""
    from megalab.machine.hardware import UnknownGPU, gpu_spec

    try:
        return bool(a) and bool(b) and gpu_spec(a).name == gpu_spec(b).name
    except UnknownGPU:
        return same_gpu_name(a, b)


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _fresh(path: Path, records: list[dict]) -> list[dict]:
    """The records whose id is neither in the file (read under the caller's lock) nor earlier in the
    list."""
    known, fresh = {r.get("id") for r in _read(path, warn=False)}, []
    for r in records:
        if r["id"] not in known:
            known.add(r["id"])
            fresh.append(r)
    return fresh


def _open_regular(path: Path, flags: int, follow: bool = False) -> int:
    """os.open for a store file, refusing what is not a regular file: a symlink (O_NOFOLLOW: a
    swapped link would append to someone else's file), a FIFO or device (O_NONBLOCK: opening one
    must not hang) or a folder."""
    try:
        fd = os.open(
            path, flags | (0 if follow else os.O_NOFOLLOW) | os.O_NONBLOCK | os.O_CLOEXEC, 0o644
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreUnusable(
                f"{path}: a symbolic link: the store reads and writes regular files only; "
                f"replace it with the file it points to"
            ) from None
        if exc.errno == errno.EISDIR:
            raise StoreUnusable(
                f"{path}: a folder: move it away, the store keeps a file there"
            ) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = (
            "a folder"
            if stat.S_ISDIR(mode)
            else "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device or socket"
        )
        raise StoreUnusable(
            f"{path}: {what}, not a regular file: move it away, the store keeps a file there"
        )
    return fd


@contextlib.contextmanager
def _locked(path: Path, how: int):
    """Hold flock `how` on the sidecar `<file>.lock`; a read-only store (nobody appends to it) is
    read unlocked."""
    try:
        fd = _open_regular(_lock_path(path), os.O_RDWR | os.O_CREAT)
    except PermissionError:
        if how == fcntl.LOCK_EX:
            raise
        yield
        return
    except OSError as exc:
        if how == fcntl.LOCK_EX or exc.errno not in (errno.EROFS, errno.EACCES):
            raise StoreUnusable(f"{_lock_path(path)}: cannot be opened ({exc.strerror})") from None
        yield
        return
    try:
        fcntl.flock(fd, how)
        yield
    finally:
        os.close(fd)


def _append(path: Path, data: bytes) -> tuple[int, int]:
    """Write `data` at the end of `path` (the caller holds its lock) and fsync; returns (fd, size
    before). A write that fails (a full disk) is cut back to the size before and raises
    StoreUnusable."""
    fd = _open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    size = os.fstat(fd).st_size
    try:
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # isolate a torn last line left by a killed writer
        view = memoryview(data)
        while view:  # one write on regular files; loop only if the kernel wrote less
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        os.ftruncate(fd, size)
        os.close(fd)
        raise StoreUnusable(
            f"{path}: {exc.strerror or exc}: nothing was written; free some space and run the "
            f"same command again"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd, size


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _read_locked(path: Path) -> bytes:
    """The file's bytes under a shared lock, so a reader never sees half of a record being appended
    (reads of a regular file are not atomic against a concurrent write). Lock-free if read-only."""
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(path)
    with _locked(path, fcntl.LOCK_SH):
        return _read_all(_open_regular(path, os.O_RDONLY))


def _open_snapshot(path: Path):
    """(binary file, size): the file open for reading and its size under the shared lock; every
    record up to that size is whole (writers append under the lock, and nothing is ever
    rewritten)."""
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(path)
    with _locked(path, fcntl.LOCK_SH):
        fd = _open_regular(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb", buffering=1 << 20), size


def _too_deep(line: bytes) -> bool:
    """Whether a parsed JSON line nests deeper than MAX_DEPTH. Fast path: its brackets, innermost
    pairs peeled off; brackets inside strings can spoil that count, so a line it does not empty is
    counted exactly."""
    brackets = line.translate(None, _NOT_BRACKETS)
    # a pass peels one level or two: emptied after k passes, depth <= 2k
    for _ in range(MAX_DEPTH // 2 + 1):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
    brackets = re.sub(rb"[^\[\]{}]", b"", re.sub(rb'"(?:[^"\\]|\\.)*"', b"", line))
    for _ in range(MAX_DEPTH):
        if not brackets:
            return False
        brackets = re.sub(rb"\[\]|\{\}", b"", brackets)
    return bool(brackets)


class _HugeNumber(ValueError):
    pass


def _bounded_int(text: str) -> int:
    """json's parse_int for a line with 19 digits in a row: an int no float can hold (math.isfinite,
    pandas and the theory's arithmetic raise OverflowError on it) makes the line unusable."""
    value = int(text)
    if abs(value) >= 2**63:
        raise _HugeNumber(text)
    return value


def _parse_line(line: bytes):
    """(parsed JSON, None), or (None, why it cannot be used): not JSON, nested too deep, a number
    too long."""
    hook = _bounded_int if b"0" * 19 in line.translate(_DIGITS_AS_0) else None
    try:
        obj = json.loads(line, parse_int=hook)
    except _HugeNumber:
        return None, "holds a whole number beyond 2**63"
    # ValueError: not JSON, or an int of over 4,300 digits
    except (ValueError, RecursionError) as exc:
        return None, f"not JSON ({getattr(exc, 'msg', None) or type(exc).__name__})"
    if isinstance(obj, (dict, list)) and _too_deep(line):
        return None, f"nested deeper than {MAX_DEPTH} levels"
    return obj, None


def _lines(data: bytes):
    """(line number, parsed JSON or None, why it is not JSON or None) for each non-blank line."""
    for n, line in enumerate(data.split(b"\n"), start=1):
        if line.strip():
            obj, why = _parse_line(line)
            yield n, obj, why


# path -> its last state read: data (its bytes), lines (_lines of them), unfit (when asked)
_PARSED: dict[str, dict] = {}


def _parsed(path: Path, data: bytes) -> dict:
    """The state of a file whose bytes are `data`: its `lines` (_lines, parsed once per state: a
    chapter reads the store hundreds of times, and parsing it each time was most of a notebook's
    run) and, once _unfit has checked them, its `unfit` lines. Keyed by the whole content, compared
    byte for byte (a memcmp, some ten times faster than hashing it), so an append, a torn line or
    any other change is read afresh. The parsed records are shared between reads: _read hands out
    shallow copies, and nested values (summary, series, ...) must not be modified in place."""
    state = _PARSED.get(str(path))
    if state is None or state["data"] != data:
        state = _PARSED[str(path)] = {"data": data, "lines": list(_lines(data)), "unfit": None}
    return state


def _unfit(state: dict) -> dict[int, str]:
    """Lines of a file state (_parsed) whose record holds a wrongly typed field, each with its first
    problem (checked once per state)."""
    from megalab.records.schema import type_problems

    if state["unfit"] is None:
        state["unfit"] = {
            n: problems[0]
            for n, obj, _ in state["lines"]
            if isinstance(obj, dict) and (problems := type_problems(obj))
        }
    return state["unfit"]


def _read(path: Path, warn: bool = True, lock: bool = False, check: bool = False) -> list[dict]:
    try:
        data = _read_locked(path) if lock else _read_all(_open_regular(path, os.O_RDONLY))
    except FileNotFoundError:
        return []
    state, parsed, bad = _parsed(path, data), [], []
    for n, obj, why in state["lines"]:
        if isinstance(obj, dict):
            parsed.append((n, dict(obj)))
        else:
            bad.append((n, why or "not a JSON object (a torn line)"))
    unfit = _unfit(state) if check else {}
    out = [obj for n, obj in parsed if n not in unfit]
    if warn:
        _warn_skipped(path, sorted(bad + list(unfit.items())), stacklevel=4)
    return out


def _warn_skipped(path: Path, bad: list[tuple[int, str]], stacklevel: int = 3) -> None:
    if bad:
        where = "; ".join(f"{path}:{n}: {why}" for n, why in bad[:10]) + (
            " ..." if len(bad) > 10 else ""
        )
        warnings.warn(
            f"skipped {len(bad)} torn or invalid line(s) in the results store: {where}",
            stacklevel=stacklevel,
        )


def _read_strict(path: Path) -> list[dict]:
    """Every record of a file to import, or ImportRefused listing file:line and what is wrong."""
    from megalab.records.schema import record_problems

    try:
        data = _read_all(_open_regular(path, os.O_RDONLY, follow=True))
    except FileNotFoundError:
        raise ImportRefused(
            f"{path}: no such file: pass the path of a runs.jsonl or bench.jsonl to import"
        ) from None
    except StoreUnusable as exc:
        raise ImportRefused(
            f"{str(exc).split(': move it away')[0]}: pass a JSON Lines file"
        ) from None
    except OSError as exc:
        raise ImportRefused(
            f"{path}: cannot be read ({exc.strerror}): pass a JSON Lines file"
        ) from None
    out, reasons = [], []
    for n, obj, error in _lines(data):
        if error:
            reasons.append(f"{path}:{n}: {error}: a torn or hand-edited line")
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
