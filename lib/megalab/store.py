"""The results store: every run and microbenchmark ever recorded, as append-only JSON Lines.

Layout: `results/runs.jsonl` (training runs) and `results/bench.jsonl` (records with "kind": "bench"),
committed with the book. The folder is $MEGALAB_RESULTS, else `results/` in the megalab checkout,
else `./results`. One record per line (schema 1, see `make_record`).

Safety rules, because runs are killed, crash and run side by side:
- a writer holds an exclusive `fcntl.flock` on a sidecar `<file>.lock` while it appends;
- if the file does not end in "\\n" (a writer was killed mid-line) a "\\n" is written first, so the
  torn fragment stays alone on its line; lines are never rewritten, files never truncated;
- each record goes out as one `os.write` of its full bytes, then `fsync`;
- readers take a shared lock on the same file, skip torn or invalid lines and warn once with file:line;
- `import_records` merges another store's file and skips ids already present.

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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA = 1
RUNS, BENCH, ERRATA = "runs.jsonl", "bench.jsonl", "errata.jsonl"
SERIES_FIELDS = ("step", "loss", "step_time_s", "grad_norm")
SUMMARY_FIELDS = ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "mem_allocated_peak_gib",
                  "mem_reserved_peak_gib", "loss_first", "loss_last", "startup_s", "steps")
ENV_FIELDS = ("gpu_name", "gpu_count", "gpu_mem_gib", "interconnect", "driver", "cuda", "torch",
              "megatron_core", "transformer_engine", "python", "hostname")


def default_root() -> Path:
    """$MEGALAB_RESULTS, else results/ in the megalab checkout, else ./results."""
    if os.environ.get("MEGALAB_RESULTS"):
        return Path(os.environ["MEGALAB_RESULTS"])
    from megalab.env import repo_root
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "results"


def _clean(obj: Any) -> Any:
    """Strict JSON: non-finite floats (a diverged loss) become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _dumps(record: dict) -> bytes:
    return (json.dumps(_clean(record), separators=(",", ":"), allow_nan=False) + "\n").encode()


def _content_id(record: dict) -> str:
    return hashlib.sha256(json.dumps(_clean(record), sort_keys=True).encode()).hexdigest()[:32]


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
        many were new. Ids already in this store are skipped; nothing is overwritten."""
        incoming = []
        for r in _read(Path(path)):
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
        """Records in file order that match every filter (see `matches`)."""
        return [r for r in _read(self.path(kind), lock=True) if matches(r, **filters)]

    def errata(self) -> dict[str, str]:
        """Record id -> reason, from errata.jsonl: records found wrong after they were made. A record is
        never edited or removed; an erratum (one line: {"ids": [...], "reason": ...}) retracts it instead."""
        return {i: e.get("reason", "") for e in _read(self.root / ERRATA) for i in e.get("ids", [])}

    def find(self, cfg_or_key, gpu_name: str | None = None, status: str | None = None,
             exclude: Iterable[str] = ()) -> list[dict]:
        """Records of this configuration (a RunConfig or its key), newest first; retracted ones (errata) left out."""
        key = cfg_or_key if isinstance(cfg_or_key, str) else cfg_or_key.key
        skip = set(exclude) | set(self.errata())
        found = [r for r in self.load(key=key, status=status) if r.get("id") not in skip
                 and (gpu_name is None or _same_gpu((r.get("env") or {}).get("gpu_name"), gpu_name))]
        order = {id(r): i for i, r in enumerate(found)}
        return sorted(found, key=lambda r: (r.get("recorded_at") or "", order[id(r)]), reverse=True)


def _same_gpu(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and a.strip().casefold() == b.strip().casefold()


def same_gpu_model(a: str | None, b: str | None) -> bool:
    """"NVIDIA H200" and "H200" name one model (megalab.hardware); unknown names must match exactly."""
    from megalab.hardware import UnknownGPU, gpu_spec
    try:
        return bool(a) and bool(b) and gpu_spec(a).name == gpu_spec(b).name
    except UnknownGPU:
        return _same_gpu(a, b)


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


def _read(path: Path, warn: bool = True, lock: bool = False) -> list[dict]:
    try:
        data = _read_locked(path) if lock else path.read_bytes()
    except FileNotFoundError:
        return []
    out, bad = [], []
    for n, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            out.append(obj)
        else:
            bad.append(n)
    if bad and warn:
        where = ", ".join(f"{path}:{n}" for n in bad[:10]) + (" ..." if len(bad) > 10 else "")
        warnings.warn(f"skipped {len(bad)} torn or invalid line(s) in the results store: {where}",
                      stacklevel=3)
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
def _store(store) -> Store:
    return store if isinstance(store, Store) else Store(store)


def load(kind: str = "run", store: Store | str | None = None, **filters) -> list[dict]:
    """Records of the store (default: `default_root()`) matching the filters; see `matches`."""
    return _store(store).load(kind, **filters)


def find(cfg_or_key, store: Store | str | None = None, **kw) -> list[dict]:
    """Records of one configuration, newest first (gpu_name=, status=, exclude= narrow it)."""
    return _store(store).find(cfg_or_key, **kw)


def import_records(path: str | os.PathLike, store: Store | str | None = None) -> int:
    """Merge another results file into the store; returns the number of new records."""
    return _store(store).import_records(path)


_LEAD = ("label", "key", "status", "model", "gpus", "tp", "pp", "vpp", "cp", "ep", "etp", "dp", "sp",
         "mbs", "gbs", "seq", "num_microbatches")


def _flatten(d: dict, prefix: str) -> list[tuple[str, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _flatten(v, f"{prefix}{k}_")
        elif not isinstance(v, list):
            out.append((f"{prefix}{k}", v))
    return out


def _label(record: dict) -> str | None:
    """The label the library gives the record's configuration now (older records stored a shorter one)."""
    from megalab.config import RunConfig
    try:
        return RunConfig.from_dict(record["config"]).label
    except (KeyError, TypeError, ValueError):
        return record.get("label")


