"""What the host adds to a step: CPU, VM or bare metal, NCCL, links, and the cost of one kernel
launch.

python3 tools/gpu/host_probe.py > host.json
"""

import json
import os
import platform
import subprocess
import time

import torch


def launch_us(n=20000):
    """Host microseconds per eager kernel launch (tiny add_), and per kernel replayed from a CUDA
    graph."""
    x = torch.zeros(1, device="cuda")
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    host = time.perf_counter() - t
    torch.cuda.synchronize()
    total = time.perf_counter() - t
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            for _ in range(100):
                x.add_(1)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n // 100):
        g.replay()
    torch.cuda.synchronize()
    graph = time.perf_counter() - t
    return {
        "eager_launch_host_us": 1e6 * host / n,
        "eager_kernel_wall_us": 1e6 * total / n,
        "graph_kernel_wall_us": 1e6 * graph / n,
    }


def cpu():
    info = open("/proc/cpuinfo").read()
    model = next(
        (l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?"
    )
    return {
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "vm": " hypervisor" in info,
        "kernel": platform.release(),
    }


def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except Exception as e:  # noqa: BLE001
        return f"{cmd[0]}: {e}"


out = {
    **cpu(),
    "gpu": torch.cuda.get_device_name(0),
    "gpu_count": torch.cuda.device_count(),
    "nccl": ".".join(map(str, torch.cuda.nccl.version())),
    "torch": torch.__version__,
    **launch_us(),
    "topo": run(["nvidia-smi", "topo", "-m"]),
}
print(json.dumps(out, indent=1))
