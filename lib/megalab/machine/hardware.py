"""GPU datasheet numbers: peak dense tensor-core throughput, memory, HBM and NVLink bandwidth.

Vendor specs only. What a host actually reaches (matmul TFLOP/s, NCCL bus bandwidth) is measured
and lives in the results store, not here. All FLOP rates are *dense* (no 2:4 sparsity): NVIDIA's
datasheets print the sparse figure first, with a footnote; the dense one is half of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class UnknownGPU(KeyError):
    """The GPU name matches no entry of the spec table."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator's datasheet numbers (SI units as named)."""

    name: str
    arch: str  # "ampere" | "hopper" | "blackwell"
    compute_capability: tuple[int, int]
    peak_bf16_tflops: float  # dense BF16 tensor-core peak, TFLOP/s
    peak_fp8_tflops: float | None  # dense FP8 peak, TFLOP/s; None: no FP8 tensor cores
    mem_gib: float  # vendor's memory capacity (torch reports a little less usable)
    hbm_tbs: float  # HBM bandwidth, TB/s
    nvlink_gbs: float  # NVLink bandwidth per GPU per direction, GB/s


GPUS: dict[str, GpuSpec] = {
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 1,979 TFLOPS and FP8 3,958 TFLOPS "with
    # sparsity"; 80 GB HBM3 at 3.35 TB/s; NVLink 900 GB/s bidirectional.
    "H100": GpuSpec("H100", "hopper", (9, 0), 989.0, 1979.0, 80, 3.35, 450),
    # Same datasheet, H100 PCIe: BF16 1,513 / FP8 3,026 sparse; 80 GB HBM2e at 2.0 TB/s; NVLink
    # bridge 600 GB/s bidirectional.
    "H100-PCIe": GpuSpec("H100-PCIe", "hopper", (9, 0), 756.0, 1513.0, 80, 2.0, 300),
    # NVIDIA H200 Tensor Core GPU datasheet (SXM): same tensor cores as H100 SXM; 141 GB HBM3e at
    # 4.8 TB/s; NVLink 900 GB/s bidirectional.
    "H200": GpuSpec("H200", "hopper", (9, 0), 989.0, 1979.0, 141, 4.8, 450),
    # NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): BF16 312 TFLOPS dense (624 sparse), no FP8;
    # HBM2e 2,039 GB/s; NVLink 600 GB/s bidirectional. PCIe 80GB: same peak, 1,935 GB/s.
    "A100": GpuSpec("A100", "ampere", (8, 0), 312.0, None, 80, 2.039, 300),
    # Same datasheet, A100 40GB: HBM2 1,555 GB/s.
    "A100-40GB": GpuSpec("A100-40GB", "ampere", (8, 0), 312.0, None, 40, 1.555, 300),
    # NVIDIA DGX/HGX B200 datasheets, per GPU: FP8 9 PFLOPS and BF16 4.5 PFLOPS with sparsity;
    # 180 GB HBM3e, ~8 TB/s (64 TB/s over 8 GPUs); NVLink 5 at 1.8 TB/s bidirectional.
    "B200": GpuSpec("B200", "blackwell", (10, 0), 2250.0, 4500.0, 180, 8.0, 900),
}

# Most specific pattern first: torch.cuda.get_device_name / nvidia-smi spellings such as
# "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "NVIDIA
# B200".
_PATTERNS = [
    (r"H100.*(PCIE|NVL)", "H100-PCIe"),
    (r"H100", "H100"),
    (r"H200", "H200"),
    (r"A100.*40\s*GB", "A100-40GB"),
    (r"A100", "A100"),
    (r"B200", "B200"),
]


def gpu_spec(name: str) -> GpuSpec:
    """The spec for a table key ("H200") or a device name ("NVIDIA H100 80GB HBM3")."""
    if name in GPUS:
        return GPUS[name]
    upper = name.upper()
    for pattern, key in _PATTERNS:
        if re.search(pattern, upper):
            return GPUS[key]
    raise UnknownGPU(
        f"unknown GPU {name!r}: known GPUs are {', '.join(GPUS)}; pass one of these "
        f"names (e.g. gpu='H100') or add a GpuSpec to megalab.machine.hardware.GPUS"
    )


def is_hopper_or_newer(name: str) -> bool:
    """True for compute capability 9.0 and above (H100, H200, B200)."""
    return gpu_spec(name).compute_capability >= (9, 0)