def to_frame(records: Iterable[dict]):
    """A pandas DataFrame, one row per record, flat columns: label, key, status, the config fields
    (model = config name, dp and num_microbatches derived), summary fields, gpu_name/gpu_count,
    predicted_<name> for the theory numbers (nested: predicted_memory_gib_total), error, tags, recorded_at, id."""
    import pandas as pd  # lazy: pandas is slow to import

    rows = []
    for r in records:
        cfg = dict(r.get("config") or {})
        row: dict = {"label": _label(r), "key": r.get("key"), "status": r.get("status")}
        row["model"] = cfg.pop("name", None)
        row.update(cfg)
        try:
            row["dp"] = cfg["gpus"] // (cfg["tp"] * cfg["pp"] * cfg["cp"])
            row["num_microbatches"] = cfg["gbs"] // (cfg["mbs"] * row["dp"])
        except (KeyError, TypeError, ZeroDivisionError):
            row["dp"] = row["num_microbatches"] = None
        summary = r.get("summary") or {}
        for name in SUMMARY_FIELDS:
            row[name] = summary.get(name)
        env = r.get("env") or {}
        row["gpu_name"], row["gpu_count"] = env.get("gpu_name"), env.get("gpu_count")
        for name, value in _flatten(r.get("predicted") or {}, "predicted_"):
            row[name] = value
        row["error"] = (r.get("error") or {}).get("message")
        row["tags"] = list(r.get("tags") or [])
        row["recorded_at"], row["id"] = r.get("recorded_at"), r.get("id")
        rows.append(row)
    frame = pd.DataFrame(rows)
    lead = [c for c in _LEAD if c in frame.columns]
    return frame[lead + [c for c in frame.columns if c not in lead]]


# -- records ---------------------------------------------------------------------------------------
def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def make_record(cfg, outcome, predicted: dict | None = None, env: dict | None = None,
                git_commit: str | None = None, tags: Iterable[str] = ()) -> dict:
    """One schema-1 record from a RunConfig and a launch.RunOutcome.

    env defaults to the fingerprint the trainer printed in its summary line (the machine that ran),
    else this machine's. summary: metrics.summarize over the steps plus startup_s and per-rank peaks.
    """
    from megalab import metrics

    parsed = outcome.parsed if outcome.parsed is not None else metrics.Parsed()
    steps, final = parsed.steps, parsed.summary or {}
    summary = metrics.summarize(steps)
    summary["startup_s"] = final.get("startup_s")
    for name in ("mem_allocated_peak_gib_per_rank", "mem_reserved_peak_gib_per_rank"):
        if final.get(name) is not None:
            summary[name] = final[name]
    if env is None:
        env = final.get("env")
    if env is None:
        from megalab.env import fingerprint
        env = fingerprint()
    return {
        "schema": SCHEMA,
        "id": uuid.uuid4().hex,
        "key": cfg.key,
        "label": cfg.label,
        "config": cfg.to_dict(),
        "status": outcome.status,
        "error": outcome.error,
        "summary": summary,
        "series": {name: [s.get(name) for s in steps] for name in SERIES_FIELDS},
        "predicted": predicted or {},
        "env": {name: env.get(name) for name in ENV_FIELDS},
        "git_commit": git_commit,
        "recorded_at": utc_now(),
        "tags": list(tags),
        "run_dir": str(outcome.run_dir) if outcome.run_dir is not None else None,
        **_profile(outcome.run_dir),
    }


def _profile(run_dir) -> dict:
    """{"profile": ...} from a profiled run's profile.json (kernel time by category, one step's timeline)."""
    path = Path(run_dir) / "profile.json" if run_dir is not None else None
    if path is None or not path.is_file():
        return {}
    try:
        return {"profile": json.loads(path.read_text())}
    except (OSError, ValueError):
        return {}


PROVENANCE = ("gpu_name", "interconnect", "driver", "cuda", "torch", "megatron_core", "transformer_engine", "python")


def provenance(records: Iterable[dict]):
    """Where records come from: one row per distinct environment fingerprint and git commit, with the
    number of records, GPU counts seen and the first and last recording time (UTC)."""
    import pandas as pd

    rows = [{**{f: (r.get("env") or {}).get(f) for f in PROVENANCE},
             "gpus": (r.get("env") or {}).get("gpu_count"), "git_commit": (r.get("git_commit") or "")[:12],
             "recorded_at": r.get("recorded_at")} for r in records]
    df = pd.DataFrame(rows, columns=[*PROVENANCE, "gpus", "git_commit", "recorded_at"])
    keys = [*PROVENANCE, "git_commit"]
    out = df.fillna({"transformer_engine": "not installed"}).groupby(keys, dropna=False).agg(
        records=("recorded_at", "size"), gpus=("gpus", lambda s: sorted(set(s.dropna().astype(int)))),
        first=("recorded_at", "min"), last=("recorded_at", "max"))
    return out.reset_index().sort_values("first", ignore_index=True)
