"""What a record says: the schema of one recorded run (`make_record`), the table view of many
(`to_frame`), and where they came from (`provenance`). Writing and reading them is `store.py`.

A run record (schema 1): id, key and label of the RunConfig, the config itself, status and error,
summary (metrics.summarize after the warm-up steps, plus startup and per-rank memory peaks), the
per-step series, theory's prediction, the environment it ran in (GPU, driver, CUDA, torch, Megatron
Core, Transformer Engine), git commit, time, tags, the run folder, for a profiled run its kernels,
and for a run over several nodes each node's environment ("nodes").
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from megalab.runs.axes import MODEL_PARALLEL, SHORT

SCHEMA = 1
RUNS, BENCH, ERRATA = "runs.jsonl", "bench.jsonl", "errata.jsonl"
SERIES_FIELDS = ("step", "loss", "step_time_s", "grad_norm")
SUMMARY_FIELDS = (
    "step_time_s",
    "tokens_per_s",
    "tflops_per_gpu",
    "mfu",
    "mem_allocated_peak_gib",
    "mem_reserved_peak_gib",
    "act_gib",
    "loss_first",
    "loss_last",
    "startup_s",
    "steps",
)
ENV_FIELDS = (
    "gpu_name",
    "gpu_count",
    "gpu_mem_gib",
    "interconnect",
    "driver",
    "cuda",
    "torch",
    "megatron_core",
    "transformer_engine",
    "python",
    "hostname",
    # two hosts of one GPU model launched kernels 2.2x apart, 32 CPUs against 64
    "cpu_count",
    # lent hosts all call themselves "vm": the boot tells one from the next (absent before)
    "boot_id",
    # spawn, forkserver or torchrun: what a launch to first step includes (absent before)
    "launcher",
)


# repeats of a configuration made for another comparison (back-to-back runs of one step, CUDA-graph
# pairs) or to check the launcher (tools/gpu/reuse_check.py, launch_check.py): results.select and
# the calibration read a configuration's own records first (is_repeat)
REPEAT_TAGS = ("spread", "graphs", "reuse-check", "launch-check")


# a plan's first run on a fresh host (tools/gpu/pack.py's `warmup!` line): it warms the host (the
WARMUP_TAG = "warmup"
# first run on a fresh host measured ~30% slow), so its step time is no timing


def is_repeat(record: dict) -> bool:
    """Whether a record is a repeat made for another comparison (REPEAT_TAGS), not its
    configuration's own."""
    return bool(set(record.get("tags") or ()) & set(REPEAT_TAGS))


# env field of a run made in a process that ran other runs too (megalab.jobs.reuse): "run 2 of 3"
REUSED = "reused_process"


def is_reused(record: dict) -> bool:
    """Whether a record's run shared its process with other runs (megalab.jobs.reuse)."""
    return bool((record.get("env") or {}).get(REUSED))


def _reused(outcome) -> dict:
    """{REUSED: "run i of n"} for a run of a shared process, else nothing (fresh runs keep their
    env as before)."""
    shared = getattr(outcome, "reused", None)
    return {REUSED: f"run {shared['position'] + 1} of {shared['runs']}"} if shared else {}


# the tag prefix of the runs a live reproduction of a page made (megalab.records.reproductions): a
# reader's own points, measured beside the book's; the book's records answer first (is_reproduced)
REPRODUCTION_PREFIX = "reproduction:"


def is_reproduced(record: dict) -> bool:
    """Whether a record was measured by a live reproduction (REPRODUCTION_PREFIX)."""
    return any(str(t).startswith(REPRODUCTION_PREFIX) for t in record.get("tags") or ())


def is_warmup(record: dict) -> bool:
    """Whether a record is a fresh host's warm-up run (WARMUP_TAG): trained, but not a timing."""
    return WARMUP_TAG in (record.get("tags") or ())


# Changes to the trainer that change how long a step takes: (UTC time it landed, commit, what
# changed). A record made before a change comes from an older trainer; timings compare only within
# one revision. The time and commit select records (a record keeps when and at which commit it was
# made), so they stay as recorded.
TRAINER_CHANGES = (
    (
        "2026-11-25T04:02:15Z",
        "70bfd18",
        "Transformer Engine's linears accumulate wgrad into main_grad; MoE "
        "permute and router fusion, CUTLASS grouped GEMM",
    ),
)


