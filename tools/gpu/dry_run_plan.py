"""Check a plan on this CPU machine before GPU time is spent on it (issues 23 and 24: the 4- and
8-GPU plans).

    python3 tools/gpu/dry_run_plan.py plan.txt [--timeout 600]

Each job of the plan (pack.py's format; a fit line is checked at its starting point, a parity line
at its layout) is built by `megalab run --dry-run`: gloo on CPU, Megatron Core builds every rank's
shards and counts their parameters, which must equal theory's count per rank
(theory.params_per_rank). Megatron cannot build Transformer Engine layers without TE: where this
machine has none, a job asking for TE is built with Megatron's local spec when its layout runs
without TE (same parameters, same shards; CUDA graphs set aside: a capture replays the same shards),
and only validated where it cannot (sequence parallelism, context parallelism, FP8). Experts build
either way (the local spec's SequentialMLP holds the same weights as TE's grouped GEMM). A peer job
(runner megatron-lm) is built as its trainer twin, after its pretrain_gpt.py flags are mapped (no
Megatron-LM checkout needed). Prints one line per job and a count; exits 1 if any job failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from megalab import theory
from megalab.runs.config import InvalidLayout
from megalab.runs.flags import add_config_args, config_from_args, config_to_args

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pack.py, beside this file
from pack import _jobs as pack_jobs  # noqa: E402


def _jobs(path):
    """(tag, RunConfig) per job of a plan, read by pack.py's own reader; `wait` lines and the
    subcommand (fit, parity, peer) skipped."""
    for _, tag, _, flags in pack_jobs(path):
        if tag == "wait":
            continue
        while flags and not flags[0].startswith("-"):  # fit, parity, peer
            flags = flags[1:]
        # fit's --hi is not --hidden
        known, _ = add_config_args(argparse.ArgumentParser(allow_abbrev=False)).parse_known_args(
            flags
        )
        yield tag, config_from_args(known)


def needs_te(cfg) -> str | None:
    """Why this layout cannot be built with the local spec, or None."""
    reasons = [
        why
        for on, why in (
            (cfg.sp, "sequence parallelism"),
            (cfg.cp > 1, "context parallelism"),
            (cfg.fp8, "FP8"),
            (cfg.cuda_graphs != "none", "CUDA graphs"),
        )
        if on
    ]
    return ", ".join(reasons) or None


def check(cfg, timeout: int) -> tuple[str, str]:
    """(verdict, detail) for one configuration."""
    try:
        cfg.validate()
    except InvalidLayout as e:
        return "FAILED", f"invalid: {str(e).splitlines()[0]}"
    if cfg.runner == "megatron-lm":  # the peer builds what its trainer twin builds (jobs.peer)
        from megalab.jobs import peer

        peer.args(cfg)  # its pretrain_gpt.py flags map
        cfg = peer.trainer_config(cfg)
    if cfg.impl == "te" and importlib.util.find_spec("transformer_engine") is None:
        why = needs_te(cfg.replace(cuda_graphs="none"))  # a capture replays the same shards
        if why:
            return "validated", f"needs TE to build ({why}); validate() passes"
        cfg = cfg.replace(impl="local", cuda_graphs="none")
    cmd = [sys.executable, "-m", "megalab", "run", *config_to_args(cfg), "--dry-run", "--json"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "FAILED", f"dry run took over {timeout} s"
    try:
        found = json.loads(out.stdout)
    except ValueError:
        return "FAILED", (out.stderr.strip().splitlines() or ["no output"])[-1][:200]
    if found.get("status") != "ok":
        return "FAILED", str(found.get("error"))[:200]
    built = [r["params"] for r in sorted(found["params"], key=lambda r: r["rank"])]
    want = theory.params_per_rank(cfg)
    if built != want:
        return "FAILED", f"parameters per rank {built} against theory's {want}"
    return "built", f"{len(built)} ranks, parameters per rank = theory's (largest {max(built):,})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan")
    p.add_argument("--timeout", type=int, default=600)
    args = p.parse_args(argv)
    counts: dict[str, int] = {}
    seen = set()
    for tag, cfg in _jobs(args.plan):
        if cfg.key in seen:
            continue
        seen.add(cfg.key)
        verdict, detail = check(cfg, args.timeout)
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{verdict:<9} {tag:<10} {cfg.label}: {detail}", flush=True)
    print(", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    return 1 if counts.get("FAILED") else 0


if __name__ == "__main__":
    sys.exit(main())
