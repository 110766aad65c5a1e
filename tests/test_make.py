"""Makefile: the targets' commands, as `make -n` prints them (nothing is run)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _commands(target: str, *args: str) -> str:
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_lab_binds_to_localhost_and_starts_as_root():
    line = next(l for l in _commands("lab").splitlines() if "jupyter lab" in l)
    assert "--ServerApp.ip=127.0.0.1" in line
    assert ("--allow-root" in line) == (os.geteuid() == 0)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_test_sets_up_chromium_before_pytest_and_lab_has_jupyterlab_myst():
    lines = _commands("test").splitlines()
    browser = next(i for i, l in enumerate(lines) if "browser-setup.sh" in l)
    # tests/test_lab.py needs it
    assert browser < next(i for i, l in enumerate(lines) if "-m pytest" in l)
    assert "tools/setup.sh" in _commands("lab")
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.replace("_", "-").startswith("jupyterlab-myst") for d in deps)
    # an older venv installs it too
    assert "jupyterlab_myst" in (ROOT / "tools" / "setup.sh").read_text()
