"""bench.py on CPU: the bus-bandwidth convention of nccl-tests (PERFORMANCE.md) and the recorded data."""

import pytest

from megalab.machine import bench


@pytest.mark.parametrize("op, factor", [("all_reduce", 1.5), ("all_gather", 0.75), ("reduce_scatter", 0.75),
                                        ("all_to_all", 0.75)])
def test_bus_bandwidth_on_four_ranks(op, factor):
    algbw, busbw = bench.bus_bandwidth(op, 1 << 30, 0.01, 4)
    assert algbw == pytest.approx((1 << 30) / 0.01) and busbw == pytest.approx(factor * algbw)


def test_recorded_benchmarks_load_as_a_frame():
    """results/bench.jsonl holds H200 hosts' benches (4x and 2x) and a 2xH100 host's; every collective was checked
    numerically; `gpu` keeps one model's points, and a model never benched is an error that says what to run."""
    from megalab.runs.running import NotRecorded
    nccl = bench.load("nccl")
    assert set(nccl["op"]) == set(bench.OPS) and nccl["correct"].all()
    assert set(nccl["gpu_name"]) == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    assert set(bench.load("nccl", gpu="H200")["gpu_name"]) == {"NVIDIA H200"}
    assert bench.load("matmul", gpu="H100")["tflops"].max() < bench.load("matmul", gpu="H200")["tflops"].max()
    with pytest.raises(NotRecorded, match="recorded on B200: run `megalab bench`"):
        bench.load(gpu="B200")


def test_best_bus_bandwidth_reads_the_records(tmp_path):
    from megalab.machine import bench
    from megalab.runs.running import NotRecorded, Store
    import json
    store = Store(tmp_path)
    with open(store.path("bench"), "a") as f:
        for size, bw in ((1 << 20, 30.0), (1 << 30, 350.0)):
            f.write(json.dumps({"kind": "bench", "bench": "nccl", "op": "all_reduce", "gpus": 4,
                                "size_bytes": size, "busbw_gbs": bw, "env": {}}) + "\n")
    assert bench.best_bus_bandwidth("all_reduce", 4, store=store) == 350.0
    assert bench.best_bus_bandwidth("all_reduce", 4, size_bytes=4 << 20, store=store) == 30.0   # nearest: 1 MiB
    with pytest.raises(NotRecorded, match="over 8 GPUs"):
        bench.best_bus_bandwidth("all_reduce", 8, store=store)


def test_best_matmul_and_bus_bandwidth_of_one_gpu_model(tmp_path):
    import json
    from megalab.runs.running import NotRecorded, Store
    store = Store(tmp_path)
    with open(store.path("bench"), "a") as f:
        for gpu, tflops, bw in (("NVIDIA H200", 780.0, 330.0), ("NVIDIA H100 80GB HBM3", 700.0, 300.0)):
            f.write(json.dumps({"kind": "bench", "bench": "matmul", "dtype": "bf16", "m": 8192, "tflops": tflops,
                                "gpus": 1, "env": {"gpu_name": gpu}}) + "\n")
            f.write(json.dumps({"kind": "bench", "bench": "nccl", "op": "all_reduce", "dtype": "bf16", "gpus": 2,
                                "size_bytes": 1 << 30, "busbw_gbs": bw, "env": {"gpu_name": gpu}}) + "\n")
    assert bench.best_matmul_tflops("bf16", gpu="H100", store=store) == 700.0
    assert bench.best_matmul_tflops("bf16", store=store) == 780.0                    # any GPU model: the best
    assert bench.best_bus_bandwidth("all_reduce", 2, store=store, gpu="H100") == 300.0
    with pytest.raises(NotRecorded, match="no fp8 matmul record on H200"):
        bench.best_matmul_tflops("fp8", gpu="H200", store=store)
    with pytest.raises(NotRecorded, match="recorded on A100"):
        bench.best_bus_bandwidth("all_reduce", 2, store=store, gpu="A100")
