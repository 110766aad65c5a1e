"""Where does launch-to-first-step go on 4 GPUs, and what shortens it? The trainer, launched as the
lib does.

    python3 tools/gpu/startup.py --out $OUT/startup-probe.jsonl

First the launcher alone (no Megatron): `import torch`, `import torch.distributed.run`,
`socket.getfqdn()` (torchrun asks for the host name), and torchrun starting an empty worker, with
and without `--local-addr`. Then each configuration of CONFIGS is launched once per variant of
VARIANTS, one run at a time, each with an empty inductor cache (a first launch on a machine:
torch.compile has everything to compile). A variant changes one start-up choice of the trainer (NCCL
started lazily, inductor's pool of compile workers, JAX kept out, torch.compile on), by environment
and a patch applied in the worker before the trainer starts. results/probes/startup-4xh200.jsonl was
recorded with an earlier trainer (eager NCCL, in-process compile): its provenance line gives each of
its runs' settings. One JSON line per measurement; the trainer's own `startup_marks_s` say where the
time went.

    {"kind": "launcher", "what": ..., "seconds": ...}
    {"kind": "run", "config": [...], "variant": ..., "gpus": N, "startup_s": ..., "marks": {...},
     "step_time_median_s": (steps 3 onward), "rc": ...}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lib"))

CONFIGS = [  # the 4-GPU strong point of the speed reference, and the pipeline that starts slowest
    [
        "--preset",
        "gpt-1.2b",
        "--mbs",
        "8",
        "--gbs",
        "8",
        "--iters",
        "10",
        "--gpus",
        "4",
        "--tp",
        "4",
    ],
    [
        "--preset",
        "gpt-350m",
        "--mbs",
        "4",
        "--gbs",
        "16",
        "--iters",
        "10",
        "--gpus",
        "4",
        "--pp",
        "4",
    ],
]
# name: environment added to the launch; each changes one start-up choice of the trainer
VARIANTS = {
    "trainer": {},
    # device_id: NCCL starts at init, groups split from it
    "eager-nccl": {"PROBE_EAGER_NCCL": "1"},
    # inductor compiles in-process, no worker pool
    "compile-threads-1": {"TORCHINDUCTOR_COMPILE_THREADS": "1"},
    # Transformer Engine imports JAX when it is installed
    "with-jax": {"PROBE_IMPORT_JAX": "1"},
    # Megatron's fused elementwise ops run eagerly
    "no-compile": {"TORCH_COMPILE_DISABLE": "1"},
}
PLAN = [(0, v) for v in VARIANTS] + [(1, v) for v in ("trainer", "no-compile")]


def worker(argv: list[str]) -> None:
    """Runs inside torchrun: the trainer module first (its start-up clock starts at its import, so
    what a variant imports counts as imports, not as torchrun), then the variant's patch, then the
    trainer."""
    from megalab.train import loop

    if os.environ.get("PROBE_IMPORT_JAX"):
        try:
            import jax  # noqa: F401  (the trainer's sys.modules block then finds it loaded)
        except ImportError:
            pass
    if os.environ.get("PROBE_EAGER_NCCL"):
        import torch

        init = torch.distributed.init_process_group

        def eager(backend=None, **kw):
            if backend == "nccl":
                kw["device_id"] = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
            return init(backend, **kw)

        torch.distributed.init_process_group = eager
    loop.main(argv)


def emit(out, obj: dict) -> None:
    print(json.dumps(obj), flush=True)
    out.write(json.dumps(obj) + "\n")
    out.flush()


def timed(cmd: list[str], env: dict) -> tuple[float, str]:
    t0 = time.time()
    p = subprocess.run(cmd, env={**env, "PROBE_T0": repr(t0)}, capture_output=True, text=True)
    return time.time() - t0, p.stdout + p.stderr


def launcher(out, env: dict) -> None:
    py = sys.executable
    for what, code in [
        ("import torch", "import torch"),
        ("import torch.distributed.run", "import torch.distributed.run"),
        ("socket.getfqdn()", "import socket; socket.getfqdn()"),
    ]:
        for _ in range(2):
            emit(
                out,
                {
                    "kind": "launcher",
                    "what": what,
                    "seconds": round(timed([py, "-c", code], env)[0], 3),
                },
            )
    empty = "import os, time; print('WORKER', time.time() - float(os.environ['PROBE_T0']))"
    Path("/tmp/probe_empty.py").write_text(empty + "\n")
    for extra in ([], ["--local-addr=127.0.0.1"]):
        for n in (1, 4):
            total, text = timed(
                [
                    py,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    f"--nproc_per_node={n}",
                    *extra,
                    "/tmp/probe_empty.py",
                ],
                env,
            )
            starts = [float(l.split()[1]) for l in text.splitlines() if l.startswith("WORKER")]
            emit(
                out,
                {
                    "kind": "launcher",
                    "what": f"torchrun {n} empty worker(s) {' '.join(extra)}".strip(),
                    "seconds": round(max(starts), 3) if starts else None,
                    "total_s": round(total, 3),
                },
            )


def run(out, config: list[str], variant: str, env: dict) -> None:
    gpus = int(config[config.index("--gpus") + 1])
    with tempfile.TemporaryDirectory() as cache:
        venv = {
            **env,
            **VARIANTS[variant],
            "TORCHINDUCTOR_CACHE_DIR": cache,
            "TRITON_CACHE_DIR": cache + "/triton",
            "MEGALAB_LAUNCH_T": repr(time.time()),
        }
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={gpus}",
            __file__,
            "--worker",
            *config,
        ]
        p = subprocess.run(cmd, env=venv, capture_output=True, text=True, timeout=300)
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    steps = [l["step_time_s"] for l in lines if l.get("kind") == "step"][3:]
    summary = next((l for l in lines if l.get("kind") == "summary"), {})
    emit(
        out,
        {
            "kind": "run",
            "config": config,
            "variant": variant,
            "gpus": gpus,
            "rc": p.returncode,
            "startup_s": summary.get("startup_s"),
            "marks": summary.get("startup_marks_s"),
            "step_time_median_s": statistics.median(steps) if steps else None,
            "stderr_tail": p.stderr[-1500:] if p.returncode else "",
        },
    )


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        return worker(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from megalab.jobs.launch import child_env

    env = child_env()  # as the lib launches: forced NCCL settings, lib/ first on PYTHONPATH
    with open(args.out, "a") as out:
        launcher(out, env)
        for i, variant in PLAN:
            run(out, CONFIGS[i], variant, env)


if __name__ == "__main__":
    main()