def trainer_revision(record: dict) -> int:
    """Which trainer made a record: how many TRAINER_CHANGES had landed when it was recorded (0: the
    first)."""
    at = record.get("recorded_at") or ""
    return sum(at >= when for when, *_ in TRAINER_CHANGES)


_LEAD = (
    "label",
    "key",
    "status",
    "model",
    "gpus",
    *SHORT,
    "sp",
    "mbs",
    "gbs",
    "seq",
    "num_microbatches",
)


def _flatten(d: dict, prefix: str) -> list[tuple[str, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _flatten(v, f"{prefix}{k}_")
        elif not isinstance(v, list):
            out.append((f"{prefix}{k}", v))
    return out


def trained(record: dict) -> bool:
    """The run trained every step it was set: status ok, or a timeout after the trainer's summary
    line (the launcher then stopped ranks that hung at exit; with EXIT_GRACE_S it keeps such a run
    as ok itself: CUDA-graph captures have trained every step and then hung until the time
    limit)."""
    summary, config = record.get("summary") or {}, record.get("config") or {}
    if record.get("status") == "ok":
        return True
    return (
        record.get("status") == "timeout"
        and "startup_marks_s" in summary
        and summary.get("steps") == config.get("iters")
    )


def label_of(record: dict) -> str | None:
    """The label the library gives the record's configuration now (older records stored a shorter
    one)."""
    from megalab.runs.config import RunConfig

    try:
        return RunConfig.from_dict(record["config"]).label
    except (KeyError, TypeError, ValueError):
        return record.get("label")


def to_frame(records: Iterable[dict]):
    """A pandas DataFrame, one row per record, flat columns: label, key, status, the config fields
    (model = config name, dp and num_microbatches derived), summary fields, gpu_name/gpu_count,
    predicted_<name> for the theory numbers (nested: predicted_memory_gib_total), error, tags,
    recorded_at, id."""
    import pandas as pd  # lazy: pandas is slow to import

    from megalab.runs.config import ADDED_FIELD_DEFAULTS

    rows = []
    for r in records:
        cfg = dict(r.get("config") or {})
        if cfg:  # a record made before a field existed ran with its default
            cfg = {**ADDED_FIELD_DEFAULTS, **cfg}
        row: dict = {"label": label_of(r), "key": r.get("key"), "status": r.get("status")}
        row["model"] = cfg.pop("name", None)
        row.update(cfg)
        try:
            row["dp"] = cfg["gpus"] // math.prod(cfg[a] for a in MODEL_PARALLEL)
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


def make_record(
    cfg,
    outcome,
    predicted: dict | None = None,
    env: dict | None = None,
    git_commit: str | None = None,
    tags: Iterable[str] = (),
) -> dict:
    """One schema-1 record from a RunConfig and a launch.RunOutcome.

    env defaults to the fingerprint the trainer printed in its summary line (the machine that ran),
    else this machine's. summary: metrics.summarize over the steps plus startup_s and per-rank
    peaks.
    """
    from megalab import metrics

    parsed = outcome.parsed if outcome.parsed is not None else metrics.Parsed()
    steps, final = parsed.steps, parsed.summary or {}
    summary = metrics.summarize(steps)
    summary["startup_s"] = final.get("startup_s")
    for name in (
        "startup_marks_s",
        "mem_allocated_peak_gib_per_rank",
        "mem_reserved_peak_gib_per_rank",
        "exit_hung_s",
    ):
        if final.get(name) is not None:
            summary[name] = final[name]
    if env is None:
        env = final.get("env")
    if env is None:
        from megalab.machine.env import fingerprint

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
        "env": {**{name: env.get(name) for name in ENV_FIELDS}, **_reused(outcome)},
        **(
            {"nodes": [{name: n.get(name) for name in ENV_FIELDS} for n in parsed.nodes]}
            if parsed.nodes
            else {}
        ),
        "git_commit": git_commit,
        "recorded_at": utc_now(),
        "tags": list(tags),
        "run_dir": str(outcome.run_dir) if outcome.run_dir is not None else None,
        **_profile(outcome.run_dir),
        **(
            {"routing": routing} if (routing := _read_json(outcome.run_dir, "routing.json")) else {}
        ),
    }


def _read_json(run_dir, name: str):
    """A JSON file the trainer left in the run folder, or None (absent or unreadable)."""
    path = Path(run_dir) / name if run_dir is not None else None
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _profile(run_dir) -> dict:
    """{"profile": ...} from a profiled run's profile.json (kernel time by category, one step's
    timeline), schedule.json (each pipeline stage's forward and backward passes of one step,
    megalab.train.stage_clock) and the other ranks' profile_rank<r>.json (their kernel time by
    category, under "ranks")."""
    out = dict(_read_json(run_dir, "profile.json") or {})
    if schedule := _read_json(run_dir, "schedule.json"):
        out["schedule"] = schedule
    others = sorted(Path(run_dir).glob("profile_rank*.json")) if run_dir is not None and out else []
    ranks = {p.stem.removeprefix("profile_rank"): _read_json(run_dir, p.name) for p in others}
    if ranks := {
        r: d["kernel_s_per_step"] for r, d in ranks.items() if d and "kernel_s_per_step" in d
    }:
        out["ranks"] = {"0": out.get("kernel_s_per_step"), **ranks}
    return {"profile": out} if out else {}


# -- checking a record made elsewhere (megalab results --import) ----------------------------------
_RUN_TYPES = {
    "schema": int,
    "id": str,
    "key": str,
    "label": str,
    "config": dict,
    "status": str,
    "error": (dict, type(None)),
    "summary": dict,
    "series": dict,
    "predicted": dict,
    "env": dict,
    "git_commit": (str, type(None)),
    "recorded_at": str,
    "tags": list,
    "run_dir": (str, type(None)),
}
_BENCH_TYPES = {
    "schema": int,
    "id": str,
    "kind": str,
    "bench": str,
    "env": dict,
    "recorded_at": str,
}
_TYPE_NAMES = {
    int: "a whole number",
    float: "a number",
    bool: "true or false",
    str: "text",
    dict: "an object",
    list: "a list",
}

# a reproduction record (records.reproductions: a page measured live, how long it took)
REPRODUCTION_EVENTS = ("started", "finished", "interrupted", "failed")
REPRODUCTION_MODES = ("live", "auto")  # a cached reproduction measures nothing: not recorded
_REPRODUCTION_TYPES = {
    "schema": int,
    "id": str,
    "kind": str,
    "reproduction": str,
    "page": str,
    "gpus": int,
    "mode": str,
    "quick": bool,
    "event": str,
    "seconds": (int, float, type(None)),
    "launched": (int, type(None)),
    "read_back": (int, type(None)),
    "quick_keys": list,
    "env": dict,
    "recorded_at": str,
}


def _reproduction_type_problems(record: dict) -> list[str]:
    """The fields of a reproduction record whose value has another type (a bool is no number)."""
    return [
        f"field {name!r} should be {_type_name(want)}, not {json.dumps(record[name])[:40]}"
        for name, want in _REPRODUCTION_TYPES.items()
        if name in record
        and (
            not isinstance(record[name], want)
            or (isinstance(record[name], bool) and want is not bool)
        )
    ]


def reproduction_problems(record: dict) -> list[str]:
    """Why a reproduction record does not fit: [] when it does."""
    types = _REPRODUCTION_TYPES
    out = [f"field {name!r} is missing" for name in types if name not in record and name != "id"]
    out += _reproduction_type_problems(record)
    if out:
        return out
    if not record["page"].strip() or not record["reproduction"].strip():
        out.append("fields 'page' and 'reproduction' need text")
    if record["gpus"] < 0:
        out.append(f"gpus={record['gpus']}: a count of 0 or more")
    if record["mode"] not in REPRODUCTION_MODES:
        out.append(f"mode={record['mode']!r}: pick one of {', '.join(REPRODUCTION_MODES)}")
    if record["event"] not in REPRODUCTION_EVENTS:
        out.append(f"event={record['event']!r}: pick one of {', '.join(REPRODUCTION_EVENTS)}")
    seconds = record["seconds"]
    if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
        out.append(f"seconds={seconds!r}: a number of 0 or more")
    if record["event"] != "started" and seconds is None:
        out.append(f"a {record['event']!r} record needs its seconds")
    for name in ("launched", "read_back"):
        if record[name] is not None and record[name] < 0:
            out.append(f"{name}={record[name]}: a count of 0 or more")
    if not all(isinstance(k, str) for k in record["quick_keys"]):
        out.append("field 'quick_keys' should hold run keys (text) only")
    if record["schema"] != SCHEMA:
        out.append(f"schema={record['schema']!r}: this megalab reads schema {SCHEMA}")
    return out


def _type_name(want) -> str:
    kinds = want if isinstance(want, tuple) else (want,)
    return " or ".join("null" if k is type(None) else _TYPE_NAMES[k] for k in kinds)


_FIELD_TYPES = {
    "int": (int,),
    "int | None": (int, type(None)),
    "float": (float, int),
    "str": (str,),
    "str | None": (str, type(None)),
    "bool": (bool,),
}


def _config_type_problems(config: dict) -> list[str]:
    import dataclasses

    from megalab.runs.config import RunConfig

    out = []
    for f in dataclasses.fields(RunConfig):
        if f.name in config:
            v, want = config[f.name], _FIELD_TYPES[f.type]
            if not isinstance(v, want) or (isinstance(v, bool) and bool not in want):
                out.append(f"config field {f.name!r} should be {f.type}, not {json.dumps(v)[:40]}")
    return out


_SUMMARY_TEXT, _SUMMARY_LISTS, _SUMMARY_MAPS = (
    {"warmup_policy"},
    {"mem_allocated_peak_gib_per_rank", "mem_reserved_peak_gib_per_rank"},
    {"startup_marks_s"},
)


def _is_amount(v) -> bool:
    """A measured amount: a finite, non-negative number (not a bool), or null where nothing was
    measured."""
    return v is None or _amounts([v])


def _amounts(values) -> bool:
    """Whether every value is a measured amount (_is_amount): one pass in C over a series of
    thousands."""
    import math

    numbers = [x for x in values if x is not None]
    # type(), not isinstance: no bools
    if not all(type(x) is float or type(x) is int for x in numbers):
        return False
    try:
        return not numbers or (math.isfinite(sum(numbers)) and min(numbers) >= 0)
    except OverflowError:  # an int no float can hold
        return False


def _measurement_problems(record: dict) -> list[str]:
    """Values in `summary` and `series` that are not measured amounts (text, negative, NaN, ...): a
    chapter computing a median or a ratio over them would crash, or quote nonsense, far from the
    cause."""
    out, summary, series = [], record.get("summary"), record.get("series")
    for name, v in summary.items() if isinstance(summary, dict) else ():
        if name in _SUMMARY_TEXT:
            ok = isinstance(v, str)
        elif name in _SUMMARY_LISTS:
            ok = isinstance(v, list) and _amounts(v)
        elif name in _SUMMARY_MAPS:
            ok = isinstance(v, dict) and _amounts(v.values())
        else:
            ok = _is_amount(v)
        if not ok:
            out.append(
                f"summary {name!r} should be a measured amount (a number >= 0, or null), not "
                f"{json.dumps(v)[:40]}"
            )
    for name, v in series.items() if isinstance(series, dict) else ():
        if not (isinstance(v, list) and _amounts(v)):
            out.append(f"series {name!r} should be a list of numbers >= 0 (or nulls)")
    return out


# what a terminal would act on: escape sequences, ...
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# the same, less tab and newline (a traceback)
_CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# UTC, as utc_now writes it
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)")
# clocks of the machines that record and import may differ this much
FUTURE_SLACK = timedelta(days=1)
# the rest: text or null
_ENV_TYPES = {"gpu_count": int, "cpu_count": int, "gpu_mem_gib": (int, float)}


