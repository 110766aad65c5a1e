"""Start the trainer's ranks, watch them, and keep everything they printed.

    launch(cfg)  ->  python -m megalab.jobs.spawn --nproc=N -- \\
                         -m megalab.train <config flags> --run-dir runs/<label>-<UTC time>

(one node; torchrun for several nodes, for Megatron-LM's pretrain_gpt.py and where
MEGALAB_LAUNCHER=torchrun: torchrun_command). Below, "torchrun" is whichever starts the ranks.

The run folder holds config.json, log.txt (stdout and stderr of all ranks, as printed) and
metrics.jsonl (the metrics lines, see metrics.py). The child runs in its own session so a timeout
or Ctrl-C stops the whole process group, and the ranks torchrun starts (each in a session of its
own) are stopped by name: no orphaned rank keeps holding GPU memory. A SIGTERM to this process
(`timeout`, `kill`, a scheduler's preemption) is forwarded the same way and the run is recorded as a
timeout; if this process dies without a word (kill -9), the kernel sends torchrun SIGTERM
(PR_SET_PDEATHSIG) and torchrun stops its ranks; a torchrun killed with -9 takes its ranks with it
the same way (megalab.train.parent). A run that fails (OOM, NCCL error, timeout, exception) returns
a RunOutcome with that status: failures are results. Only a configuration that cannot start here
raises, before anything is spawned.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from megalab import metrics
from megalab.runs.config import InvalidLayout

DEFAULT_TIMEOUT_S = 1800
KILL_GRACE_S = 10
# After the trainer's summary line every rank has trained and gathered its memory peaks: a run still
# alive this long after it is stopped and kept as trained (CUDA-graph captures can hang at exit:
# 250-300 s seen)
EXIT_GRACE_S = 60
# Megatron-LM's pretrain() prints it once its last step is logged
PEER_DONE = "[after training is done]"
RDZV_PORT = 29500
# MEGALAB_LAUNCHER=torchrun starts one-node megalab runs under torchrun too (megalab.jobs.spawn);
# MEGALAB_LAUNCHER=forkserver as forks of a warm server (megalab.jobs.forkserver)
LAUNCHER = "MEGALAB_LAUNCHER"
LAUNCHERS = ("spawn", "torchrun", "forkserver")
# a reader's live reproduction (`megalab reproduce --mode live`) starts ranks from the warm server:
# on 1×H200 a run's launch to first step fell from 21.0 s to 7.5 s (median of 3, same losses)
READER_LAUNCHER = "forkserver"
# Multicast (NVLS) is off on the hosts this book was measured on; NCCL and symmetric memory would
# otherwise try it and fail or hang at communicator creation.
FORCED_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "PYTHONUNBUFFERED": "1",
}
LIB_DIR = Path(__file__).resolve().parents[2]


# what a torchrun sets for its ranks: inherited from a shell inside another run, they would mislead
# ours
DISTRIBUTED_ENV = (
    "LOCAL_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "MEGALAB_SPAWNED",
)


class NotEnoughGPUs(RuntimeError):
    """The run needs more GPUs than this machine has; the message says how many."""


class BadRunsFolder(ValueError):
    """$MEGALAB_RUNS (or runs/) cannot hold run folders; the message says what to change."""


@dataclass
class RunOutcome:
    """What a launched run did: status (see metrics.STATUSES), error dict or None, parsed
    metrics."""

    status: str
    error: dict | None
    parsed: metrics.Parsed
    run_dir: Path | None
    returncode: int | None
    # {"position": i, "runs": n} for a run that shared its process with others (megalab.jobs.reuse)
    reused: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _config_args(cfg) -> list[str]:
    from megalab.runs.flags import config_to_args

    return list(config_to_args(cfg))


def _check_data(cfg) -> None:
    """A real dataset's token ids must fit the model's vocabulary (else a device-side assert at step
    0)."""
    if not cfg.data:
        return
    meta = Path(cfg.data + ".json")  # written by `megalab prepare-data`
    if not Path(cfg.data + ".bin").exists():
        raise InvalidLayout(
            f"data={cfg.data}: {cfg.data}.bin not found: pass the prefix of a Megatron indexed "
            f"dataset (megalab prepare-data writes PREFIX.bin/.idx)"
        )
    vocab = json.loads(meta.read_text()).get("vocab_size") if meta.exists() else None
    if vocab and vocab > cfg.vocab:
        raise InvalidLayout(
            f"data={cfg.data} was tokenized with {vocab} token ids but vocab={cfg.vocab}: "
            f"pass --vocab {cfg.replace(vocab=vocab).padded_vocab}"
        )


def torchrun_command(
    cfg,
    run_dir,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    nproc_per_node: int | None = None,
    extra: Iterable[str] = (),
    rdzv_id: str | None = None,
    peer_dir: str | os.PathLike | None = None,
) -> list[str]:
    """The argv that starts this run: a megalab run on one node under megalab.jobs.spawn (no
    torchrun agent; MEGALAB_LAUNCHER=torchrun keeps torchrun), the peer on one node under torchrun
    --standalone, or one node of several under torchrun (static rendezvous at node 0's host:port:
    the agent started with node_rank 0 holds global rank 0, whose lines node 0 records; the c10d
    backend would number the agents by host name and process id instead).

    torchrun is invoked as `sys.executable -m torch.distributed.run` so the same Python (and venv)
    runs the workers, whatever `torchrun` is on PATH.
    """
    if nproc_per_node is None:
        if cfg.gpus % nnodes:
            raise ValueError(
                f"gpus={cfg.gpus} does not split over {nnodes} nodes: make gpus a multiple of "
                f"nnodes"
            )
        nproc_per_node = cfg.gpus // nnodes
    if nnodes == 1 and cfg.runner == "megalab":
        rank = ["-m", "megalab.train", *_config_args(cfg), "--run-dir", str(run_dir), *extra]
        return one_node(nproc_per_node, rank)
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    if nnodes == 1:
        cmd += ["--standalone", f"--nproc_per_node={nproc_per_node}"]
    else:
        if not rdzv_endpoint:
            raise ValueError(
                "a multi-node launch needs rdzv_endpoint='host:port' of the first node"
            )
        if ":" not in rdzv_endpoint:
            rdzv_endpoint = f"{rdzv_endpoint}:{RDZV_PORT}"
        cmd += [
            f"--nnodes={nnodes}",
            f"--nproc_per_node={nproc_per_node}",
            f"--node-rank={node_rank}",
            "--rdzv-backend=static",
            f"--rdzv-endpoint={rdzv_endpoint}",
            f"--rdzv-id={rdzv_id or cfg.key}",
        ]
    if cfg.runner == "megatron-lm":  # the peer: Megatron-LM's own script (megalab.jobs.peer)
        from megalab.jobs import peer

        # the one trainer flag it takes
        profile = peer.profile_args(run_dir) if "--profile" in extra else []
        return cmd + [str(peer.source_dir(peer_dir) / "pretrain_gpt.py"), *peer.args(cfg), *profile]
    return cmd + ["-m", "megalab.train", *_config_args(cfg), "--run-dir", str(run_dir), *extra]


def one_node(nproc: int, rank_argv: list[str]) -> list[str]:
    """The argv that starts `rank_argv` (a rank's Python arguments) as `nproc` ranks on this node:
    under megalab.jobs.spawn (no torchrun agent to import torch and rendezvous first), or torchrun
    --standalone where MEGALAB_LAUNCHER=torchrun, or forks of a warm server that has imported torch
    and Megatron once where MEGALAB_LAUNCHER=forkserver (megalab.jobs.forkserver)."""
    how = launcher()
    if how == "torchrun":
        standalone = ["--standalone", f"--nproc_per_node={nproc}"]
        return [sys.executable, "-m", "torch.distributed.run", *standalone, *rank_argv]
    module = "megalab.jobs.forkserver" if how == "forkserver" else "megalab.jobs.spawn"
    return [sys.executable, "-m", module, f"--nproc={nproc}", "--", *rank_argv]


def launcher() -> str:
    """How runs start here: $MEGALAB_LAUNCHER (spawn, torchrun or forkserver); unset, the warm
    fork-server in a notebook's kernel (a reader running a chapter in JupyterLab, or `megalab
    reproduce`), spawn elsewhere (the book's recordings); a value outside those raises ValueError
    with the choices."""
    how = os.environ.get(LAUNCHER) or (READER_LAUNCHER if _in_notebook() else "spawn")
    if how not in LAUNCHERS:
        raise ValueError(f"{LAUNCHER}={how!r}: pick one of {', '.join(LAUNCHERS)}")
    return how


def child_env(env: dict | None = None, first: Path = LIB_DIR) -> dict:
    """os.environ + `env`, with FORCED_ENV forced and `first` (lib/, or the peer's checkout) first
    on PYTHONPATH."""
    out = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    out = {**out, **(env or {}), **FORCED_ENV}
    path = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    out["PYTHONPATH"] = os.pathsep.join([str(first)] + [p for p in path if p != str(first)])
    return out


def check(cfg, nproc: int | None = None) -> None:
    """Raise InvalidLayout or NotEnoughGPUs if this configuration cannot start on this machine."""
    from megalab.machine.env import local_gpus

    gpu_name, have = local_gpus()  # no CUDA context is created in this process
    cfg.validate(
        te_available=importlib.util.find_spec("transformer_engine") is not None, gpu_name=gpu_name
    )
    _check_data(cfg)
    need = cfg.gpus if nproc is None else nproc
    if need > have:
        raise NotEnoughGPUs(
            f"{cfg.label} needs {need} GPU(s) on this machine, which has {have}: "
            f"read the recorded result with mode='cached', or lower --gpus"
        )


def new_run_dir(cfg, runs_root=None) -> Path:
    """runs/<label>-<UTC time>, made fresh (a -2, -3 ... suffix if two runs start in the same
    second)."""
    if runs_root is None:
        from megalab.machine.env import repo_root

        runs_root = os.environ.get("MEGALAB_RUNS") or (repo_root() or Path.cwd()) / "runs"
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = Path(runs_root) / f"{cfg.label}-{stamp}"
    for n in range(1, 1000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            if path.is_dir():
                continue
            raise BadRunsFolder(
                f"runs folder {runs_root}: {path} is not a folder: set MEGALAB_RUNS to a folder"
            ) from None
        except OSError as exc:  # /dev/null, a file on the way, a read-only disk, a name too long
            raise BadRunsFolder(
                f"runs folder {runs_root}: cannot make {path.name} there ({exc.strerror}): set "
                f"MEGALAB_RUNS to a folder you can write"
            ) from None
    raise FileExistsError(base)


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class _Progress:
    """A progress bar over steps: tqdm in a terminal, an ipywidgets bar in Jupyter
    (tqdm.notebook)."""

    def __init__(self, total: int, label: str, enabled: bool):
        self.bar = None
        if not enabled:
            return
        if _in_notebook():
            from tqdm.notebook import tqdm
        else:
            from tqdm import tqdm
        self.bar = tqdm(total=total, desc=label, unit="step", dynamic_ncols=True)

    def update(self, obj: dict) -> None:
        if self.bar is None or obj.get("kind") != "step":
            return
        done = int(obj.get("step", 0)) + 1
        self.bar.update(max(0, done - self.bar.n))
        post = {"loss": obj.get("loss"), "TFLOP/s": obj.get("tflops_per_gpu")}
        self.bar.set_postfix(
            {k: f"{v:.4g}" for k, v in post.items() if isinstance(v, (int, float))}
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _descendants(pid: int) -> list[int]:
    """The processes below `pid` (torchrun's ranks sit in sessions of their own, out of reach of
    killpg)."""
    parents = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat_file.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_group(proc: subprocess.Popen, grace_s: float | None = None) -> None:
    """SIGTERM the child's process group (torchrun stops its ranks), then SIGKILL whatever is left
    after grace_s (KILL_GRACE_S, read at the call), the ranks included."""
    grace_s = KILL_GRACE_S if grace_s is None else grace_s
    ranks = _descendants(proc.pid)
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        if sig == signal.SIGKILL:
            _signal(ranks, sig)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass


def popen(cmd: list[str], env: dict) -> subprocess.Popen:
    """Start torchrun in a session of its own, output piped, bound to die with this process
    (SIGTERM: torchrun then stops its ranks; each rank also dies with torchrun,
    megalab.train.parent)."""
    from megalab.train.parent import die_with_parent

    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )


class _Terminated:
    """While a run is watched: SIGTERM (main thread only) stops the run as a time limit does and is
    remembered."""

    def __init__(self, on_term):
        self.seen, self.on_term, self.previous = False, on_term, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame):
        self.seen = True
        # the handler must return: the loop reads on
        threading.Thread(target=self.on_term, daemon=True).start()

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def launch(
    cfg,
    runs_root=None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: bool = True,
    dry_run: bool = False,
    env: dict | None = None,
    echo: bool = False,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    nproc_per_node: int | None = None,
    extra: Iterable[str] = (),
    peer_dir: str | os.PathLike | None = None,
) -> RunOutcome:
    """Run the trainer for `cfg` and return its RunOutcome (never raises for a failed run).

    Raises InvalidLayout / NotEnoughGPUs before spawning when the run cannot start here. dry_run
    passes --dry-run to the trainer (CPU, gloo: it builds the model shards and prints parameters
    per rank) and skips the GPU check. echo prints every log line as it arrives (no progress bar).
    """
    extra = list(extra)  # read twice (the command, then the peer's profile)
    if dry_run:
        cfg.validate()
        extra = ["--dry-run", *extra]
    else:
        check(cfg, (nproc_per_node or cfg.gpus // nnodes) if nnodes > 1 else None)
    run_dir = new_run_dir(cfg, runs_root)
    cmd = torchrun_command(
        cfg,
        run_dir,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        nproc_per_node=nproc_per_node,
        extra=extra,
        peer_dir=peer_dir,
    )
    first = LIB_DIR
    # its megatron package (training + core of the same release) first
    if cfg.runner == "megatron-lm":
        from megalab.jobs import peer

        first = peer.source_dir(peer_dir)
        env = {**peer.environment(cfg), **(env or {})}
    (run_dir / "config.json").write_text(cfg.to_json() + "\n")
    (run_dir / "command.txt").write_text(shlex.join(cmd) + "\n")
    bar = _Progress(cfg.iters, cfg.label, progress and not echo)
    timed_out, hung = threading.Event(), threading.Event()
    with (
        open(run_dir / "log.txt", "w", encoding="utf-8") as log,
        open(run_dir / "metrics.jsonl", "w", encoding="utf-8") as mfile,
    ):
        launched_at = time.time()  # the trainer's startup_s starts here (and the peer's)
        child = {**child_env(env, first), "MEGALAB_LAUNCH_T": repr(launched_at)}
        proc = popen(cmd, child)

        def on_timeout():
            timed_out.set()
            kill_group(proc)

        def on_hang():
            hung.set()
            kill_group(proc)

        timer = threading.Timer(timeout_s, on_timeout)
        timer.daemon = True
        timer.start()
        exit_timer = threading.Timer(EXIT_GRACE_S, on_hang)
        exit_timer.daemon = True
        # the summary (ours) or "[after training is done]" (the peer's) seen: only the exit is left
        done = False
        terminated = _Terminated(on_timeout)
        try:
            terminated.__enter__()
            for raw in proc.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                log.write(line + "\n")
                log.flush()
                obj = metrics.parse_line(line)
                if obj is not None:
                    mfile.write(json.dumps(obj) + "\n")
                    mfile.flush()
                    bar.update(obj)
                if not done and ((obj or {}).get("kind") == "summary" or PEER_DONE in line):
                    done = True
                    exit_timer.start()
                if echo:
                    print(line, flush=True)
            proc.wait()
        except BaseException:  # Ctrl-C / notebook interrupt: stop every rank, then re-raise
            kill_group(proc, grace_s=3)
            raise
        finally:
            terminated.__exit__()
            timer.cancel()
            exit_timer.cancel()
            bar.close()
            proc.stdout.close()
            try:  # ranks that outlived torchrun would keep GPU memory: end the group
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    text = (run_dir / "log.txt").read_text(encoding="utf-8")
    parsed = metrics.parse_log(text)
    if cfg.runner == "megatron-lm":
        from megalab.jobs import peer
        from megalab.machine.env import local_peak_tflops

        parsed = peer.parse_log(text, cfg, local_peak_tflops(), launched_at)
        if "--profile" in extra:
            # profile.json, as the trainer writes it: the record keeps it
            peer.write_profile(run_dir)
    status, error = metrics.classify_failure(text, proc.returncode, timed_out.is_set())
    if terminated.seen and status == "timeout":
        error = {
            **error,
            "message": "the run was stopped by SIGTERM (timeout, kill or a scheduler's preemption)",
        }
    if hung.is_set() and not timed_out.is_set():
        status, error = "ok", None  # trained to the end: the exit, not the run, hung
        parsed.summary = {**(parsed.summary or {}), "exit_hung_s": EXIT_GRACE_S}
    # other nodes print no steps
    if status == "ok" and not dry_run and not parsed.steps and node_rank == 0:
        status, error = (
            "failed",
            {
                "message": "the trainer exited 0 but reported no steps",
                "rank": None,
                "detail": "\n".join(text.splitlines()[-metrics.TRACEBACK_LINES :]),
            },
        )
    return RunOutcome(status, error, parsed, run_dir, proc.returncode)
