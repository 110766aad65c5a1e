"""megalab.jobs.spawn: one node's ranks started without torchrun's agent, with torchrun's variables;
the first failing rank ends the run and names its code; a signal to the spawner stops the ranks."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megalab.jobs import launch, spawn

LIB = str(Path(spawn.__file__).resolve().parents[2])


def _spawn(tmp_path, nproc, code: str, wait=True):
    """Run `code` as every rank under the spawner (a real process); (process, tmp_path)."""
    env = {**launch.child_env(), "OUT": str(tmp_path)}
    cmd = [sys.executable, "-m", "megalab.jobs.spawn", f"--nproc={nproc}", "--", "-c", code]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if wait:
        proc.wait(timeout=60)
    return proc


def test_each_rank_gets_torchruns_variables(tmp_path):
    code = (
        "import os, json; r = os.environ['RANK']; "
        "json.dump({k: os.environ[k] for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', "
        "'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'MEGALAB_SPAWNED')}, "
        "open(os.path.join(os.environ['OUT'], r + '.json'), 'w')); print('rank', r)"
    )
    proc = _spawn(tmp_path, 3, code)
    assert proc.returncode == 0
    import json

    got = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(3)]
    assert [g["RANK"] for g in got] == [g["LOCAL_RANK"] for g in got] == ["0", "1", "2"]
    assert {g["WORLD_SIZE"] for g in got} == {g["LOCAL_WORLD_SIZE"] for g in got} == {"3"}
    assert len({g["MASTER_PORT"] for g in got}) == 1 and got[0]["MASTER_ADDR"] == "127.0.0.1"
    assert sorted(proc.stdout.read().decode().split("\n")[:3]) == ["rank 0", "rank 1", "rank 2"]


def test_the_first_failing_rank_ends_the_run_with_its_code(tmp_path):
    code = (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1': sys.exit(7)\n"
        "time.sleep(120)"  # the others would train on: stopped
    )
    t0 = time.monotonic()
    proc = _spawn(tmp_path, 3, code)
    assert proc.returncode == 7 and time.monotonic() - t0 < 30


def test_a_signal_to_the_spawner_stops_its_ranks(tmp_path):
    code = "import os, time; open(os.path.join(os.environ['OUT'], os.environ['RANK']), 'w').write(str(os.getpid())); time.sleep(120)"  # noqa: E501
    proc = _spawn(tmp_path, 2, code, wait=False)
    deadline = time.monotonic() + 30
    while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int((tmp_path / str(r)).read_text()) for r in range(2)]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    time.sleep(0.5)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize(
    "argv", [[], ["--nproc", "2"], ["--nproc=0", "--", "-c", "pass"], ["--nproc", "x", "--", "a"]]
)
def test_a_bad_command_line_says_how_to_call_it(argv):
    with pytest.raises(spawn.BadSpawn, match="usage: python -m megalab.jobs.spawn --nproc N"):
        spawn.parse(argv)
    assert spawn.parse(["--nproc", "2", "--", "-m", "x"]) == (2, ["-m", "x"])
