"""train.parent: a rank dies with its torchrun, even one killed with -9 (a real parent, SIGKILLed,
on CPU)."""

import ast
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from megalab.train import loop, parent

LIB = str(Path(parent.__file__).parents[2])
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"
)


def _alive(pid: int) -> bool:
    try:  # an orphan killed may linger as a zombie until init reaps it: that is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] not in "ZX"
    except (FileNotFoundError, IndexError):
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _python(code: str, **env) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=LIB, **env)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env)


def _parent_of_a_rank(tmp_path, rank_code: str) -> tuple[subprocess.Popen, int]:
    """A stand-in torchrun that starts a "rank" running `rank_code` (which touches `ready` when set
    up); returns the stand-in and the rank's pid once the rank is ready."""
    ready, pidfile = tmp_path / "ready", tmp_path / "rank.pid"
    rank = (
        f"import pathlib, time\n{rank_code}\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(60)\n"
    )
    torchrun = _python(f"""
        import pathlib, subprocess, sys, time
        # a session of its own, as torchrun does
        p = subprocess.Popen([sys.executable, "-c", {rank!r}], start_new_session=True)
        pathlib.Path({str(pidfile)!r}).write_text(str(p.pid))
        time.sleep(60)
        """)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), "the rank never got ready"
    return torchrun, int(pidfile.read_text())


def test_a_rank_dies_when_its_torchrun_is_killed_with_9(tmp_path):
    torchrun, rank = _parent_of_a_rank(
        tmp_path, "from megalab.train.parent import die_with_parent\nassert die_with_parent()"
    )
    try:
        torchrun.kill()  # SIGKILL: no handler of torchrun's can stop its ranks
        torchrun.wait()
        assert _gone_within(rank, 10)
    finally:
        if _alive(rank):
            os.kill(rank, signal.SIGKILL)


def test_without_it_the_rank_is_orphaned(tmp_path):
    """The check above means something: the same rank without die_with_parent outlives its
    torchrun."""
    torchrun, rank = _parent_of_a_rank(tmp_path, "pass")
    try:
        torchrun.kill()
        torchrun.wait()
        assert not _gone_within(rank, 1)
    finally:
        os.kill(rank, signal.SIGKILL)


def test_a_parent_dead_before_the_request_is_noticed():
    """The kernel only signals a death after the request: a parent gone between the two reads of the
    parent (here: the second read says another process adopted this one) ends the process at
    once."""
    proc = _python("""
        import os, time
        from megalab.train import parent
        reads = iter([os.getppid(), 1])
        parent.os.getppid = lambda: next(reads)
        parent.die_with_parent()
        time.sleep(30)
        """)
    assert proc.wait(timeout=20) == -signal.SIGTERM


def test_a_torchrun_rank_adopted_by_init_ends_at_once():
    proc = _python(
        """
        import os, time
        from megalab.train import parent
        parent.os.getppid = lambda: 1
        parent.die_with_parent()
        time.sleep(30)
        """,
        TORCHELASTIC_RUN_ID="none",
    )
    assert proc.wait(timeout=20) == -signal.SIGTERM


def test_elsewhere_it_does_nothing(monkeypatch):
    monkeypatch.setattr(parent.sys, "platform", "darwin")
    assert parent.die_with_parent() is False


def test_the_trainer_asks_first_thing_in_main():
    main = next(
        node
        for node in ast.parse(Path(loop.__file__).read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name == "main"
    )
    # after the docstring
    first = main.body[1] if isinstance(main.body[0].value, ast.Constant) else main.body[0]
    assert ast.unparse(first) == "die_with_parent()"