def _time_problem(at: str) -> str | None:
    """Why `at` is no recording time: not UTC as utc_now writes it, no day of the calendar
    (2026-02-30), or later than now (the newest record of its configuration stands for it: one from
    the future would forever)."""
    try:
        when = datetime.fromisoformat(at.replace("Z", "+00:00")) if _TIME.fullmatch(at) else None
    except ValueError:
        when = None
    if when is None:
        return "is not a UTC time like 2026-01-31T12:00:00Z"
    if when > datetime.now(timezone.utc) + FUTURE_SLACK:
        return "is later than now: a record is made when its run ends"
    return None


def _text_problems(record: dict) -> list[str]:
    """Text an imported record would print raw on a reader's terminal (escape sequences retitle the
    window, clear the screen, hide text), and fields whose form the chapters rely on (time, env)."""
    out, bench = [], record.get("kind") == "bench"
    fields = [
        (name, record.get(name))
        for name in (
            "id",
            "key",
            "label",
            "status",
            "git_commit",
            "recorded_at",
            "run_dir",
            "kind",
            "bench",
        )
    ]
    fields += [
        (f"tags[{i}]", t) for i, t in enumerate(record.get("tags") or []) if isinstance(t, str)
    ]
    env = record.get("env") if isinstance(record.get("env"), dict) else {}
    fields += [(f"env.{k}", v) for k, v in env.items()]
    out += [
        f"{name} holds a control character ({json.dumps(v)[:40]}): records hold printable text only"
        for name, v in fields
        if isinstance(v, str) and _CONTROL.search(v)
    ]
    error = record.get("error") if isinstance(record.get("error"), dict) else {}
    out += [
        f"error.{k} holds a control character other than tab and newline: records hold printable "
        f"text only"
        for k, v in error.items()
        if isinstance(v, str) and _CONTROL_IN_TEXT.search(v)
    ]
    at = record.get("recorded_at")
    if isinstance(at, str):
        out += [f"recorded_at={at[:40]!r} {p}" for p in [_time_problem(at)] if p]
    for name, want in _ENV_TYPES.items():
        v = env.get(name)
        if v is not None and (not isinstance(v, want) or isinstance(v, bool) or not 0 <= v < 2**31):
            out.append(f"env.{name}={json.dumps(v)[:40]} should be a number of 0 or more, or null")
    out += [
        f"env.{k}={json.dumps(v)[:40]} should be text or null"
        for k, v in env.items()
        if k not in _ENV_TYPES and not isinstance(v, (str, type(None)))
    ]
    # what ran ran somewhere: chapters read its GPU
    if bench or record.get("status") not in (None, "invalid"):
        if not (isinstance(env.get("gpu_name"), str) and env["gpu_name"].strip()):
            out.append("env.gpu_name is missing: a measurement names the GPU it ran on")
        if not isinstance(env.get("gpu_count"), int):
            out.append(
                "env.gpu_count is missing: a measurement names how many GPUs the machine had"
            )
    return out


