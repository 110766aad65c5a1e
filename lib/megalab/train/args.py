"""The trainer's command line: every RunConfig field as a flag (megalab.runs.flags), plus --run-dir,
--dry-run and --profile; the RunConfig checked against the torchrun world before anything starts."""

import argparse
import importlib.util
import os

from megalab.runs.config import InvalidLayout
from megalab.runs.flags import add_config_args, config_from_args


def parse_args(argv=None) -> argparse.Namespace:
    p = add_config_args(
        argparse.ArgumentParser(description="Train a GPT with Megatron Core 0.16.1 (megalab.train)")
    )
    p.add_argument("--run-dir", default=None, help="folder for --profile output (default: cwd)")
    p.add_argument(
        "--dry-run", action="store_true", help="CPU + gloo: build the shards, count, exit"
    )
    p.add_argument(
        "--profile", action="store_true", help="steps 5-7 profiled, step 3's passes timed"
    )
    return p.parse_args(argv)


def checked_config(args):
    """RunConfig from the flags, gpus = world size; InvalidLayout says what to change."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cfg = config_from_args(args)
    if args.gpus is None:
        cfg = cfg.replace(gpus=world)
    problems = cfg.problems(te_available=importlib.util.find_spec("transformer_engine") is not None)
    if cfg.gpus != world:
        problems.append(
            f"gpus={cfg.gpus} but torchrun started {world} processes: "
            f"pass --nproc_per_node={cfg.gpus}"
        )
    if problems:
        raise InvalidLayout("\n".join(problems))
    return cfg
