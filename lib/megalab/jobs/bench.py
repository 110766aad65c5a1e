"""Know your machine: the ceilings every later number is measured against.

    megalab bench --gpus 4                 # matmul, HBM, kernel launch, NCCL on 2 and 4 GPUs
    python -m megalab.jobs.bench --gpus 4       # the same
    megalab bench --only launch            # one benchmark (matmul, hbm, launch or nccl)

Measures, on the GPUs of this host, and appends one record per point to ``results/bench.jsonl``:
- ``matmul``: bf16 (and fp8 on Hopper) C = A·B for square sizes, TFLOP/s = 2·n³ / time;
- ``hbm``: a device-to-device copy, bandwidth = (bytes read + bytes written) / time;
- ``launch``: what the host costs per kernel: host µs to launch one tiny eager kernel, wall µs per
eager kernel
  (launch-bound), and per kernel replayed from a CUDA graph; with the host beside it (env.host: CPU
  model and
  cores, VM or bare metal, NCCL version, link topology). A step of many small kernels waits on
  these;
- ``nccl``: all_reduce, all_gather, reduce_scatter, all_to_all from 1 KiB to 1 GiB on 2..N GPUs.
  Bus bandwidth follows nccl-tests (PERFORMANCE.md): algbw = size / time, busbw = algbw · 2(n−1)/n
  for
  all-reduce and algbw · (n−1)/n for all-gather, reduce-scatter and all-to-all, so that busbw is
  comparable
  with the link's bandwidth whatever n is.

Timing: CUDA events around ``iters`` back-to-back launches after ``warmup`` launches; the time of a
point is the median over ``repeats`` such windows. Random data, never zeros (zeros run faster on
Hopper). Each collective's result is checked numerically once per size (``correct`` in the record).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import uuid
from datetime import datetime, timezone

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
BENCHES = ("matmul", "hbm", "launch", "nccl")
LAUNCHES = 20000  # tiny kernels per launch measurement


def bus_bandwidth(op: str, size_bytes: int, time_s: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s for one collective of ``size_bytes`` on ``n`` ranks
    (nccl-tests)."""
    from megalab.theory.collectives import bus_factor

    algbw = size_bytes / time_s
    return algbw, algbw * bus_factor(op, n)