def type_problems(record: dict) -> list[str]:
    """The fields a record holds with the wrong type (what the full schema check, record_problems,
    also finds); missing fields are not its concern. The store's readers skip such records: a sum or
    a label over them would crash far from the cause."""
    if record.get("kind") == "reproduction":
        return _reproduction_type_problems(record)
    types = _BENCH_TYPES if record.get("kind") == "bench" else _RUN_TYPES
    out = [
        f"field {name!r} should be {_type_name(want)}, not {json.dumps(record[name])[:40]}"
        for name, want in types.items()
        if name in record and (not isinstance(record[name], want) or isinstance(record[name], bool))
    ]
    config = record.get("config")
    return (
        out
        + (_config_type_problems(config) if isinstance(config, dict) else [])
        + _measurement_problems(record)
        + _nodes_problems(record)
    )


def _nodes_problems(record: dict) -> list[str]:
    """A run over several nodes keeps each node's machine under "nodes" (a list of env objects);
    optional."""
    nodes = record.get("nodes", [])
    ok = isinstance(nodes, list) and all(isinstance(n, dict) for n in nodes)
    return [] if ok else ["field 'nodes' should be a list of objects (each node's env)"]


def record_problems(record) -> list[str]:
    """Why a record does not fit the schema make_record writes (a bench record: its own few fields);
    [] when it does. The config must load as a RunConfig whose key is the record's key, and a run
    that started (any status but "invalid") must have a layout megalab accepts."""
    if not isinstance(record, dict):
        return [f"a record is a JSON object, not {type(record).__name__}"]
    if record.get("kind") == "reproduction":
        return reproduction_problems(record) or _text_problems(record)
    bench = record.get("kind") == "bench"
    types = _BENCH_TYPES if bench else _RUN_TYPES
    # an
    out = [f"field {name!r} is missing" for name in types if name not in record and name != "id"]
    # import gives a record without an id one made from its content
    out += [
        f"field {name!r} should be {_type_name(want)}, not {json.dumps(record[name])[:40]}"
        for name, want in types.items()
        if name in record and (not isinstance(record[name], want) or isinstance(record[name], bool))
    ]
    if record.get("schema") != SCHEMA and "schema" not in " ".join(out):
        out.append(f"schema={record.get('schema')!r}: this megalab reads schema {SCHEMA}")
    if isinstance(record.get("id"), str) and not record["id"].strip():
        out.append("field 'id' is empty")
    if not out:
        out += _text_problems(record)
    if bench or out:
        return out
    from megalab.runs.config import RunConfig
    from megalab.metrics import STATUSES

    if record["status"] not in STATUSES:
        out.append(f"status={record['status']!r}: pick one of {', '.join(STATUSES)}")
    if not all(isinstance(t, str) for t in record["tags"]):
        out.append("field 'tags' should hold text only")
    try:
        cfg = RunConfig.from_dict(record["config"])
    except (TypeError, ValueError) as exc:
        return out + [f"config does not load: {exc}"]
    wrong = _config_type_problems(record["config"])
    if wrong:
        return out + wrong
    out += _measurement_problems(record) + _nodes_problems(record)
    if record["status"] == "ok" and not record["summary"].get("step_time_s"):
        out.append("an ok run needs summary 'step_time_s' > 0")
    if record["status"] != "invalid":
        out += [f"config: {p}" for p in cfg.problems()]
    else:  # a layout that could not start is a record; a name that cannot name a folder is not
        from megalab.runs.layout_rules import name_problem

        out += [f"config: {p}" for p in [name_problem(cfg.name)] if p]
    if cfg.key != record["key"]:
        out.append(f"key {record['key']!r} is not its config's key {cfg.key!r}")
    return out


