"""Does a run start faster without torchrun's agent (or from a warm fork-server), and train the
same? The GPU check of megalab.jobs.spawn and megalab.jobs.forkserver, on 2 GPUs.

    python3 tools/gpu/launch_check.py [--preset gpt-1.2b] [--gpus 2] [--rounds 2] [--plan]
    python3 tools/gpu/launch_check.py --launchers spawn,forkserver    # megalab.jobs.forkserver

One configuration (TP 2 with CUDA graphs, as the chapters' comparison groups run) is launched fresh
`--rounds` times under each launcher of `--launchers`, alternated (spawn, torchrun, spawn,
torchrun: MEGALAB_LAUNCHER picks), all recorded tagged "launch-check" and "launcher:<name>". It
prints each run's launch to first step with its start-up marks (`python`: launch to the rank's
first line of Python, the part the agent costs; `imports`: torch, Megatron and Transformer Engine
loaded, the part the fork-server's warm imports remove) and the median of each launcher. The first
forkserver launch also starts its server (the imports, once): use --rounds 3 or more for its
median. It checks that every run's loss curve equals the first launcher's first run's within the
trainer's parity floor (jobs.sweep.PARITY_FLOOR). Exit code 0 when the losses agree, 1 otherwise;
--plan prints the configuration and stops (no GPU).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lib"))

TAG = "launch-check"
LAUNCHERS = ("spawn", "torchrun")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="gpt-1.2b", help="model preset (megalab presets)")
    p.add_argument("--gpus", type=int, default=2, help="world size (TP)")
    p.add_argument("--rounds", type=int, default=2, help="launches per launcher, alternated")
    p.add_argument("--iters", type=int, default=10, help="steps per run")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    p.add_argument(
        "--launchers",
        default=",".join(LAUNCHERS),
        help="MEGALAB_LAUNCHER values to alternate (spawn, torchrun, forkserver)",
    )
    p.add_argument("--plan", action="store_true", help="print the configuration and stop")
    return p.parse_args(argv)


def config(ns):
    from megalab.runs import presets

    base = presets.get(ns.preset)
    return base.replace(
        gpus=ns.gpus, tp=ns.gpus, mbs=8, gbs=8, iters=ns.iters, cuda_graphs="te"
    ).validate()


def main(argv=None) -> int:
    ns = parse_args(argv)
    cfg = config(ns)
    launchers = [how.strip() for how in ns.launchers.split(",") if how.strip()]
    if not launchers or set(launchers) - {"spawn", "torchrun", "forkserver"}:
        sys.exit(
            f"--launchers: spawn, torchrun or forkserver, comma-separated, not {ns.launchers!r}"
        )
    print(cfg.label)
    print("launchers:", ", ".join(launchers))
    if ns.plan:
        return 0
    import megalab
    from megalab.jobs.launch import LAUNCHER
    from megalab.jobs.sweep import PARITY_FLOOR

    runs = []
    for _ in range(ns.rounds):
        for how in launchers:
            os.environ[LAUNCHER] = how
            res = megalab.run(cfg, mode="live", tags=[TAG, f"launcher:{how}"], timeout_s=ns.timeout)
            marks = res.summary.get("startup_marks_s")
            print(
                f"{how}: {res.status}, launch to first step {res.summary.get('startup_s')} s "
                f"{marks}"
            )
            runs.append((how, res))
    os.environ.pop(LAUNCHER, None)
    problems = [f"{how}: {r.status}" for how, r in runs if not r.ok]
    first = next((r for how, r in runs if how == launchers[0] and r.ok), None)
    for how in launchers:
        starts = [r.summary.get("startup_s") for h, r in runs if h == how and r.ok]
        marks = [r.summary.get("startup_marks_s") or {} for h, r in runs if h == how and r.ok]
        if starts:
            to = {
                name: statistics.median(m[name] for m in marks if name in m) if marks else None
                for name in ("python", "imports")
            }
            print(
                f"{how}: median launch to first step {statistics.median(starts):.1f} s, "
                f"to the rank's Python {to['python']:.1f} s, to its imports done "
                f"{to['imports']:.1f} s"
            )
    for how, r in runs:
        if first is None or not r.ok:
            continue
        a, b = first.series.get("loss") or [], r.series.get("loss") or []
        diff = max((abs(x - y) for x, y in zip(a, b)), default=None) if len(a) == len(b) else None
        if diff is None or diff > PARITY_FLOOR:
            problems.append(f"{how}: loss differs from the first spawned run's by {diff}")
    print("PASS" if not problems else "FAIL:\n" + "\n".join(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
