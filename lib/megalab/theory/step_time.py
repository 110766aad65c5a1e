"""A roofline step time: compute at a matmul rate, plus the pipeline bubble, plus exposed
communication.

A lower bound for the planner, not a promise: chapter 07 calibrates it against the book's records.
"""

from __future__ import annotations

from megalab.theory.collectives import comm_time_s
from megalab.theory.comm import comm_bytes_per_step
from megalab.theory.flops import hardware_flops, mfu, spec, tflops_per_gpu
from megalab.theory.pipeline import bubble_fraction

__all__ = ["comm_by_axis_s", "step_time_estimate"]


def _hidden(cfg, axis: str) -> bool:
    """Is this axis's traffic overlapped with compute? Only the data-parallel reduction, when
    cfg.overlap."""
    return axis == "dp" and cfg.overlap


def comm_by_axis_s(cfg, gpu="H200", bus_bw: float | None = None) -> dict[str, float]:
    """Exposed communication seconds per axis (tp, dp, cp, pp, ep) as step_time_estimate counts
    them: bytes per GPU at `bus_bw` (default: NVLink per direction); 0 for the overlapped
    data-parallel reduction."""
    bus = bus_bw or spec(gpu).nvlink_gbs
    return {
        k: 0.0 if _hidden(cfg, k) else comm_time_s(v, bus)
        for k, v in comm_bytes_per_step(cfg).items()
        if k != "total"
    }


def step_time_estimate(
    cfg, gpu="H200", matmul_tflops: float | None = None, bus_bw: float | None = None
) -> dict:
    """Roofline step time in seconds: compute at `matmul_tflops` + bubble + exposed communication.

    compute_s = hardware FLOPs / gpus / matmul rate (default: the GPU's dense BF16 peak);
    bubble_s = compute_s · bubble_fraction (Narayanan 2021 §2.2); comm_s = bytes per GPU / bus
    bandwidth (default: NVLink per direction) for every axis, assumed not overlapped, except the
    data-parallel reduction when cfg.overlap.
    """
    gpu = spec(gpu)
    rate = (matmul_tflops or gpu.peak_bf16_tflops) * 1e12
    compute = hardware_flops(cfg) / cfg.gpus / rate
    bubble = compute * bubble_fraction(cfg)
    volume = comm_bytes_per_step(cfg)
    exposed = sum(v for k, v in volume.items() if k != "total" and not _hidden(cfg, k))
    comm_s = comm_time_s(exposed, bus_bw or gpu.nvlink_gbs)
    total = compute + bubble + comm_s
    return {
        "compute_s": compute,
        "bubble_s": bubble,
        "comm_s": comm_s,
        "total_s": total,
        "tokens_per_s": cfg.gbs * cfg.seq / total,
        "tflops_per_gpu": tflops_per_gpu(cfg, total),
        "mfu": mfu(cfg, total, gpu),
    }
