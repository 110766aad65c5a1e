"""Process reuse, the launch side: the runs that can share a process share one torchrun launch
(megalab.train.batch); each still gets its own run folder and RunOutcome, and so its own record.

    outcomes = reuse.launch_many(cfgs)   # one launch.RunOutcome per cfg, in the order given
    reuse.groups(cfgs)                   # [[i, ...], ...]: the runs of each launch

Off unless asked for: `megalab.run_many(cfgs, reuse=True)`. Runs share a launch when they agree on
the world size and on what a process reads once (train.batch.process_key); a run alone in its group,
a CUDA-graph run and the peer launch on their own (launch.launch), as without reuse. A run made in a
shared process carries RunOutcome.reused ({"position", "runs"}), which its record keeps in
env.reused_process: comparison groups refuse to mix such runs with fresh ones
(records.timings.one_group).

Each run has its own time limit, counted from its start in the worker. A run that fails is recorded
as failed and the worker goes on; a worker that dies or hangs (killed at the run's time limit)
records the run it was in with that failure, and the runs it had not started go to a fresh launch.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from pathlib import Path

from megalab import metrics
from megalab.jobs import launch
from megalab.train.batch import process_key, reusable


def groups(cfgs) -> list[list[int]]:
    """Indices into cfgs, one list per launch, in order of first appearance: the reusable runs of
    one process_key together, each other run alone."""
    out, by_key = [], {}
    for i, cfg in enumerate(cfgs):
        if not reusable(cfg):
            out.append([i])
            continue
        key = process_key(cfg)
        if key not in by_key:
            by_key[key] = []
            out.append(by_key[key])
        by_key[key].append(i)
    return out


def launch_many(
    cfgs,
    runs_root=None,
    timeout_s: float = launch.DEFAULT_TIMEOUT_S,
    dry_run: bool = False,
    env: dict | None = None,
    echo: bool = False,
) -> list[launch.RunOutcome]:
    """Run every configuration, those of one group (`groups`) in one launch; one RunOutcome each,
    in order (never raises for a failed run). InvalidLayout / NotEnoughGPUs before anything starts,
    as launch.launch."""
    cfgs = list(cfgs)
    for cfg in cfgs:
        cfg.validate() if dry_run else launch.check(cfg)
    outcomes = [None] * len(cfgs)
    for group in groups(cfgs):
        if len(group) == 1:
            outcomes[group[0]] = launch.launch(
                cfgs[group[0]],
                runs_root,
                timeout_s,
                progress=False,
                dry_run=dry_run,
                env=env,
                echo=echo,
            )
            continue
        dirs = {i: launch.new_run_dir(cfgs[i], runs_root) for i in group}
        todo = list(group)
        while todo:  # each launch settles at least its first run
            done = launch_batch(
                [cfgs[i] for i in todo], [dirs[i] for i in todo], timeout_s, dry_run, env, echo
            )
            for i, outcome in zip(todo, done):
                outcomes[i] = outcome
            todo = [i for i, outcome in zip(todo, done) if outcome is None]
    return outcomes


def batch_command(cfgs, batch_file: Path) -> list[str]:
    """megalab.train.batch as one rank per GPU of the (shared) world size (launch.one_node)."""
    return launch.one_node(cfgs[0].gpus, ["-m", "megalab.train.batch", str(batch_file)])


def launch_batch(cfgs, run_dirs, timeout_s, dry_run=False, env=None, echo=False) -> list:
    """One launch for `cfgs`, each writing into its run folder: a RunOutcome for each run the worker
    started, None for those it never reached (the worker died before)."""
    from megalab.runs.flags import config_to_args

    flags = ["--dry-run"] if dry_run else []
    batch_file = Path(run_dirs[0]) / "batch.jsonl"
    batch_file.write_text(
        "".join(
            json.dumps({"argv": [*config_to_args(c), "--run-dir", str(d), *flags]}) + "\n"
            for c, d in zip(cfgs, run_dirs)
        )
    )
    cmd = batch_command(cfgs, batch_file)
    for cfg, run_dir in zip(cfgs, run_dirs):
        (run_dir / "config.json").write_text(cfg.to_json() + "\n")
        (run_dir / "command.txt").write_text(shlex.join(cmd) + "\n")
    watch = _Watch(len(cfgs), timeout_s)
    logs = [open(d / "log.txt", "w", encoding="utf-8") for d in run_dirs]
    mfiles = [open(d / "metrics.jsonl", "w", encoding="utf-8") for d in run_dirs]
    launched_at = time.time()  # the first run's startup_s starts here, the others' at their start
    proc = launch.popen(cmd, {**launch.child_env(env), "MEGALAB_LAUNCH_T": repr(launched_at)})
    watch.proc = proc
    try:
        for raw in proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            watch.see(_marker(line))
            logs[watch.current].write(line + "\n")
            logs[watch.current].flush()
            if (obj := metrics.parse_line(line)) is not None:
                mfiles[watch.current].write(json.dumps(obj) + "\n")
                mfiles[watch.current].flush()
            if echo:
                print(line, flush=True)
        proc.wait()
    except BaseException:  # Ctrl-C / notebook interrupt: stop every rank, then re-raise
        launch.kill_group(proc, grace_s=3)
        raise
    finally:
        watch.stop()
        for f in logs + mfiles:
            f.close()
        proc.stdout.close()
        launch.kill_group(proc, grace_s=0)  # ranks that outlived torchrun would keep GPU memory
    return [
        _outcome(cfg, d, i, len(cfgs), watch, proc.returncode, dry_run)
        for i, (cfg, d) in enumerate(zip(cfgs, run_dirs))
    ]


def _marker(line: str) -> dict | None:
    """The worker's {"kind": "batch", ...} line, or None."""
    if not line.startswith('{"kind": "batch"'):
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


