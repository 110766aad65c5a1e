"""bench.py on CPU: the bus-bandwidth convention of nccl-tests (PERFORMANCE.md) and the recorded
data."""

import pytest

from megalab.jobs import bench


@pytest.mark.parametrize(
    "op, factor",
    [("all_reduce", 1.5), ("all_gather", 0.75), ("reduce_scatter", 0.75), ("all_to_all", 0.75)],
)
def test_bus_bandwidth_on_four_ranks(op, factor):
    algbw, busbw = bench.bus_bandwidth(op, 1 << 30, 0.01, 4)
    assert algbw == pytest.approx((1 << 30) / 0.01) and busbw == pytest.approx(factor * algbw)


def test_recorded_benchmarks_load_as_a_frame():
    """results/bench.jsonl holds H200 hosts' benches (4x and 2x) and a 2xH100 host's; every
    collective was checked numerically; `gpu` keeps one model's points, and a model never benched is
    an error that says what to run."""
    from megalab.jobs.running import NotRecorded

    nccl = bench.load("nccl")
    assert set(nccl["op"]) == set(bench.OPS) and nccl["correct"].all()
    assert set(nccl["gpu_name"]) == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    assert set(bench.load("nccl", gpu="H200")["gpu_name"]) == {"NVIDIA H200"}
    assert (
        bench.load("matmul", gpu="H100")["tflops"].max()
        < bench.load("matmul", gpu="H200")["tflops"].max()
    )
    with pytest.raises(NotRecorded, match="recorded on B200: run `megalab bench`"):
        bench.load(gpu="B200")


def test_best_bus_bandwidth_reads_the_records(tmp_path):
    from megalab.jobs import bench
    from megalab.jobs.running import NotRecorded, Store
    import json

    store = Store(tmp_path)
    with open(store.path("bench"), "a") as f:
        for size, bw in ((1 << 20, 30.0), (1 << 30, 350.0)):
            f.write(
                json.dumps(
                    {
                        "kind": "bench",
                        "bench": "nccl",
                        "op": "all_reduce",
                        "gpus": 4,
                        "size_bytes": size,
                        "busbw_gbs": bw,
                        "env": {},
                    }
                )
                + "\n"
            )
    assert bench.best_bus_bandwidth("all_reduce", 4, store=store) == 350.0
    # nearest: 1 MiB
    assert bench.best_bus_bandwidth("all_reduce", 4, size_bytes=4 << 20, store=store) == 30.0
    with pytest.raises(NotRecorded, match="over 8 GPUs"):
        bench.best_bus_bandwidth("all_reduce", 8, store=store)


def test_best_matmul_and_bus_bandwidth_of_one_gpu_model(tmp_path):
    import json
    from megalab.jobs.running import NotRecorded, Store

    store = Store(tmp_path)
    with open(store.path("bench"), "a") as f:
        for gpu, tflops, bw in (
            ("NVIDIA H200", 780.0, 330.0),
            ("NVIDIA H100 80GB HBM3", 700.0, 300.0),
        ):
            f.write(
                json.dumps(
                    {
                        "kind": "bench",
                        "bench": "matmul",
                        "dtype": "bf16",
                        "m": 8192,
                        "tflops": tflops,
                        "gpus": 1,
                        "env": {"gpu_name": gpu},
                    }
                )
                + "\n"
            )
            f.write(
                json.dumps(
                    {
                        "kind": "bench",
                        "bench": "nccl",
                        "op": "all_reduce",
                        "dtype": "bf16",
                        "gpus": 2,
                        "size_bytes": 1 << 30,
                        "busbw_gbs": bw,
                        "env": {"gpu_name": gpu},
                    }
                )
                + "\n"
            )
    assert bench.best_matmul_tflops("bf16", gpu="H100", store=store) == 700.0
    # any GPU model: the best
    assert bench.best_matmul_tflops("bf16", store=store) == 780.0
    assert bench.best_bus_bandwidth("all_reduce", 2, store=store, gpu="H100") == 300.0
    with pytest.raises(NotRecorded, match="no fp8 matmul record on H200"):
        bench.best_matmul_tflops("fp8", gpu="H200", store=store)
    with pytest.raises(NotRecorded, match="recorded on A100"):
        bench.best_bus_bandwidth("all_reduce", 2, store=store, gpu="A100")


