"""Where a number was measured: a fingerprint of the machine and the code.

`fingerprint()` asks `nvidia-smi` for the GPUs (it never initializes CUDA in this process, so a
launcher can call it before spawning workers) and package metadata for versions (no heavy imports
except torch, for `torch.version.cuda`). On a CPU-only machine the GPU fields are None and
gpu_count is 0. Every record in the results store carries this dict under "env".
"""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
from importlib import metadata
from pathlib import Path

_SMI_TIMEOUT_S = 20
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # nvidia-smi underlines the topology's header row


def repo_root() -> Path | None:
    """The megalab checkout this module lives in (the folder holding lib/), or None if installed."""
    root = Path(__file__).resolve().parents[3]
    return (
        root if (root / "lib" / "megalab").is_dir() and (root / "pyproject.toml").exists() else None
    )


_COMMIT = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]{0,79}")  # a hash or a tag, "+dirty" marked


class BadCommit(ValueError):
    """$MEGALAB_COMMIT is not a commit name: it would go into every record as it is."""


def git_commit() -> str | None:
    """The commit the code came from: $MEGALAB_COMMIT, else `git rev-parse HEAD`, else None. A
    $MEGALAB_COMMIT that is not a commit name (a newline, an escape sequence, a space) raises
    BadCommit."""
    if os.environ.get("MEGALAB_COMMIT"):
        commit = os.environ["MEGALAB_COMMIT"]
        if not _COMMIT.fullmatch(commit):
            raise BadCommit(
                f"MEGALAB_COMMIT={commit[:40]!r} is not a commit name: set it to the commit's hex "
                f"digits "
                f"(git rev-parse HEAD), or unset it"
            )
        return commit
    cwd = repo_root() or Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _smi(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=_SMI_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _version(*dists: str) -> str | None:
    for d in dists:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
    return None


def parse_gpu_query(text: str | None) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=name,memory.total,driver_version
    --format=csv,noheader,nounits`."""
    rows = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0]:
            try:
                mem_gib = round(float(parts[1]) / 1024, 1)  # MiB -> GiB
            except ValueError:
                mem_gib = None
            rows.append({"name": parts[0], "mem_gib": mem_gib, "driver": parts[2]})
    return rows


def parse_topology(text: str | None) -> str:
    """Summarize `nvidia-smi topo -m` as "NVLink (NV18)", "PCIe", "none" (one GPU) or "unknown".

    The matrix has one row per GPU; a cell NV<k> means k bonded NVLinks between the two GPUs,
    PIX/PXB/PHB/NODE/SYS mean the path crosses PCIe switches, host bridges or the CPU interconnect.
    The header row comes underlined (ANSI escapes around "GPU0 ... GPU NUMA ID"), stripped first:
    read as is, its first GPU column is not counted and two GPUs joined by NVLink read as one GPU,
    "none".
    """
    lines = [ln for ln in _ANSI.sub("", text or "").splitlines() if ln.strip()]
    if not lines:
        return "unknown"
    header = lines[0].split()
    n = sum(1 for h in header if re.fullmatch(r"GPU\d+", h))
    cells = []
    for ln in lines[1:]:
        parts = ln.split()
        if parts and re.fullmatch(r"GPU\d+", parts[0]):
            cells += parts[1 : 1 + n]
    if n == 1:
        return "none"
    links = [int(m.group(1)) for c in cells if (m := re.fullmatch(r"NV(\d+)", c))]
    if links:
        return f"NVLink (NV{max(links)})"
    if any(c in {"PIX", "PXB", "PHB", "NODE", "SYS"} for c in cells):
        return "PCIe"
    return "unknown"


def _torch_info() -> tuple[int | None, str | None]:
    try:
        import torch  # lazy: importing torch costs seconds
    except ImportError:
        return None, None
    # device_count() does not create a CUDA context and respects CUDA_VISIBLE_DEVICES
    return torch.cuda.device_count(), torch.version.cuda


def local_gpus() -> tuple[str | None, int]:
    """(GPU model name, number of visible GPUs) of this machine, without creating a CUDA context."""
    count = _torch_info()[0] or 0
    rows = (
        parse_gpu_query(
            _smi("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits")
        )
        if count
        else []
    )
    return (rows[0]["name"] if rows else None), count


def fingerprint() -> dict:
    """Hardware and software this process runs on; GPU fields are None without a GPU."""
    gpus = parse_gpu_query(
        _smi("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits")
    )
    torch_count, cuda = _torch_info()
    count = torch_count if torch_count is not None else len(gpus)
    count = min(count, len(gpus)) if gpus else 0
    first = gpus[0] if gpus and count else {}
    return {
        "gpu_name": first.get("name"),
        "gpu_count": count,
        "gpu_mem_gib": first.get("mem_gib"),
        "interconnect": parse_topology(_smi("topo", "-m"))
        if count > 1
        else ("none" if count else None),
        "driver": first.get("driver"),
        "cuda": cuda,
        "torch": _version("torch"),
        "megatron_core": _version("megatron-core", "megatron_core"),
        "transformer_engine": _version(
            "transformer-engine", "transformer_engine", "transformer-engine-cu12"
        ),
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "boot_id": boot_id(),
        "launcher": launcher(),
    }


def launcher() -> str | None:
    """What started this process as a rank: "spawn" or "forkserver" (megalab.jobs, their mark
    MEGALAB_SPAWNED), "torchrun", or None (not a rank)."""
    mark = os.environ.get("MEGALAB_SPAWNED")
    if mark:
        return "spawn" if mark == "1" else mark
    return "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else None


def boot_id() -> str | None:
    """This boot's id (/proc/sys/kernel/random/boot_id), None where the kernel has none: what tells
    one lent host from the next, as they all call themselves "vm"."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def parse_cpuinfo(text: str | None) -> dict:
    """CPU model and whether the kernel runs under a hypervisor (the `hypervisor` CPU flag: a VM),
    from /proc/cpuinfo."""
    lines = (text or "").splitlines()
    field = lambda name: next(
        (
            ln.split(":", 1)[1].strip()
            for ln in lines  # noqa: E731
            if ln.split(":", 1)[0].strip() == name
        ),
        None,
    )
    return {"cpu_model": field("model name"), "vm": "hypervisor" in (field("flags") or "").split()}


def host() -> dict:
    """What the host adds to a step, beside fingerprint(): CPU model and cores, VM or bare metal,
    the NCCL version torch ships, and the GPUs' link matrix (`nvidia-smi topo -m`, escapes and
    legend stripped)."""
    try:
        info = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        info = parse_cpuinfo(None)
    try:
        import torch

        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except (ImportError, AttributeError, RuntimeError):
        nccl = None
    topo = _ANSI.sub("", _smi("topo", "-m") or "").split("Legend:")[0].rstrip() or None
    return {**info, "cpu_count": os.cpu_count(), "nccl": nccl, "topology": topo}


def local_peak_tflops() -> float | None:
    """Dense bf16 peak of this machine's GPU model (megalab.machine.hardware); None without a GPU
    the table knows."""
    from megalab.machine import hardware

    name, _ = local_gpus()
    try:
        return hardware.gpu_spec(name).peak_bf16_tflops if name else None
    except hardware.UnknownGPU:
        return None
