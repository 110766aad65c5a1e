"""An sbatch script that runs one configuration over several nodes, and records it as `megalab run`
does.

    megalab slurm --preset gpt-8.3b --gpus 16 --tp 8 --nodes 2 > job.sh
    mkdir -p runs && sbatch job.sh

One srun task per node; each task is `megalab run ... --nnodes N --node-rank R --rdzv-endpoint
HEAD:29500`, a torchrun agent meeting the others at the first node (a static rendezvous: the task's
rank is its node's). Node 0 appends the run's record to the store (`results/`, or $MEGALAB_RESULTS)
with every node's machine under "nodes"; the other nodes only take part. The run's time limit is the
job's less a minute, so a run that overstays is recorded as a timeout before Slurm ends the job.

`cpu=True` writes the same script for a cluster without GPUs: no GPU request, and each node runs
`megalab run --dry-run` (CPU, gloo: the model shards are built, nothing is trained), which keeps the
record it would append in a store of its own inside node 0's run folder, never in the book's. It
checks the cluster path (sbatch, srun, the rendezvous, node 0's record) before GPU hours are spent;
tests/test_slurm.py submits it to a one-node Slurm on localhost.
"""

from __future__ import annotations

import re
import shlex

from megalab.jobs.launch import FORCED_ENV, RDZV_PORT

# the run stops this long before the job's limit, so node 0 records it before Slurm kills it
GRACE_S = 60
# Slurm's time limits: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
_TIME = re.compile(
    r"(?:(?P<d>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<a>\d+)(?::(?P<b>\d+)(?::(?P<c>\d+))?)?)"
)


class InvalidSlurmOption(ValueError):
    """An sbatch option or node split cannot make a working script; the message says what to
    change."""


def _sbatch_word(name: str, value: str) -> str:
    from megalab.usage import SAFE_WORD

    if not SAFE_WORD.fullmatch(str(value)):
        raise InvalidSlurmOption(
            f"{name}={value!r} cannot stand in an sbatch script: use letters, digits and "
            f". _ , : + - only"
        )
    return shlex.quote(str(value))


def time_limit_s(time: str) -> int:
    """Seconds in a Slurm time limit (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S); InvalidSlurmOption
    otherwise."""
    m = _TIME.fullmatch(str(time))
    if m is None:
        raise InvalidSlurmOption(
            f"time={time!r} is not a Slurm time limit: write HH:MM:SS, D-HH:MM:SS or minutes"
        )
    n = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if "d" in n:
        seconds = ((n["d"] * 24 + n["dh"]) * 60 + n.get("dm", 0)) * 60 + n.get("ds", 0)
    elif "c" in n:
        seconds = (n["a"] * 60 + n["b"]) * 60 + n["c"]
    else:
        seconds = n["a"] * 60 + n.get("b", 0)
    if seconds <= 0:
        raise InvalidSlurmOption(
            f"time={time!r} is no time at all: give the job a limit above zero"
        )
    return seconds


def script(
    cfg,
    nodes: int,
    gpus_per_node: int | None = None,
    partition: str | None = None,
    time: str = "01:00:00",
    account: str | None = None,
    cpu: bool = False,
) -> str:
    """The sbatch script (see the module docstring). Every value written into it is checked (no
    spaces, newlines or shell characters) and shell-quoted."""
    if nodes < 1 or (gpus_per_node is not None and gpus_per_node < 1):
        raise InvalidSlurmOption(
            f"nodes={nodes}, gpus_per_node={gpus_per_node}: both must be 1 or more"
        )
    if gpus_per_node is None:
        if cfg.gpus % nodes:
            raise InvalidSlurmOption(
                f"gpus={cfg.gpus} does not split over {nodes} nodes: make gpus a multiple of nodes"
            )
        gpus_per_node = cfg.gpus // nodes
    if nodes * gpus_per_node != cfg.gpus:
        raise InvalidSlurmOption(
            f"nodes x gpus_per_node = {nodes * gpus_per_node} but the config has "
            f"gpus={cfg.gpus}: make them equal"
        )
    # the name rule keeps the label to letters, digits and . _ - + (quoted below all the same)
    cfg.validate()
    from megalab.runs.flags import config_to_args

    q = shlex.quote
    sbatch = [
        f"--job-name={q(f'megalab-{cfg.label}'[:80])}",
        f"--nodes={int(nodes)}",
        "--ntasks-per-node=1",
        *([] if cpu else [f"--gpus-per-node={int(gpus_per_node)}"]),
        f"--time={_sbatch_word('time', time)}",
        "--output=runs/slurm-%j.log",
    ]
    if partition:
        sbatch.append(f"--partition={_sbatch_word('partition', partition)}")
    if account:
        sbatch.append(f"--account={_sbatch_word('account', account)}")
    timeout = max(GRACE_S, time_limit_s(time) - GRACE_S)
    run = [
        "python3",
        "-m",
        "megalab",
        "run",
        *config_to_args(cfg),
        "--mode",
        "live",
        "--timeout",
        str(timeout),
        "--json",
        *(["--dry-run"] if cpu else []),
    ]
    exports = " ".join(f"{k}={q(v)}" for k, v in FORCED_ENV.items())
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {s}" for s in sbatch),
            f"# {cfg.label}  (key {cfg.key})"
            + ("  CPU: a dry run, nothing is trained" if cpu else ""),
            "set -euo pipefail",
            f"export {exports}",
            'export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}"',
            'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "# one task per node, each a torchrun agent; node 0 (task 0) appends the record",
            "srun bash -c 'exec \"$@\" --nnodes \"$SLURM_NTASKS\" --node-rank \"$SLURM_PROCID\"' "
            "megalab \\",
            f'    {shlex.join(run)} \\',
            f'    --rdzv-endpoint "$head:{RDZV_PORT}"',
            "",
        ]
    )
