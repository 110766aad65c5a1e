"""bench.py on CPU: the bus-bandwidth convention of nccl-tests (PERFORMANCE.md) and the recorded data."""

import pytest

from megalab import bench


@pytest.mark.parametrize("op, factor", [("all_reduce", 1.5), ("all_gather", 0.75), ("reduce_scatter", 0.75),
                                        ("all_to_all", 0.75)])
def test_bus_bandwidth_on_four_ranks(op, factor):
    algbw, busbw = bench.bus_bandwidth(op, 1 << 30, 0.01, 4)
    assert algbw == pytest.approx((1 << 30) / 0.01) and busbw == pytest.approx(factor * algbw)


def test_recorded_benchmarks_load_as_a_frame():
    """results/bench.jsonl was recorded on the 4xH200 host; every collective was checked numerically."""
    nccl = bench.load("nccl")
    assert set(nccl["op"]) == set(bench.OPS) and nccl["correct"].all()
    assert (nccl["gpu_name"] == "NVIDIA H200").all()


def test_best_bus_bandwidth_reads_the_records(tmp_path):
    from megalab import bench
    from megalab.results import NotRecorded, Store
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
