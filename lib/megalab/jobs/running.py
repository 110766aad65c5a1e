"""Answering a configuration: `run(cfg, mode)` (exported as `megalab.run`) answers "what does this
layout do?": live (launch it here and record it), cached (the newest recorded result, or NotRecorded
with the command that records it), auto (this machine's record, else a live run if it fits, else the
reference record).

The records themselves live in the append-only store (`store.py`, what a record holds:
`records.py`); their public names are re-exported here: `results.load(...)`, `results.Store`,
`results.to_frame(...)`.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from megalab.jobs import reproduction
from megalab.records.store import (  # noqa: F401  (re-exported: results.Store, results.load, ...)
    BENCH,
    NotRecorded,
    ERRATA,
    RUNS,
    Store,
    StoreUnusable,
    as_store,
    plain,
    same_gpu_name,
    default_root,
    find,
    import_records,
    load,
    matches,
    same_gpu_model,
)
from megalab.records.schema import (
    is_repeat,
    is_reproduced,
    is_warmup,
    label_of,
    make_record,
    to_frame,
    trained,
    utc_now,  # noqa: F401  (re-exported)
)  # noqa: F401  (re-exported)

MODES = ("live", "cached", "auto")
SOURCES = ("live", "cached", "reference")
DEFAULT_TIMEOUT_S = 1800


@dataclass
class Result:
    """One recorded run, and where it came from: source is "live", "cached" or "reference"."""

    record: dict
    source: str

    status = property(lambda self: self.record.get("status"))
    summary = property(lambda self: self.record.get("summary") or {})
    series = property(lambda self: self.record.get("series") or {})
    env = property(lambda self: self.record.get("env") or {})
    error = property(lambda self: self.record.get("error"))
    ok = property(lambda self: self.record.get("status") == "ok")
    # ok, or every step done and the exit hung
    trained = property(lambda self: trained(self.record))

    @property
    def label(self) -> str | None:
        """The configuration's label as the library names it now (older records stored a shorter
        one)."""
        return label_of(self.record)

    @property
    def config(self):
        """The RunConfig that was run."""
        from megalab.runs.config import RunConfig

        return RunConfig.from_dict(self.record["config"])

    def describe(self) -> str:
        """One line: label, status, where the number comes from."""
        env = self.env
        where = f"{env.get('gpu_count') or '?'}x {env.get('gpu_name') or 'unknown GPU'}"
        when = (self.record.get("recorded_at") or "")[:10]
        src = {
            "live": f"measured now on {where}",
            "cached": f"recorded on {where} ({when})",
            "reference": f"reference result recorded on {where} ({when}), not measured here",
        }
        why = f" ({(self.error or {}).get('message')})" if self.error else ""
        return f"[megalab] {self.label}: {self.status}{why}, {src.get(self.source, self.source)}"

    def __repr__(self) -> str:
        s = self.summary
        extra = (
            ""
            if not self.ok
            else (
                f", step_time_s={s.get('step_time_s')}, "
                f"tflops_per_gpu={s.get('tflops_per_gpu')}, mfu={s.get('mfu')}"
            )
        )
        return f"Result({self.label!r}, status={self.status!r}, source={self.source!r}{extra})"


# -- megalab.run -----------------------------------------------------------------------------------
def record_command(cfg) -> str:
    """The shell command that runs this configuration live and records it."""
    from megalab.runs.flags import config_to_args

    return shlex.join(["megalab", "run", *config_to_args(cfg), "--mode", "live"])


def not_recorded(cfg) -> NotRecorded:
    return NotRecorded(
        f"no recorded result for {cfg.label} (key {cfg.key}); record it on a machine "
        f"with {cfg.gpus} GPU(s): {record_command(cfg)}"
    )


def _local_hardware() -> tuple[str | None, int, bool]:
    """(gpu name, visible GPU count, Transformer Engine importable), without creating a CUDA
    context."""
    import importlib.util

    from megalab.machine.env import local_gpus

    return (*local_gpus(), importlib.util.find_spec("transformer_engine") is not None)


def _predict(cfg, gpu_name: str | None) -> dict:
    try:
        from megalab import theory

        plan = theory.plan(cfg, gpu_name or "H200")
    except Exception:  # prediction is decoration: a missing or failing model must not lose a run
        return {}
    return json.loads(json.dumps(plain(plan), default=str))  # plain JSON: numbers, strings, dicts


def _live(cfg, store: Store, tags, timeout_s, progress, launch_kw=None) -> Result:
    from megalab.jobs import launch
    from megalab.machine.env import git_commit

    launch_kw = launch_kw or {}
    # a $MEGALAB_COMMIT that is no commit name stops us before the run, not after
    commit = git_commit()
    outcome = launch.launch(cfg, timeout_s=timeout_s, progress=progress, **launch_kw)
    return _recorded(cfg, outcome, store, tags, commit, launch_kw)


def _recorded(cfg, outcome, store: Store, tags, commit, launch_kw=None) -> Result:
    """The record of a launched run, appended to the store (node 0's only, over several nodes)."""
    launch_kw = launch_kw or {}
    env = (outcome.parsed.summary or {}).get("env") if outcome.parsed else None
    # the peer prints no environment: this process fingerprints the host
    if cfg.runner == "megatron-lm":
        from megalab.jobs import peer
        from megalab.machine.env import fingerprint

        where = peer.source_dir(launch_kw.get("peer_dir"))
        env = {**fingerprint(), "runner": f"Megatron-LM pretrain_gpt.py ({peer.release(where)})"}
        tags = [*tags, "peer"]
    gpu = (env or {}).get("gpu_name") or _local_hardware()[0]
    record = make_record(
        cfg, outcome, predicted=_predict(cfg, gpu), env=env, git_commit=commit, tags=tags
    )
    # multi-node: node 0 records the run, the others only take part
    if launch_kw.get("node_rank", 0) > 0:
        return Result(record, "live")
    try:
        return Result(store.append(record), "live")
    # a full disk, a store made unusable while the run ran: keep it
    except (OSError, StoreUnusable) as exc:
        raise StoreUnusable(f"{exc}; {_keep(record, outcome.run_dir)}") from None


def _keep(record: dict, run_dir) -> str:
    """Keep a run's record that the store refused beside its log (record.jsonl) and say how to
    import it; where that fails too, print it whole to stderr."""
    line = json.dumps(plain(record), separators=(",", ":"))
    try:
        kept = Path(run_dir) / "record.jsonl"
        kept.write_text(line + "\n")
        return (
            f"the run's record is kept in {kept}: import it with `megalab results --import {kept}`"
        )
    except (OSError, TypeError):
        print(line, file=sys.stderr)
        return (
            "the run's record is printed above: save it to a file and import it with `megalab "
            "results --import`"
        )


SETTLED = ("ok", "oom", "invalid")


def select(
    cfg,
    mode: str,
    store: Store,
    gpu_name: str | None,
    gpus: int,
    te: bool,
    exclude: Iterable[str] = (),
    gpu: str | None = None,
    profile: bool = False,
) -> tuple[str, dict | None]:
    """The decision behind `run`: ("live", None), or ("cached"|"reference", record). Pure.
    `gpu` narrows the records read as a reference to one GPU model (the same config measured on an
    80 GB and a 141 GB card); this machine's own records are always preferred in auto mode.
    `profile` reads only profiled records (their steps are slower; other lookups skip them)."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: pick one of {', '.join(MODES)}")
    if mode == "live":
        return "live", None
    found = store.find(cfg, exclude=exclude, profiled=profile)
    # a repeat made for another comparison (REPEAT_TAGS: back-to-back spread, CUDA-graph pairs) or a
    # fresh host's warm-up run (WARMUP_TAG) answers only where the configuration has no record of
    # its own; a job that ran alone on its host times cleaner than one packed beside others
    # (tools/gpu/pack.py); a reader's live reproduction measured its own points beside the book's
    # records, which answer first (within the reproduction, reproduction.Context answers)
    found.sort(
        key=lambda r: (
            is_repeat(r) or is_warmup(r) or is_reproduced(r),
            "packed" in (r.get("tags") or ()),
        )
    )
    # a settled outcome (ok, oom, invalid) answers the question; a transient one (timeout,
    # nccl_error, failed) answers it only when nothing settled is recorded, and never hides a
    # settled one
    settled = [r for r in found if r.get("status") in SETTLED]
    on_gpu = [
        r for r in found if gpu is None or same_gpu_model((r.get("env") or {}).get("gpu_name"), gpu)
    ]
    records = [r for r in on_gpu if r.get("status") in SETTLED] or on_gpu
    if mode == "cached":
        if not records:
            raise not_recorded(cfg)
        return "cached", records[0]
    here = [r for r in settled if same_gpu_name((r.get("env") or {}).get("gpu_name"), gpu_name)]
    if here:  # a transient failure here is worth a new try
        return "cached", here[0]
    if gpus >= cfg.gpus and not cfg.problems(
        gpus_available=gpus, te_available=te, gpu_name=gpu_name
    ):
        return "live", None
    if records:
        return "reference", records[0]
    raise not_recorded(cfg)


def run(
    cfg,
    mode: str = "auto",
    tags: Iterable[str] = (),
    store: Store | str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: bool = True,
    exclude: Iterable[str] = (),
    quiet: bool = False,
    launch_kw: dict | None = None,
    gpu: str | None = None,
    profile: bool = False,
) -> Result:
    """Measure a configuration, or read its recorded measurement.

    mode="live": launch it on this machine and append the record (OOM and other failures are
    recorded too: they are results). mode="cached": the newest record of this configuration, any
    status, else NotRecorded. mode="auto": a record from this GPU model, else a live run when this
    machine has the GPUs (and Transformer Engine if needed), else the newest reference record.
    `exclude` skips record ids (parity uses it to read distinct repeats). `launch_kw` goes to
    launch.launch (nnodes, node_rank, rdzv_endpoint, extra trainer flags such as --profile).
    Under a live reproduction (megalab.jobs.reproduction) a run it already measured is read back,
    not launched again, a quick one launches only its figures' defining points, and a run wider
    than its GPUs is read from the records.
    `gpu` (e.g. "H100") reads only records made on that GPU model as the reference. `profile` runs
    with torch.profiler over a few steps (the record keeps the kernel timeline), or reads such a
    run. Prints one line saying which source answered when it is not a record read back (a run
    measured now, or the reference answering for a run this machine cannot make); a record read back
    prints nothing, so an executed chapter shows no per-run lines (a live run shows its progress
    bar).
    """
    cfg.validate()  # an impossible layout is answered as such, whatever the mode
    store = as_store(store)
    within = reproduction.current(store) if mode != "cached" else None
    if within is not None:
        if (mine := within.measured(cfg, store, exclude, profile, tags)) is not None:
            return Result(mine, "live")  # measured by this reproduction before it was cut short
        # a quick reproduction: not one of its figures' defining points; or wider than its GPUs
        if within.skips(cfg) or within.wider(cfg):
            try:
                return run(cfg, "cached", tags, store, exclude=exclude, gpu=gpu, profile=profile)
            except NotRecorded:
                if within.wider(cfg):
                    raise
        tags = [*tags, within.tag]
    gpu_name, gpus, te = _local_hardware() if mode != "cached" else (None, 0, False)
    if within is not None and within.defines(cfg) and gpus >= cfg.gpus:
        mode = "live"  # a quick reproduction re-measures a defining point this machine can run
    source, record = select(cfg, mode, store, gpu_name, gpus, te, exclude, gpu, profile)
    if profile:
        tags = [*tags, "profile"]
        launch_kw = {
            **(launch_kw or {}),
            "extra": [*(launch_kw or {}).get("extra", []), "--profile"],
        }
    result = (
        _live(cfg, store, list(tags), timeout_s, progress, launch_kw)
        if source == "live"
        else Result(record, source)
    )
    if not quiet and result.source != "cached":
        print(result.describe())
    return result


def run_many(
    cfgs,
    mode: str = "auto",
    reuse: bool = False,
    tags: Iterable[str] = (),
    store: Store | str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: bool = True,
    quiet: bool = False,
) -> list[Result]:
    """`run` for each configuration, one Result each, in order.

    reuse=True (off by default): the runs measured live here share one launch per world size
    (megalab.jobs.reuse): the interpreter, imports and process group are paid once. Each is still
    its own record, its env saying it ran in a reused process (env.reused_process); comparison
    groups refuse to mix those with fresh runs (records.timings.one_group). Runs tagged for a
    comparison group (group.*) and the runs of a live reproduction launch fresh, as `run` (a
    reproduction measures its shareable runs ahead, megalab.book.live.warm)."""

    cfgs, store, tags = list(cfgs), as_store(store), list(tags)
    one = lambda cfg: run(cfg, mode, tags, store, timeout_s, progress, quiet=quiet)  # noqa: E731
    fresh = any(t.startswith("group.") for t in tags) or reproduction.current(store) is not None
    if not reuse or fresh or mode == "cached":
        return [one(cfg) for cfg in cfgs]
    for cfg in cfgs:
        cfg.validate()  # an impossible layout is answered as such, before anything runs
    live = [i for i, here in enumerate(would_launch(cfgs, mode, store)) if here]
    found = measure_many([cfgs[i] for i in live], store, tags, timeout_s, quiet)
    measured = dict(zip(live, found))
    return [measured[i] if i in measured else one(c) for i, c in enumerate(cfgs)]


def would_launch(cfgs, mode: str, store: Store | str | None = None) -> list[bool]:
    """For each configuration, whether `run(cfg, mode)` would launch it on this machine now rather
    than read a record (select's decision; a live reproduction's read-backs aside); the machine is
    read once. False where nothing answers it (NotRecorded: `run` itself says so, loudly, when
    asked)."""
    store, here = as_store(store), _local_hardware()

    def one(cfg) -> bool:
        try:
            return select(cfg, mode, store, *here)[0] == "live"
        except NotRecorded:
            return False

    return [one(cfg) for cfg in cfgs]


def measure_many(
    cfgs,
    store: Store | str | None = None,
    tags: Iterable[str] = (),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    quiet: bool = False,
) -> list[Result]:
    """Launch every configuration here, those that can share a process in one launch per world
    size (megalab.jobs.reuse.launch_many), and record each, tagged `tags`; one Result each, in
    order."""
    from megalab.jobs.reuse import launch_many
    from megalab.machine.env import git_commit

    cfgs, store, commit = list(cfgs), as_store(store), git_commit()
    outcomes = launch_many(cfgs, timeout_s=timeout_s)
    found = [_recorded(c, o, store, list(tags), commit) for c, o in zip(cfgs, outcomes)]
    if not quiet:
        for result in found:
            print(result.describe())
    return found


def frame(
    results: Iterable[Result], reference_gpu: str | None = None, store: Store | str | None = None
):
    """One DataFrame row per Result (records.to_frame's columns) plus `source`: "yours" for a run
    measured here now, else "reference" — the column the book's charts use to mark a reader's own
    points. With `reference_gpu`, every run of yours also brings the reference record of the same
    configuration on that GPU model (when one is recorded), so charts draw your point beside the
    book's."""
    rows, sources = [], []
    for r in results:
        rows.append(r.record)
        sources.append("yours" if r.source == "live" else "reference")
        if r.source == "live" and reference_gpu:
            found = as_store(store).find(
                r.record.get("key") or r.config.key,
                status="ok",
                profiled=False,
                gpu_model=reference_gpu,
                exclude=[r.record.get("id")],
            )
            if found:
                rows.append(found[0])
                sources.append("reference")
    df = to_frame(rows)
    df["source"] = sources
    return df
