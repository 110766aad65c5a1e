"""Does a reused process train as a fresh one does? The GPU check of process reuse
(megalab.jobs.reuse, megalab.train.batch), on 2 GPUs.

    python3 tools/gpu/reuse_check.py [--preset gpt-350m] [--gpus 2] [--iters 20] [--plan]

Two configurations of one world size that share a process (DP 2 and PP 2: neither sets
CUDA_DEVICE_MAX_CONNECTIONS, train.batch.process_key) are each run in a fresh launch (megalab.run),
then both in one reused launch (megalab.run_many(reuse=True)), all recorded tagged "reuse-check".
For each configuration it checks:

- the loss curve, step by step: reused == fresh bit for bit ("identical"), else every step within
  the trainer's parity floor (jobs.sweep.PARITY_FLOOR nats, "within tolerance"), else FAIL;
- peak memory, allocated and reserved (the largest rank's): within 1% of the fresh run, else FAIL;

and prints each run's launch to first step (summary.startup_s, with its start-up marks). The second
run of the reused launch should start in a few seconds: no torchrun, interpreter or imports. Exit
code 0 when every check passes, 1 otherwise. --plan prints the configurations and stops (no GPU).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lib"))

MEMORY_TOLERANCE = 0.01  # peak memory, reused against fresh
TAG = "reuse-check"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="gpt-350m", help="model preset (megalab presets)")
    p.add_argument("--gpus", type=int, default=2, help="world size of both configurations")
    p.add_argument("--iters", type=int, default=20, help="steps per run")
    p.add_argument("--mbs", type=int, default=4, help="micro-batch size")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run")
    p.add_argument("--plan", action="store_true", help="print the configurations and stop")
    return p.parse_args(argv)


def configs(ns) -> list:
    """DP gpus and PP gpus of the preset: one world size, one process_key."""
    from megalab.runs import presets

    base = presets.get(ns.preset).replace(gpus=ns.gpus, iters=ns.iters, mbs=ns.mbs)
    gbs = ns.mbs * ns.gpus * 2
    return [base.replace(gbs=gbs), base.replace(pp=ns.gpus, gbs=gbs)]


def compare(fresh, reused) -> list[str]:
    """Problems of the reused run against the fresh one (none: it passes); prints the verdicts."""
    from megalab.jobs.sweep import PARITY_FLOOR

    problems = []
    a, b = fresh.series.get("loss") or [], reused.series.get("loss") or []
    diff = max((abs(x - y) for x, y in zip(a, b)), default=None) if len(a) == len(b) else None
    verdict = "identical" if a == b and a else "within tolerance"
    if diff is None or diff > PARITY_FLOOR:
        verdict = "FAIL"
        problems.append(f"{fresh.label}: loss differs by {diff} (floor {PARITY_FLOOR})")
    print(f"  loss: {verdict} (largest step difference {diff})")
    for name in ("mem_allocated_peak_gib_per_rank", "mem_reserved_peak_gib_per_rank"):
        x, y = max(fresh.summary.get(name) or [0]), max(reused.summary.get(name) or [0])
        ok = x > 0 and abs(y - x) <= MEMORY_TOLERANCE * x
        print(f"  {name}: fresh {x:.3f} GiB, reused {y:.3f} GiB {'ok' if ok else 'FAIL'}")
        if not ok:
            problems.append(f"{fresh.label}: {name} {y:.3f} against {x:.3f} GiB")
    return problems


def main(argv=None) -> int:
    ns = parse_args(argv)
    cfgs = configs(ns)
    for cfg in cfgs:
        print(cfg.label)
    if ns.plan:
        return 0
    import megalab

    fresh = [megalab.run(c, mode="live", tags=[TAG], timeout_s=ns.timeout) for c in cfgs]
    reused = megalab.run_many(cfgs, mode="live", reuse=True, tags=[TAG], timeout_s=ns.timeout)
    problems = []
    for f, r in zip(fresh, reused):
        print(f"{f.label}: fresh {f.status}, reused {r.status}")
        for how, res in (("fresh", f), ("reused", r)):
            marks = res.summary.get("startup_marks_s")
            print(f"  launch to first step, {how}: {res.summary.get('startup_s')} s {marks}")
        if not (f.ok and r.ok):
            problems.append(f"{f.label}: fresh {f.status}, reused {r.status}")
            continue
        problems += compare(f, r)
    print("PASS" if not problems else "FAIL:\n" + "\n".join(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
