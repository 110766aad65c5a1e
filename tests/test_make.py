"""Makefile: the targets' commands, as `make -n` prints them (nothing is run)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _commands(target: str, *args: str) -> str:
    done = subprocess.run(["make", "-n", "-C", str(ROOT), target, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_lab_binds_to_localhost_and_starts_as_root():
    line = next(l for l in _commands("lab").splitlines() if "jupyter lab" in l)
    assert "--ServerApp.ip=127.0.0.1" in line
    assert ("--allow-root" in line) == (os.geteuid() == 0)
