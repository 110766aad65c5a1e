"""What one collective costs: bytes each GPU sends with ring algorithms, and the time at a bus
bandwidth.

An all-reduce of S bytes over n GPUs sends 2(n−1)/n·S, an all-gather or reduce-scatter (n−1)/n·S
(S = the full, gathered size), an all-to-all (n−1)/n of the local buffer. Dividing by NCCL-tests'
"bus bandwidth" then gives the time, which is how that bandwidth is defined.
"""

from __future__ import annotations

__all__ = ["bus_factor", "allreduce_bytes", "gather_bytes", "comm_time_s"]


def bus_factor(op: str, n: int) -> float:
    """Bytes each of n ranks moves per byte of the collective's size, for ring algorithms
    (nccl-tests' busbw factor): 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and
    all-to-all."""
    return (2 if op == "all_reduce" else 1) * (n - 1) / n


def allreduce_bytes(n: int, size: float) -> float:
    """Bytes each GPU sends in an all-reduce of `size` bytes over n GPUs."""
    return bus_factor("all_reduce", n) * size


def gather_bytes(n: int, size: float) -> float:
    """All-gather, reduce-scatter and all-to-all alike: (n−1)/n of the full size."""
    return bus_factor("all_gather", n) * size


def comm_time_s(nbytes: float, bus_bw_gbs: float) -> float:
    """Seconds to move `nbytes` per GPU at a bus bandwidth in GB/s (NCCL-tests' busbw)."""
    return nbytes / (bus_bw_gbs * 1e9)
