"""The install scripts, run on CPU in a scratch copy of tools/ (they never touch this checkout):
tools/gpu-setup.sh (what it checks, what it refuses, the commands it would run; a stand-in
nvidia-smi and torch play the GPU machine) and tools/mathjax-setup.sh (no npm; a download whose
sha256 differs is refused)."""

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMI = (
    '#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" && echo "GPU 1: NVIDIA '
    'H200 (UUID: GPU-1)"\n'
)


def _tree(tmp_path: Path, script: str) -> Path:
    """A scratch project root holding only tools/<script>, so the script's `cd ..` lands there."""
    root = tmp_path / "project"
    (root / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / script, root / "tools" / script)
    return root


def _fake_torch(where: Path, version: str | None, cuda: str | None) -> str:
    """A `torch` package that only answers __version__ and version.cuda (the real one here is a CPU
    build)."""
    pkg = where / "fake_torch" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\nfrom torch import version\n")
    (pkg / "version.py").write_text(f"cuda = {cuda!r}\n")
    return str(pkg.parent)


def _gpu_setup(tmp_path, *args, gpu=True, torch=("2.11.0+cu130", "13.0")):
    root = _tree(tmp_path, "gpu-setup.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpu:
        (bin_dir / "nvidia-smi").write_text(SMI)
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)}
    if torch is not None:
        env["PYTHONPATH"] = _fake_torch(tmp_path, *torch)
    else:  # a Python without torch: isolated from this venv's site-packages
        env["PYTHON"] = "python3"
        env["PYTHONNOUSERSITE"] = "1"
    done = subprocess.run(
        ["bash", str(root / "tools" / "gpu-setup.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert not (root / ".venv").exists()  # every case here stops before the venv
    return done


def test_gpu_setup_plans_the_nvidia_install_on_the_recorded_stack(tmp_path):
    done = _gpu_setup(tmp_path, "--dry-run")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "found 2 GPU(s)" in out and "torch 2.11.0+cu130 (CUDA 13.0)" in out
    assert "-m venv --system-site-packages .venv" in out  # the venv reuses the installed CUDA torch
    assert (
        "pip install --no-build-isolation -c .venv/gpu-constraints.txt "
        "transformer_engine[pytorch]==2.11.0" in out
    )
    assert "megatron-core==0.16.1 -e .[test]" in out and "pin torch==2.11.0+cu130" in out
    assert "records were made with torch" not in out


def test_gpu_setup_says_when_torch_differs_from_the_records(tmp_path):
    done = _gpu_setup(tmp_path, "--dry-run", torch=("2.9.1+cu128", "12.8"))
    assert done.returncode == 0, done.stderr
    assert (
        "warning: the records were made with torch 2.11.0+cu130, this is 2.9.1+cu128 (CUDA 12.8)"
        in done.stdout
    )


def test_gpu_setup_refuses_a_machine_without_a_gpu(tmp_path):
    done = _gpu_setup(tmp_path, gpu=False)
    assert (
        done.returncode == 2 and "no NVIDIA GPU here" in done.stderr and "make setup" in done.stderr
    )
    assert "pip" not in done.stdout  # nothing ran: no CUDA wheel reaches a CPU machine


def test_gpu_setup_refuses_a_cpu_build_of_torch(tmp_path):
    done = _gpu_setup(tmp_path, torch=("2.11.0+cpu", None))
    assert done.returncode == 2 and "is a CPU build" in done.stderr


def test_gpu_setup_without_torch_says_how_to_install_it(tmp_path):
    done = _gpu_setup(tmp_path, torch=None)
    assert done.returncode == 2 and "no torch in python3" in done.stderr
    assert "torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130" in done.stderr


def test_gpu_setup_refuses_an_unknown_option(tmp_path):
    done = _gpu_setup(tmp_path, "--yes")
    assert done.returncode == 2 and "unknown option --yes" in done.stderr


def test_make_gpu_setup_and_book_fetch_what_they_need():
    if shutil.which("make") is None:
        pytest.skip("no make")
    run = lambda *a: (
        subprocess.run(["make", "-n", "-C", str(ROOT), *a], capture_output=True, text=True).stdout
    )  # noqa: E731
    assert "tools/gpu-setup.sh --dry-run" in run("gpu-setup", "DRY=1")
    # JupyterLab needs no MathJax
    assert "tools/mathjax-setup.sh" in run("book") and "mathjax" not in run("lab")
    assert "mathjax-setup" not in (ROOT / "tools" / "setup.sh").read_text().split("set -euo")[1]


# -- MathJax ---------------------------------------------------------------------------------------
def test_mathjax_needs_no_npm_and_refuses_a_tarball_with_another_sha256(tmp_path):
    root = _tree(tmp_path, "mathjax-setup.sh")
    fake = tmp_path / "mathjax-3.2.2.tgz"
    payload = tmp_path / "package" / "es5"
    payload.mkdir(parents=True)
    (payload / "tex-chtml.js").write_text("// not MathJax")
    with tarfile.open(fake, "w:gz") as tar:
        tar.add(tmp_path / "package", arcname="package")
    bin_dir = tmp_path / "bin"  # an npm that leaves a mark if anything calls it
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(f"#!/bin/sh\ntouch {tmp_path}/npm-was-called\nexit 1\n")
    (bin_dir / "npm").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "MATHJAX_URL": fake.as_uri()}
    done = subprocess.run(
        ["bash", str(root / "tools" / "mathjax-setup.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1 and "not MathJax 3.2.2's" in done.stderr
    assert not (root / ".mathjax").exists() and not (tmp_path / "npm-was-called").exists()
