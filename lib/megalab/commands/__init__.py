"""The `megalab` subcommands, one function each, `cmd_<name>(ns) -> exit status`; `megalab.cli`
parses the command line and calls them.

    predict   plan (and plan --search), presets: what theory says before anything runs
    runs      run (and run --dry-run), peer, fit, parity, slurm, prepare-data: training, here or on
              a cluster
    records   results, env, experiments, chapters, reproduce, bench: what is recorded, what records
              it, the book

What every command shares is in `shared`: the exit statuses, `BadArgument`, the RunConfig the flags
describe, and the two ways to print an answer (an aligned table, JSON). The statuses and
`BadArgument` are re-exported here.
"""

from megalab.commands.shared import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_NOT_RECORDED,
    EXIT_OK,
    EXIT_RUN_FAILED,
    BadArgument,
)

__all__ = [
    "EXIT_OK",
    "EXIT_RUN_FAILED",
    "EXIT_INVALID",
    "EXIT_NOT_RECORDED",
    "EXIT_INTERRUPTED",
    "EXIT_BROKEN_PIPE",
    "BadArgument",
]
