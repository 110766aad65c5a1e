"""Start one node's ranks as forks of a warm server that has imported torch and Megatron once:
what `launch` runs where MEGALAB_LAUNCHER=forkserver, and, unset, in a notebook's kernel and a live
reproduction (megalab.jobs.launch.launcher; megalab.jobs.spawn elsewhere).

    python -m megalab.jobs.forkserver --nproc 2 -- -m megalab.train <flags>

Each rank of megalab.jobs.spawn imports torch, Megatron Core and Transformer Engine itself: 9-15 s
of a launch on the book's GPU hosts (the records' start-up mark `imports`). Here a server per
(Python, lib path, PYTHONPATH; every world size shares it) imports them once, never touching CUDA,
and waits on a Unix socket under $MEGALAB_FORKSERVER_DIR (default $TMPDIR). This command, the
client, connects and sends the ranks' argv, its working directory, each rank's variables
(spawn.rank_env: the ones torchrun sets) and its stdout and stderr (SCM_RIGHTS). The server forks a
manager for the run, which forks one process per rank: each puts the passed descriptors on 1 and 2,
takes the client's environment, directory and argv, resets the signal handlers, forgets megalab's
own modules (so the trainer's start-up clock, megalab.train.loop._T0, starts in the fork: `python`
is launch to the fork, `imports` what is left to import) and runs `-m module`, `-c code` or a script
as Python would, then exits with its code. Every run is still a fresh process: nothing of one run
reaches the next (a comparison group's runs, CUDA graphs' captures).

Spawn's semantics hold: the first rank to exit non-zero ends the run, the others get SIGTERM then
SIGKILL after GRACE_S; SIGTERM or SIGINT to the client is passed to the ranks; the client dies
with its parent, and when the client goes (even by kill -9) the manager sees its socket close and
stops the ranks; each rank dies with its manager. The server started by the first client
(detached, in a session of its own, its output in <socket>.log) stays for later runs and exits
after MEGALAB_FORKSERVER_IDLE_S (600) without a run, or when its socket is removed; a socket left
by a dead server is replaced. Where the server cannot start or answer, the client says so in one
line on stderr and starts the ranks as megalab.jobs.spawn does.

CUDA: a process forked after CUDA started cannot use it, so the server imports with
PYTORCH_NVML_BASED_CUDA_CHECK=1, checks torch.cuda.is_initialized() and then forks a probe that
starts CUDA. Where either fails with Transformer Engine loaded, the server starts again with torch
alone (each rank then imports Megatron and Transformer Engine itself); where torch alone fails, the
client falls back to spawn. Variables read when CUDA or Transformer Engine start
(CUDA_DEVICE_MAX_CONNECTIONS, NVTE_USE_CUTLASS_GROUPED_GEMM, set by
megalab.train.wiring.environment; PYTORCH_CUDA_ALLOC_CONF, NCCL_*) are set in the fork before any of
that starts, so they take effect as in a fresh process; that, and the probe, are verified only on a
GPU host (tools/gpu/launch_check.py --launchers spawn,forkserver). Variables read at import time by
torch or Megatron are the server's, and so are Python's str hash seed and warning filters;
OMP_NUM_THREADS is applied in each fork. TORCH_COMPILE_DISABLE is read when torch._dynamo loads:
the server imports with megalab.train.imports.load_less, which keeps it unloaded. Forking a process
that has imported torch (one native thread, idle) is what torch's DataLoader workers do.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import io
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from megalab.jobs import spawn

DIR = "MEGALAB_FORKSERVER_DIR"  # where the sockets live (default: tempfile.gettempdir())
IDLE = "MEGALAB_FORKSERVER_IDLE_S"
IDLE_S = 600.0
START_S = 600.0  # the longest a client waits for a new server's imports
PRELOAD = (
    "torch",
    "torch.distributed",
    "megatron.core",
    "megatron.core.parallel_state",
    "megatron.core.tensor_parallel",
    "megatron.core.distributed",
    "megatron.core.models.gpt",
    "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.optimizer",
    "megatron.core.optimizer_param_scheduler",
    "megatron.core.pipeline_parallel",
    "megatron.core.transformer.cuda_graphs",
    "megatron.core.transformer.moe.router",
    "megatron.core.transformer.moe.token_dispatcher",
    "megatron.core.num_microbatches_calculator",
    "megatron.core.rerun_state_machine",
    "transformer_engine.pytorch",
)
LIB = str(Path(__file__).resolve().parents[2])


class Unavailable(RuntimeError):
    """No server to start the ranks; the client starts them as megalab.jobs.spawn does."""


# -- the client ------------------------------------------------------------------------------------
def socket_path(env=None) -> str:
    """The server's socket for this Python and lib (and PYTHONPATH) under `env`: one server forks
    the ranks of every world size (a chapter's 1-, 2- and 4-GPU runs pay one start)."""
    env = os.environ if env is None else env
    key = json.dumps([sys.executable, LIB, env.get("PYTHONPATH", "")])
    name = f"megalab-forkserver-{os.getuid()}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.sock"
    return os.path.join(env.get(DIR) or tempfile.gettempdir(), name)


def _send(conn: socket.socket, obj: dict) -> None:
    conn.sendall(json.dumps(obj).encode() + b"\n")


def _dial(path: str) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        raise
    return conn


def ping(path: str) -> int | None:
    """The pid of the server listening on `path`, None when none answers."""
    try:
        with _dial(path) as conn:
            conn.settimeout(10)
            _send_request(conn, {"ping": True}, [])
            return json.loads(conn.makefile("rb", buffering=0).readline())["server"]
    except (OSError, ValueError, KeyError):
        return None


def connect() -> socket.socket:
    """A connection to the warm server, started (and a stale socket replaced) where none answers;
    Unavailable when none can be."""
    path = socket_path()
    try:
        return _dial(path)
    except OSError:
        pass
    try:
        lock = open(path + ".lock", "w")
    except OSError as e:
        raise Unavailable(f"no socket directory ({e})") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one client starts the server; the others wait for it
        try:
            return _dial(path)
        except OSError:
            pass
        if os.path.exists(path):  # its server is gone
            os.unlink(path)
        start = [sys.executable, "-m", "megalab.jobs.forkserver", "--serve", path]
        try:
            started = subprocess.run(
                start, stdin=subprocess.DEVNULL, capture_output=True, timeout=START_S,
                start_new_session=True, text=True,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise Unavailable(f"the server took over {START_S:.0f} s to start") from None
        if started.returncode != 0:
            why = (started.stderr.strip().splitlines() or ["it exited"])[-1]
            raise Unavailable(f"the server did not start: {why}")
        try:
            return _dial(path)
        except OSError as e:
            raise Unavailable(f"the server does not answer ({e})") from None


def _send_request(conn: socket.socket, request: dict, fds: list[int]) -> None:
    payload = json.dumps(request).encode()
    socket.send_fds(conn, [struct.pack("!I", len(payload))], fds)
    conn.sendall(payload)


def run(conn: socket.socket, nproc: int, rank_argv: list[str]) -> int:
    """Have the server start the ranks and wait: spawn.run's exit code. Unavailable when the server
    fails before any rank started."""
    port = spawn.free_port()
    request = {
        "argv": rank_argv,
        "cwd": os.getcwd(),
        "envs": [spawn.rank_env(rank, nproc, port) for rank in range(nproc)],
    }
    stopped, sent = [], []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopped.append(signum))
    replies = conn.makefile("rb", buffering=0)  # unbuffered: select sees every line not yet read
    try:
        _send_request(conn, request, [1, 2])
        if "pids" not in json.loads(replies.readline() or b"{}"):
            raise Unavailable("the server did not start the ranks")
    except (OSError, ValueError) as e:
        raise Unavailable(f"the server failed ({e})") from None
    while True:
        if stopped and not sent:
            sent.append(stopped[0])
            try:
                _send(conn, {"stop": stopped[0]})
            except OSError:
                pass
        if select.select([conn], [], [], spawn.POLL_S)[0]:
            line = replies.readline()
            if not line:  # the manager died: its ranks die with it (die_with_parent)
                print("megalab.jobs.forkserver: the server lost the run", file=sys.stderr)
                return 1
            reply = json.loads(line)
            if "done" in reply:
                return reply["done"]


def main(argv: list[str] | None = None) -> int:
    from megalab.train.parent import die_with_parent

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        return serve(argv[1], *argv[2:])
    die_with_parent()
    try:
        nproc, rank_argv = spawn.parse(argv)
    except spawn.BadSpawn as e:
        print(f"megalab.jobs.forkserver: {e}", file=sys.stderr)
        return 2
    try:
        if rank_argv[0] not in ("-m", "-c") and rank_argv[0].startswith("-"):
            raise Unavailable(f"it runs -m, -c or a script, not {rank_argv[0]}")
        return run(connect(), nproc, rank_argv)
    except Unavailable as e:
        print(f"megalab.jobs.forkserver: {e}; starting the ranks as spawn does", file=sys.stderr)
        return spawn.run(nproc, rank_argv)


# -- the server
# -------------------------------------------------------------------------------------
def serve(path: str, level: str = "full", word_fd: str = "") -> int:
    """Become the server on `path`: the started process returns 0 once it answers (1 and a line on
    stderr when it cannot), leaving it detached. `level` full preloads PRELOAD, torch torch only."""
    if not word_fd:
        read, write = os.pipe()
        if os.fork() > 0:
            os.close(write)
            word = os.read(read, 4096).decode() or "the server died while importing"
            if word == "ready":
                return 0
            print(word, file=sys.stderr)
            return 1
        os.close(read)
        os.setsid()
        log = os.open(path + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        for fd in (1, 2):
            os.dup2(log, fd)
        os.close(log)
    else:
        write = int(word_fd)
    try:
        why = _preload(level)
    except Exception as e:  # an import that fails here fails in the rank too: the rank says it
        why = f"importing failed ({e})"
    if why and level == "full":  # start again, importing torch alone
        print(f"{why}: torch alone", flush=True)
        os.set_inheritable(write, True)
        args = [sys.executable, "-m", "megalab.jobs.forkserver", "--serve", path, "torch"]
        os.execv(sys.executable, [*args, str(write)])
    if why:
        os.write(write, why.encode())
        return 1
    try:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(64)
    except OSError as e:
        os.write(write, f"cannot listen on {path} ({e})".encode())
        return 1
    os.write(write, b"ready")
    os.close(write)
    os.chdir("/")  # holds no client's directory; each rank takes its client's
    print(f"{time.strftime('%H:%M:%S')} pid {os.getpid()} serving {path} ({level})", flush=True)
    _accept(listener, path, level)
    return 0


def _preload(level: str) -> str:
    """Import what the ranks import before their first step; why a fork could not use CUDA, or
    ""."""
    import importlib
    import importlib.util

    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # torch.cuda.is_available() without CUDA
    from megalab.train import imports

    imports.load_less()  # JAX hidden, torch.compile lazy (torch._dynamo stays unloaded)
    for name in PRELOAD if level == "full" else ("torch", "torch.distributed"):
        try:
            if importlib.util.find_spec(name.split(".")[0]) is not None:
                importlib.import_module(name)
        except ImportError:
            pass
    import torch

    if torch.cuda.is_initialized():
        return "CUDA started while importing"
    pid = os.fork()
    if pid == 0:  # the probe: can a fork start CUDA?
        try:
            if torch.cuda.is_available():
                torch.zeros(1, device="cuda")
            code = 0
        except Exception:
            code = 1
        os._exit(code)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        return "a forked process cannot start CUDA"
    return ""


def _accept(listener: socket.socket, path: str, level: str) -> None:
    """Fork a manager per connection until idle for IDLE_S or the socket is no longer ours."""
    idle_s = float(os.environ.get(IDLE, IDLE_S))
    inode, managers, last = os.stat(path).st_ino, set(), time.monotonic()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    listener.settimeout(1.0)
    try:
        while True:
            for pid in list(managers):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    managers.discard(pid)
                    last = time.monotonic()
            if not managers and time.monotonic() - last > idle_s:
                return
            try:
                if os.stat(path).st_ino != inode:
                    return
            except FileNotFoundError:
                return
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            pid = os.fork()
            if pid == 0:
                listener.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                try:
                    _manage(conn, level)
                finally:
                    os._exit(0)
            conn.close()
            managers.add(pid)
            last = time.monotonic()
    finally:
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except FileNotFoundError:
            pass


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, 4, 2)
    while len(head) < 4:
        head += conn.recv(4 - len(head))
    size, body = struct.unpack("!I", head)[0], b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the client left mid-request")
        body += chunk
    return json.loads(body), fds


class Forked:
    """A rank forked here, seen as a subprocess.Popen by spawn.supervise."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def _manage(conn: socket.socket, level: str) -> None:
    """One run: fork its ranks, tell the client, stop them as spawn does and report the code."""
    request, fds = _receive(conn)
    if request.get("ping"):
        return _send(conn, {"server": os.getppid(), "level": level})
    ranks = []
    for env in request["envs"]:
        pid = os.fork()
        if pid == 0:
            conn.close()
            _become_rank(request["argv"], request["cwd"], env, fds)
        ranks.append(Forked(pid))
    for fd in fds:  # the ranks hold the client's output now: it ends when they do
        os.close(fd)
    _send(conn, {"pids": [r.pid for r in ranks], "server": os.getppid(), "level": level})
    stopped = []

    def tick():  # a stop from the client, or the client gone (even kill -9)
        if not stopped and select.select([conn], [], [], 0)[0]:
            line = conn.makefile("rb", buffering=0).readline()
            stopped.append(json.loads(line)["stop"] if line else signal.SIGTERM)

    code = spawn.supervise(ranks, stopped, spawn.GRACE_S, tick)
    try:
        _send(conn, {"done": code})
    except OSError:
        pass


# -- a rank
# -----------------------------------------------------------------------------------------
def _become_rank(argv: list[str], cwd: str, env: dict, fds: list[int]) -> None:
    """In the fork: take the client's output, environment, directory and argv; run it; exit."""
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        for src, dst in ((null, 0), *zip(fds, (1, 2))):
            os.dup2(src, dst)
        for fd in (null, *fds):
            os.close(fd)
        os.environ.clear()
        os.environ.update({**env, spawn.SPAWNED: "forkserver"})  # the record's env.launcher
        os.chdir(cwd)
        _streams(env)
        _fresh_state(env)
        from megalab.train.parent import die_with_parent

        die_with_parent()  # as spawn's preexec_fn: the rank dies with its manager
        code = _execute(argv)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _streams(env: dict) -> None:
    """sys.stdout and sys.stderr on the new 1 and 2, buffered as a fresh Python buffers them."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    encoding = (env.get("PYTHONIOENCODING") or "").split(":")[0] or sys.stdout.encoding
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        line = raw.isatty() or name == "stderr"
        stream = io.TextIOWrapper(
            raw if unbuffered else io.BufferedWriter(raw),
            encoding=encoding,
            errors="backslashreplace" if name == "stderr" else "strict",
            line_buffering=line and not unbuffered,
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _fresh_state(env: dict) -> None:
    """What a fork shares with the server and a fresh process would not: megalab's modules (their
    clocks start again), the exit handlers, the generators' state, the OpenMP threads."""
    for name in [n for n in sys.modules if n == "megalab" or n.startswith("megalab.")]:
        del sys.modules[name]
    atexit._clear()
    import random

    random.seed()  # Python reseeds at fork; said once more for clarity
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()  # a fresh process seeds it from the OS
    import torch

    torch.default_generator.manual_seed(torch.initial_seed())  # as a fresh process starts
    if env.get("OMP_NUM_THREADS", "").isdigit():  # OpenMP read it when the server loaded it
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))


def _execute(argv: list[str]) -> int:
    """Run `-m module args`, `-c code args` or `script args` as __main__; the exit code Python
    would give."""
    import runpy
    import types

    try:
        if argv[0] == "-m":
            sys.argv, sys.path[0] = ["-m", *argv[2:]], os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
            main_module = types.ModuleType("__main__")
            sys.modules["__main__"] = main_module
            exec(compile(argv[1], "<string>", "exec"), main_module.__dict__)
        else:
            sys.argv, sys.path[0] = list(argv), os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    return code


if __name__ == "__main__":
    sys.exit(main())
