"""Several runs in one torchrun launch (process reuse): torchrun, the interpreter and the imports
are paid once for the runs of one world size.

    torchrun --nproc_per_node=2 -m megalab.train.batch runs.jsonl

runs.jsonl holds one run per line, {"argv": [...]}: the flags `python -m megalab.train` takes
(megalab.train.args). Every rank goes through the runs in order: each run sets up its own layout
(initialize_model_parallel), builds its model and optimizer, trains and prints the lines a single
run prints, then `teardown` releases what it left (megalab.train.teardown); the world process group
stays. Rank 0 brackets each run's lines with {"kind": "batch", "run": i, "runs": n} before and
{"kind": "batch", "run": i, "status": ...} after, so the launcher (megalab.jobs.reuse) splits the
output into one run folder each. A run's start-up marks are seconds from its own start
(the launch, for the first), with "batch_position": i.

A run that fails (OOM, an exception, an invalid layout) is that run's failure: the ranks agree on
its status over a gloo group of their own and go on to the next run. A rank whose peers do not come
to that agreement within AGREE_TIMEOUT_S (one stuck in a collective of the failed run) exits, and
torchrun stops the others: the launcher records the run as failed and starts the runs not done in a
fresh launch. Runs share a process only where they agree on what is read once per process
(process_key); CUDA-graph runs and Megatron-LM's own script are never batched (reusable).
"""

import faulthandler
import json
import os
import sys
import time
import traceback
from datetime import timedelta

from megalab.runs.config import InvalidLayout
from megalab.train import log, loop, wiring
from megalab.train.args import checked_config, parse_args
from megalab.train.parent import die_with_parent
from megalab.train.teardown import teardown

# a run's ranks end within seconds of each other (its last lines are collectives)
AGREE_TIMEOUT_S = 60
# worst last: the status a run gets when its ranks disagree
WORST = ("ok", "invalid", "oom", "failed")


def reusable(cfg) -> bool:
    """Whether a run may share its process: not CUDA graphs (a graphed run ends with os._exit, its
    graphs hold a memory pool), not Megatron-LM's pretrain_gpt.py (the peer)."""
    return cfg.cuda_graphs == "none" and cfg.runner == "megalab"


def process_key(cfg) -> tuple:
    """What the runs of one process must agree on: the world size, and what is read once per
    process, before CUDA and torch._dynamo start (wiring.environment, torch.compile on or off)."""
    return (cfg.gpus, tuple(sorted(wiring.environment(cfg).items())), cfg.compile)


def main(argv=None, probes: list | None = None) -> None:
    """Run every run of the file argv[0] on this rank; `probes` as megalab.train.loop.main's."""
    die_with_parent()
    faulthandler.enable()
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        runs = [json.loads(line)["argv"] for line in f if line.strip()]
    rank = int(os.environ.get("RANK", "0"))
    control, key = start(runs)
    for i, run_argv in enumerate(runs):
        if rank == 0:
            log.emit({"kind": "batch", "run": i, "runs": len(runs)})
        started = loop._LAUNCH if i == 0 else time.time()
        status = agree(run_one(run_argv, i, started, rank, key, probes or []), control)
        teardown(keep=[control])
        if rank == 0:
            log.emit({"kind": "batch", "run": i, "status": status})
    import torch

    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def start(runs: list) -> tuple:
    """Set the process-wide settings of the first run that parses (the launcher gives every run the
    same process_key) and start the world process group; returns a gloo group for agreeing on each
    run's status, and that run's process_key."""
    key = None
    for run_argv in runs:
        args = parse_args(run_argv)
        try:
            cfg = checked_config(args)
        except InvalidLayout:
            continue
        if not args.dry_run:  # read when the CUDA context is created and when TE loads
            os.environ.update(wiring.environment(cfg))
        if not cfg.compile:
            os.environ["TORCH_COMPILE_DISABLE"] = "1"
        key = process_key(cfg)
        break
    import torch

    dry = all("--dry-run" in run_argv for run_argv in runs)
    if not dry:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group("gloo" if dry else "nccl")
    timeout = timedelta(seconds=AGREE_TIMEOUT_S)
    return torch.distributed.new_group(backend="gloo", timeout=timeout), key


def run_one(argv: list, position: int, started: float, rank: int, key, probes: list) -> str:
    """One run as megalab.train.loop.main runs it, its failure printed and returned as a status."""
    args = parse_args(argv)
    try:
        cfg = checked_config(args)
        if not reusable(cfg) or process_key(cfg) != key:
            raise InvalidLayout(f"{cfg.label} cannot share this process: launch it on its own")
    except InvalidLayout as e:
        if rank == 0:
            log.emit({"kind": "error", "status": "invalid", "rank": rank, "message": str(e)})
            print(f"InvalidLayout: {str(e).splitlines()[0]}", file=sys.stderr, flush=True)
        return "invalid"
    python = round(loop._T0 - started, 2) if position == 0 else 0.0
    startup = {"python": python, "batch_position": position}
    try:
        loop.train(cfg, args, rank, probes, launched=started, startup=startup)
        return "ok"
    except Exception as e:  # noqa: BLE001  (a failed run is a result; the next run goes on)
        if log.is_oom(e):
            log.emit(log.oom_line(rank, e))
            return "oom"
        traceback.print_exc()
        sys.stderr.flush()
        return "failed"


def agree(status: str, control) -> str:
    """The worst status over the ranks; a rank whose peers do not come exits (torchrun then stops
    them)."""
    import torch

    mine = torch.tensor([WORST.index(status)])
    try:
        torch.distributed.all_reduce(mine, op=torch.distributed.ReduceOp.MAX, group=control)
    except RuntimeError as e:  # a peer stuck in the failed run's collectives
        print(f"batch: ranks did not agree after a run: {e}", file=sys.stderr, flush=True)
        os._exit(1)
    return WORST[int(mine.item())]


if __name__ == "__main__":
    main()