def _time(fn, iters: int, warmup: int = 3, repeats: int = 5) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` windows of ``iters`` calls (CUDA
    events)."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()  # CPU-GPU sync point
        times.append(start.elapsed_time(end) / 1e3 / iters)
    return statistics.median(times)


def _matmul(sizes, fp8: bool):
    import torch

    for n in sizes:
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        if fp8:
            a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().t().to(torch.float8_e4m3fn)
            one = torch.ones((), device="cuda")
            fn = lambda: torch._scaled_mm(
                a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16
            )  # noqa: E731
        else:
            fn = lambda: a @ b  # noqa: E731
        iters = max(3, min(200, int(2e12 / (2 * n**3))))
        t = _time(fn, iters)
        yield {
            "bench": "matmul",
            "dtype": "fp8" if fp8 else "bf16",
            "m": n,
            "n": n,
            "k": n,
            "time_s": t,
            "tflops": 2 * n**3 / t / 1e12,
            "gpus": 1,
        }


def _hbm(sizes):
    import torch

    for size in sizes:
        src = torch.randn(size // 2, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        t = _time(lambda: dst.copy_(src), iters=20)
        yield {
            "bench": "hbm",
            "dtype": "bf16",
            "size_bytes": size,
            "time_s": t,
            "gbs": 2 * size / t / 1e9,
            "gpus": 1,
        }


def _launch(n: int = LAUNCHES):
    """Host µs per eager launch of a tiny kernel (add_ on one element), wall µs per eager kernel,
    and wall µs per kernel replayed from a CUDA graph of 100 such kernels."""
    import time

    import torch
    from megalab import env

    x = torch.zeros(1, device="cuda")
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()  # CPU-GPU sync point
    t = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    host = time.perf_counter() - t
    torch.cuda.synchronize()
    eager = time.perf_counter() - t
    graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        for _ in range(100):
            x.add_(1)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n // 100):
        graph.replay()
    torch.cuda.synchronize()
    replayed = time.perf_counter() - t
    yield {
        "bench": "launch",
        "kernels": n,
        "eager_launch_host_us": 1e6 * host / n,
        "eager_kernel_wall_us": 1e6 * eager / n,
        "graph_kernel_wall_us": 1e6 * replayed / n,
        "gpus": 1,
        "host": env.host(),
    }


def _collective(op, size, group, n, rank):
    """One timed collective of ``size`` bytes per rank's input (nccl-tests 'size' convention)."""
    import torch
    import torch.distributed as dist

    numel = max(n, size // 2 // n * n)  # bf16 elements, divisible by n
    x = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
    if op == "all_reduce":
        fn = lambda: dist.all_reduce(x, group=group)  # noqa: E731
    elif op == "all_gather":
        # size = output bytes, as nccl-tests
        shard, out = x[: numel // n].clone(), torch.empty_like(x)
        fn = lambda: dist.all_gather_into_tensor(out, shard, group=group)  # noqa: E731
    elif op == "reduce_scatter":
        out = torch.empty(numel // n, device="cuda", dtype=torch.bfloat16)
        fn = lambda: dist.reduce_scatter_tensor(out, x, group=group)  # noqa: E731
    else:
        out = torch.empty_like(x)
        fn = lambda: dist.all_to_all_single(out, x, group=group)  # noqa: E731
    iters = 20 if numel * 2 >= 1 << 26 else 50
    t = _time(fn, iters)
    # numerical check: every rank contributes rank+1, so the sum is n(n+1)/2 (exact in bf16 for n <=
    # 8)
    probe = torch.full((n * 8,), float(rank + 1), device="cuda", dtype=torch.bfloat16)
    dist.all_reduce(probe, group=group)
    correct = bool((probe == n * (n + 1) / 2).all().item())
    algbw, busbw = bus_bandwidth(op, numel * 2, t, n)
    return {
        "bench": "nccl",
        "op": op,
        "dtype": "bf16",
        "size_bytes": numel * 2,
        "time_s": t,
        "algbw_gbs": algbw / 1e9,
        "busbw_gbs": busbw / 1e9,
        "gpus": n,
        "correct": correct,
    }


def _measure(args) -> list[dict]:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    rows: list[dict] = []
    only = set(args.only or BENCHES)
    if rank == 0 and "matmul" in only:
        matmul_sizes = [256, 512, 1024, 2048, 4096, 8192, 16384]
        rows += list(_matmul(matmul_sizes, fp8=False))
        if torch.cuda.get_device_capability() >= (8, 9):
            rows += list(_matmul(matmul_sizes, fp8=True))
    if rank == 0 and "hbm" in only:
        rows += list(_hbm([1 << 24, 1 << 26, 1 << 28, 1 << 30, 1 << 32]))
    if rank == 0 and "launch" in only:
        rows += list(_launch())
    if world > 1 and "nccl" in only:
        dist.init_process_group(
            "nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        )
        sizes = [1 << p for p in range(10, 31, 2)]  # 1 KiB .. 1 GiB
        counts = [n for n in (2, 4, 8) if n <= world]
        for n in counts:
            group = dist.new_group(list(range(n)))
            for op in OPS:
                for size in sizes:
                    row = _collective(op, size, group, n, rank) if rank < n else None
                    if rank == 0:
                        rows.append(row)
                    dist.barrier()
        dist.destroy_process_group()
    return rows


def _record(rows: list[dict]) -> list[dict]:
    from megalab.machine import env

    fp, commit = env.fingerprint(), env.git_commit()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return [
        {
            "schema": 1,
            "kind": "bench",
            "id": uuid.uuid4().hex,
            **row,
            "env": fp,
            "git_commit": commit,
            "recorded_at": now,
        }
        for row in rows
    ]


def load(kind: str | None = None, store=None, gpu: str | None = None):
    """Bench records as a DataFrame (one row per point); ``kind`` filters on matmul / hbm / nccl,
    ``gpu`` keeps one GPU model's ("H200" matches "NVIDIA H200"): the store holds several hosts'
    benches, and an H100's point must not stand in for an H200's."""
    import pandas as pd
    from megalab.jobs import running as results

    recs = (store or results.Store()).load("bench")
    df = pd.DataFrame(recs)
    if df.empty:
        raise results.NotRecorded(
            "No benchmark is recorded: run `megalab bench --gpus 4` on a GPU host."
        )
    df["gpu_name"] = df["env"].map(lambda e: (e or {}).get("gpu_name"))
    df = _on_gpu(df, gpu)
    if df.empty:
        raise results.NotRecorded(
            f"No benchmark is recorded on {gpu}: run `megalab bench` on a host with that GPU."
        )
    return df if kind is None else df[df["bench"] == kind].reset_index(drop=True)


def _on_gpu(df, gpu: str | None):
    """The rows recorded on one GPU model ("H200" matches "NVIDIA H200"); all rows when gpu is
    None."""
    if gpu is None:
        return df
    from megalab.records.store import same_gpu_model

    return df[df["gpu_name"].map(lambda name: same_gpu_model(name, gpu))]


def best_bus_bandwidth(
    op: str = "all_reduce",
    gpus: int = 4,
    size_bytes: float | None = None,
    store=None,
    gpu: str | None = None,
) -> float:
    """Recorded NCCL bus bandwidth (GB/s) of `op` over `gpus` GPUs: the highest (the large-message
    rate), or, with `size_bytes`, the best one at the recorded message size nearest to it on a log
    scale (small messages are latency-bound: chapter 00). `gpu` keeps one GPU model's records
    ("H200"). Chapters turn bytes into seconds with it."""
    import math

    df = load("nccl", store=store, gpu=gpu)
    rows = df[(df["op"] == op) & (df["gpus"] == gpus)]
    if rows.empty:
        from megalab.jobs.running import NotRecorded

        on = f" on {gpu}" if gpu else ""
        raise NotRecorded(
            f"no NCCL {op} record over {gpus} GPUs{on}: run `megalab bench --gpus {gpus}` on that "
            f"host"
        )
    if size_bytes is not None:
        gap = rows["size_bytes"].map(lambda n: abs(math.log(n / size_bytes)))
        rows = rows[gap == gap.min()]
    return float(rows["busbw_gbs"].max())


def best_matmul_tflops(dtype: str = "bf16", gpu: str | None = None, store=None) -> float:
    """The highest recorded matmul rate (TFLOP/s) of `dtype` ("bf16" or "fp8"), over every square
    size: the ceiling a large, well-shaped GEMM reaches on this GPU model (`gpu`, e.g. "H200")."""
    df = load("matmul", store=store, gpu=gpu)
    rows = df[df["dtype"] == dtype]
    if rows.empty:
        from megalab.jobs.running import NotRecorded

        on = f" on {gpu}" if gpu else ""
        raise NotRecorded(f"no {dtype} matmul record{on}: run `megalab bench` on that host")
    return float(rows["tflops"].max())


def launch_overhead(gpu: str | None = None, store=None) -> dict:
    """The newest `launch` record (of GPU model `gpu`, e.g. "H200"): eager_launch_host_us,
    eager_kernel_wall_us, graph_kernel_wall_us, and its host (env.host)."""
    df = load("launch", store=store, gpu=gpu)
    if df.empty:
        from megalab.jobs.running import NotRecorded

        on = f" on {gpu}" if gpu else ""
        raise NotRecorded(
            f"no launch benchmark{on}: run `megalab bench --only launch` on that host"
        )
    row = df.sort_values("recorded_at").iloc[-1]
    return {
        k: row[k]
        for k in ("eager_launch_host_us", "eager_kernel_wall_us", "graph_kernel_wall_us", "host")
    }


def describe(row: dict) -> str:
    """One line for a bench point, as `megalab bench` prints it."""
    if row["bench"] == "launch":
        return (
            f"launch  host {row['eager_launch_host_us']:.1f} us per eager launch, "
            f"{row['eager_kernel_wall_us']:.1f}"
            f" us per eager kernel, {row['graph_kernel_wall_us']:.2f} us per graphed kernel"
        )
    what = row.get("op") or row["dtype"]
    val = row.get("tflops") or row.get("gbs") or row.get("busbw_gbs")
    return (
        f"{row['bench']:7s} {what:15s} gpus={row['gpus']} "
        f"size={row.get('size_bytes') or row.get('m')}: {val:.1f}"
    )


WORKER = "MEGALAB_BENCH_WORKER"  # set in the ranks this command starts


def main(argv=None) -> int:
    from megalab.usage import Parser, positive_int

    p = Parser(prog="megalab bench", description=__doc__.splitlines()[0])
    p.add_argument(
        "--gpus", type=positive_int, default=None, help="GPUs to use (default: all visible)"
    )
    p.add_argument(
        "--only",
        choices=BENCHES,
        action="append",
        help="run this benchmark only (repeatable; default: all)",
    )
    args = p.parse_args(argv)
    # not under our torchrun yet (a LOCAL_RANK may be inherited): relaunch
    if os.environ.get(WORKER) != "1":
        from megalab.machine.env import git_commit, local_gpus
        from megalab.jobs.launch import NotEnoughGPUs, child_env

        git_commit()  # a $MEGALAB_COMMIT that is no commit name: said before anything is measured
        have = local_gpus()[1]
        one = set(args.only or BENCHES) <= {"matmul", "hbm", "launch"}  # one GPU's benchmarks only
        gpus = args.gpus or (1 if one else have)
        if have < 1:
            print(
                "megalab bench: needs at least one CUDA GPU: run it on a GPU host", file=sys.stderr
            )
            return 2
        if gpus > have:
            raise NotEnoughGPUs(
                f"--gpus {gpus}: this machine has {have} GPU(s): pass --gpus {have} or fewer"
            )
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={gpus}",
            "-m",
            "megalab.jobs.bench",
            f"--gpus={gpus}",
            *(f"--only={b}" for b in args.only or ()),
        ]
        return subprocess.call(cmd, env={**child_env(), WORKER: "1"})
    rows = _measure(args)
    if int(os.environ.get("RANK", 0)) == 0:
        from megalab.jobs import running as results

        store = results.Store()
        for rec in _record(rows):
            store.append(rec)
        for r in rows:
            print(describe(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
