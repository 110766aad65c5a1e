"""GPU spec table: datasheet numbers and the device names torch / nvidia-smi print."""

import pytest

from megalab.machine.hardware import GPUS, UnknownGPU, gpu_spec, is_hopper_or_newer


@pytest.mark.parametrize(
    "name, key",
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA B200", "B200"),
        ("H200", "H200"),
        ("h100", "H100"),
    ],
)
def test_device_names(name, key):
    assert gpu_spec(name) is GPUS[key]


def test_datasheet_numbers():
    """NVIDIA H100/H200/A100 datasheets: dense BF16 = half the 'with sparsity' figure."""
    assert gpu_spec("H100").peak_bf16_tflops == gpu_spec("H200").peak_bf16_tflops == 989
    assert gpu_spec("H200").peak_fp8_tflops == 1979 and gpu_spec("A100").peak_fp8_tflops is None
    assert (gpu_spec("H200").mem_gib, gpu_spec("H200").hbm_tbs) == (141, 4.8)
    h100 = gpu_spec("H100")
    assert (h100.mem_gib, h100.hbm_tbs, h100.nvlink_gbs) == (80, 3.35, 450)
    assert gpu_spec("A100").peak_bf16_tflops == 312


def test_unknown_gpu_lists_known_ones():
    with pytest.raises(UnknownGPU, match="H200.*A100|known GPUs are"):
        gpu_spec("Tesla V100-SXM2-32GB")
    assert "H100" in str(UnknownGPU("x H100")) and not str(UnknownGPU("m")).startswith("'")


def test_is_hopper_or_newer():
    assert is_hopper_or_newer("NVIDIA H200") and is_hopper_or_newer("NVIDIA B200")
    assert not is_hopper_or_newer("NVIDIA A100-SXM4-80GB")