class _Watch:
    """Which run the worker is in, which ended with what status, and each run's time limit
    (restarted at every run's start; after the last run's end, launch.EXIT_GRACE_S for the exit)."""

    def __init__(self, runs: int, timeout_s: float):
        self.runs, self.timeout_s, self.proc = runs, timeout_s, None
        self.current, self.ended = 0, {}
        self.timed_out, self.timer = threading.Event(), None

    def see(self, marker: dict | None) -> None:
        if marker is None:
            return
        if "status" in marker:
            self.ended[marker["run"]] = marker["status"]
            if len(self.ended) == self.runs:
                self._arm(launch.EXIT_GRACE_S, exit_only=True)
            return
        self.current = marker["run"]
        self._arm(self.timeout_s)

    def _arm(self, seconds: float, exit_only: bool = False) -> None:
        self.stop()

        def expire():
            if not exit_only:
                self.timed_out.set()
            launch.kill_group(self.proc)

        self.timer = threading.Timer(seconds, expire)
        self.timer.daemon = True
        self.timer.start()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


def _outcome(cfg, run_dir, i: int, runs: int, watch: _Watch, returncode, dry_run: bool):
    """Run i's RunOutcome from its own log; None if the worker never reached it."""
    if i > watch.current and i not in watch.ended:
        return None
    text = (run_dir / "log.txt").read_text(encoding="utf-8")
    if i in watch.ended:
        code, late = (0 if watch.ended[i] == "ok" else 1), False
    else:  # the run the worker was in when it died or was stopped
        code, late = (returncode or 1), watch.timed_out.is_set()
    status, error = metrics.classify_failure(text, code, late)
    parsed = metrics.parse_log(text)
    if status == "ok" and not dry_run and not parsed.steps:
        status, error = (
            "failed",
            {
                "message": "the trainer reported no steps",
                "rank": None,
                "detail": "\n".join(text.splitlines()[-metrics.TRACEBACK_LINES :]),
            },
        )
    return launch.RunOutcome(
        status, error, parsed, run_dir, code, reused={"position": i, "runs": runs}
    )