CPUINFO_VM = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep hypervisor avx512f
"""


def test_the_host_is_described_from_cpuinfo():
    from megalab import env

    assert env.parse_cpuinfo(CPUINFO_VM) == {
        "cpu_model": "AMD EPYC 9654 96-Core Processor",
        "vm": True,
    }
    assert env.parse_cpuinfo(CPUINFO_VM.replace(" hypervisor", ""))["vm"] is False
    assert env.parse_cpuinfo(None) == {"cpu_model": None, "vm": False}
    here = env.host()  # this CPU machine: no GPU, no topology
    assert {"cpu_model", "cpu_count", "vm", "nccl", "topology"} <= set(here) and here[
        "cpu_count"
    ] >= 1


def _launch_record(gpu="NVIDIA H200", at="2030-01-01T00:00:00+00:00", host_us=5.0):
    return {
        "schema": 1,
        "kind": "bench",
        "id": at,
        "bench": "launch",
        "kernels": 20000,
        "eager_launch_host_us": host_us,
        "eager_kernel_wall_us": host_us + 0.5,
        "graph_kernel_wall_us": 1.2,
        "gpus": 1,
        "host": {
            "cpu_model": "AMD EPYC 9654 96-Core Processor",
            "cpu_count": 32,
            "vm": True,
            "nccl": "2.27.5",
            "topology": "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X",
        },
        "env": {"gpu_name": gpu},
        "git_commit": "abc",
        "recorded_at": at,
    }


def test_launch_records_sit_beside_the_old_benchmarks(tmp_path):
    """A launch record loads with the matmul, HBM and NCCL records (old ones unchanged, still
    valid), is one line of `megalab bench`, and the newest of a GPU model answers
    launch_overhead."""
    import json
    from megalab.records import type_problems
    from megalab.jobs.running import NotRecorded, Store

    store = Store(tmp_path)
    old = Store().load("bench")[0]  # a committed record, as recorded
    with open(store.path("bench"), "a") as f:
        f.write(
            json.dumps(
                {
                    "kind": "bench",
                    "bench": "matmul",
                    "dtype": "bf16",
                    "m": 8192,
                    "tflops": 780.0,
                    "gpus": 1,
                    "env": {"gpu_name": "NVIDIA H200"},
                }
            )
            + "\n"
        )
        for rec in (
            _launch_record(),
            _launch_record(at="2030-02-01T00:00:00+00:00", host_us=4.0),
            _launch_record(gpu="NVIDIA H100 80GB HBM3", host_us=9.0),
        ):
            assert not type_problems(rec)
            f.write(json.dumps(rec) + "\n")
    assert len(bench.load(store=store)) == 4 and bench.best_matmul_tflops(store=store) == 780.0
    newest = bench.launch_overhead("H200", store=store)
    assert (
        newest["eager_launch_host_us"] == 4.0
        and newest["host"]["vm"]
        and newest["host"]["nccl"] == "2.27.5"
    )
    assert bench.launch_overhead("H100", store=store)["eager_launch_host_us"] == 9.0
    assert "4.0 us per eager launch" in bench.describe(_launch_record(host_us=4.0))
    assert bench.describe(old).startswith(old["bench"])
    with pytest.raises(NotRecorded, match="--only launch"):
        bench.launch_overhead("H200", store=_only_matmul(tmp_path / "m"))


def _only_matmul(root):
    import json
    from megalab.jobs.running import Store

    store = Store(root)
    store.path("bench").parent.mkdir(parents=True, exist_ok=True)
    with open(store.path("bench"), "a") as f:
        f.write(
            json.dumps(
                {
                    "kind": "bench",
                    "bench": "matmul",
                    "dtype": "bf16",
                    "m": 8192,
                    "tflops": 780.0,
                    "gpus": 1,
                    "env": {"gpu_name": "NVIDIA H200"},
                }
            )
            + "\n"
        )
    return store