PROVENANCE = (
    "gpu_name",
    "interconnect",
    "driver",
    "cuda",
    "torch",
    "megatron_core",
    "transformer_engine",
    "python",
)


def _short_commit(commit: str | None) -> str:
    """12 hex digits, keeping a "+dirty" mark (the run's tree differed from the commit)."""
    commit = commit or ""
    return commit.split("+")[0][:12] + ("+dirty" if commit.endswith("+dirty") else "")


# a fingerprint of several GPUs that says "none": made before megalab.machine.env read the NV# links
# of `nvidia-smi topo -m` (the 2-GPU hosts' records said "none" where the topology showed NV18)
LINK_NOT_READ = "not read"


def _link(env: dict):
    """A record's interconnect as provenance shows it: LINK_NOT_READ for "none" over 2+ GPUs."""
    link = env.get("interconnect")
    return LINK_NOT_READ if link == "none" and (env.get("gpu_count") or 0) >= 2 else link


def provenance(records: Iterable[dict]):
    """Where records come from: one row per distinct environment fingerprint and git commit, with
    the number of records, GPU counts seen and the first and last recording time (UTC). A
    multi-GPU fingerprint without a link reads LINK_NOT_READ (_link)."""
    import pandas as pd

    rows = [
        {
            **{f: (r.get("env") or {}).get(f) for f in PROVENANCE},
            "interconnect": _link(r.get("env") or {}),
            "gpus": (r.get("env") or {}).get("gpu_count"),
            "git_commit": _short_commit(r.get("git_commit")),
            "recorded_at": r.get("recorded_at"),
        }
        for r in records
    ]
    df = pd.DataFrame(rows, columns=[*PROVENANCE, "gpus", "git_commit", "recorded_at"])
    keys = [*PROVENANCE, "git_commit"]
    out = (
        df.fillna({"transformer_engine": "not installed"})
        .groupby(keys, dropna=False)
        .agg(
            records=("recorded_at", "size"),
            gpus=("gpus", lambda s: sorted(set(s.dropna().astype(int)))),
            first=("recorded_at", "min"),
            last=("recorded_at", "max"),
        )
    )
    return out.reset_index().sort_values("first", ignore_index=True)
