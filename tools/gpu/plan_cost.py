"""Estimate a plan's device minutes from what recorded runs cost (plans' headers quote it).

    python3 tools/gpu/plan_cost.py tools/gpu/plans/ch03-tp4.txt [--gpu H200] [-v]

Each run or peer line costs what its nearest recorded runs on `gpu` took: their start-up (launch to
the first step) + the line's iterations × their median step + TEARDOWN_S (writing the record, the
next launch). Nearest: the same configuration, iterations, seed and what barely moves a step's time
set aside (aux-loss weight and balance, router dtype, wgrad fusion, warm-up, the runner: the peer
costs as the trainer); else the same layout at another batch or CUDA-graph setting, its step scaled
by the global batch and GRAPH_SPEEDUP. A line nothing matches costs UNKNOWN_S; a profiled line's
steps cost PROFILE_FACTOR more. fit and parity lines are not estimated (none in the axis plans).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pack.py, beside this file
from pack import run_lines  # noqa: E402

TEARDOWN_S = 15.0
UNKNOWN_S = 120.0
PROFILE_FACTOR = 1.5
# a graphed step against an eager one, as the 2xH200 measurements of issue 44 (0.43-0.77)
GRAPH_SPEEDUP = 0.5
# knob -> the value a step's time is looked up at
NEUTRAL = dict(
    iters=1,
    seed=0,
    moe_aux_coeff=1e-2,
    moe_router_fp32=False,
    grad_accum_fusion="auto",
    lr_warmup=None,
    init="layout_invariant",
    runner="megalab",
    moe_balance="aux_loss",
    stop_when_tight=False,
)


# what a looser lookup sets aside
_ANY = {"mbs": 0, "gbs": 0, "cuda_graphs": "none"}


def _shape(cfg, *loose: str) -> str:
    """A lookup key: cfg at NEUTRAL, the `loose` fields (mbs, gbs, cuda_graphs) set aside too."""
    return cfg.replace(**NEUTRAL, **{f: _ANY[f] for f in loose}).key


def _costs(store, gpu: str) -> dict:
    """lookup key -> [(startup s, step s, cfg), ...] of the ok runs on gpu, profiled ones aside."""
    from megalab.records.store import as_store

    out: dict = {}
    for cfg, r in as_store(store).runs_on(gpu, "ok"):
        s = r.get("summary") or {}
        if "profile" in (r.get("tags") or ()) or not s.get("step_time_s"):
            continue
        for key in (_shape(cfg), _shape(cfg, *_ANY)):
            out.setdefault(key, []).append((s.get("startup_s") or 60.0, s["step_time_s"], cfg))
    return out


def _scaled(step: float, recorded, cfg) -> float:
    """A recorded step's time at cfg's global batch and CUDA-graph setting."""
    graphs = (recorded.cuda_graphs != "none", cfg.cuda_graphs != "none")
    factor = {(False, True): GRAPH_SPEEDUP, (True, False): 1 / GRAPH_SPEEDUP}.get(graphs, 1.0)
    return step * cfg.gbs / recorded.gbs * factor


def _steps(cfg) -> int:
    """The steps a run trains: all its iters, or, stopping on a tight median, the fewest it may
    (warm-up steps and MIN_TIMED timed ones: a steady step is tight there)."""
    from megalab.metrics import WARMUP_STEPS
    from megalab.records.timings import MIN_TIMED

    return min(cfg.iters, WARMUP_STEPS + MIN_TIMED) if cfg.stop_when_tight else cfg.iters


def line_cost(cfg, profiled: bool, costs: dict) -> tuple[float, str]:
    """(seconds, how it was found: '=' same configuration, '~' at another batch or graph setting,
    '?' none)."""
    found, how = costs.get(_shape(cfg)), "="
    if not found:
        found, how = costs.get(_shape(cfg, *_ANY)), "~"
    if not found:
        return UNKNOWN_S, "?"
    step = statistics.median(_scaled(c[1], c[2], cfg) for c in found)
    startup = statistics.median(c[0] for c in found)
    steps = _steps(cfg) * step * (PROFILE_FACTOR if profiled else 1.0)
    return startup + steps + TEARDOWN_S, how


def estimate(plan: str, store=None, gpu: str = "H200") -> list[tuple[int, str, float, str]]:
    """(line number, tag, seconds, how) of each run and peer line of the plan."""
    costs = _costs(store, gpu)
    return [
        (number, tag, *line_cost(cfg, profile, costs))
        for number, tag, cfg, profile in run_lines(plan)
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan")
    p.add_argument("--gpu", default="H200")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per job")
    args = p.parse_args(argv)
    rows = estimate(args.plan, gpu=args.gpu)
    by_tag: dict = {}
    for number, tag, s, how in rows:
        if args.verbose:
            print(f"{number:4d} {tag:<28} {s:7.0f} s {how}")
        by_tag[tag.rstrip("!")] = by_tag.get(tag.rstrip("!"), 0.0) + s
    for tag, s in by_tag.items():
        print(f"{tag:<28} {s / 60:6.1f} min")
    unknown = sum(how == "?" for *_, how in rows)
    print(
        f"total {sum(s for _, _, s, _ in rows) / 60:.1f} device minutes over {len(rows)} runs"
        + (f" ({unknown} not matched: {UNKNOWN_S:.0f} s each)" if unknown else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
