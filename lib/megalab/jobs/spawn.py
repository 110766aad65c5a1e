"""Start one node's ranks without torchrun's agent: what `launch` runs for a megalab run on one
node.

    python -m megalab.jobs.spawn --nproc 2 -- -m megalab.train <flags>

torchrun's agent imports torch and holds a rendezvous before it starts a rank: 3.5-6 s of every
launch on the book's GPU hosts (the records' start-up mark `python`, launch to a rank's first line
of Python). A one-node run needs none of it: this process imports nothing heavy, picks a free port
and starts `nproc` ranks of `sys.executable <rank argv>` with the variables torchrun would set
(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT; OMP_NUM_THREADS=1 unless set, as torchrun does) and SPAWNED, its mark.
The ranks write to this process's stdout and stderr (launch reads them).

What torchrun does on failure, it does too: the first rank to exit non-zero ends the run; the
others get SIGTERM, then SIGKILL after GRACE_S, and this process exits with that rank's code (128 +
signal for a rank killed by one). SIGTERM or SIGINT to this process is passed to the ranks the same
way. It dies with its parent (megalab.train.parent), and each rank with it. Multi-node runs and
Megatron-LM's pretrain_gpt.py (the peer) still start under torchrun (`launch.torchrun_command`);
MEGALAB_LAUNCHER=torchrun sends every run there.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

GRACE_S = 10.0
POLL_S = 0.2
SPAWNED = (
    "MEGALAB_SPAWNED"  # set in every rank this module starts: "spawn" (forkserver's: "forkserver")
)


class BadSpawn(ValueError):
    """The command line cannot start ranks; the message says what to change."""


def free_port() -> int:
    """A TCP port free on this host now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, nproc: int, port: int, base: dict | None = None) -> dict:
    """`base` (os.environ) with the variables torchrun sets for rank `rank` of `nproc` on one
    node."""
    env = dict(os.environ if base is None else base)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "GROUP_RANK": "0",
            "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            SPAWNED: "spawn",
        }
    )
    return env


def parse(argv: list[str]) -> tuple[int, list[str]]:
    """(nproc, the rank's argv after `--`) of `--nproc N -- <argv>` (or `--nproc=N`); BadSpawn
    otherwise."""
    head, rest = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else ([], [])
    )
    value = (
        head[1]
        if len(head) == 2 and head[0] == "--nproc"
        else head[0].split("=", 1)[1]
        if len(head) == 1 and head[0].startswith("--nproc=")
        else ""
    )
    if not value.isdigit() or int(value) < 1 or not rest:
        raise BadSpawn(
            "usage: python -m megalab.jobs.spawn --nproc N -- <python argv of a rank> (N >= 1), "
            f"not {argv!r}"
        )
    return int(value), rest


def _stop(procs: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM the ranks still running, SIGKILL what is left after grace_s."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait_s
        while any(p.poll() is None for p in alive) and time.monotonic() < end:
            time.sleep(0.05)


def _code(returncode: int) -> int:
    """A rank's exit status as a shell gives it: 128 + signal for one killed by a signal."""
    return 128 - returncode if returncode < 0 else returncode


def run(nproc: int, rank_argv: list[str], grace_s: float = GRACE_S) -> int:
    """Start the ranks and wait: 0 when every rank exits 0, else the first failure's code."""
    from megalab.train.parent import die_with_parent

    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, *rank_argv],
            env=rank_env(rank, nproc, port),
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        for rank in range(nproc)
    ]
    stopped = []

    def on_signal(signum, frame):
        stopped.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    return supervise(procs, stopped, grace_s)


def supervise(procs: list, stopped: list, grace_s: float = GRACE_S, tick=None) -> int:
    """Wait on the ranks `procs` (anything with Popen's poll and send_signal): 0 when every rank
    exits 0, else the first failure's code; a signal number appended to `stopped` stops them all
    (128 + signal). tick() runs every POLL_S (megalab.jobs.forkserver reads its client there)."""
    while True:
        if tick is not None:
            tick()
        if stopped:
            _stop(procs, grace_s)
            return 128 + stopped[0]
        failed = [p for p in procs if p.poll() not in (None, 0)]
        if failed:
            _stop(procs, grace_s)
            return _code(failed[0].returncode)
        if all(p.poll() == 0 for p in procs):
            return 0
        time.sleep(POLL_S)


def main(argv: list[str] | None = None) -> int:
    from megalab.train.parent import die_with_parent

    die_with_parent()
    try:
        nproc, rank_argv = parse(sys.argv[1:] if argv is None else argv)
    except BadSpawn as e:
        print(f"megalab.jobs.spawn: {e}", file=sys.stderr)
        return 2
    return run(nproc, rank_argv)


if __name__ == "__main__":
    sys.exit(main())
