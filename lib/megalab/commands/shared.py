"""What every `megalab` subcommand shares: the exit status it ends with, `BadArgument` for a mistake
in its arguments, the RunConfig its flags describe, and the two ways it prints an answer (an aligned
table, JSON). What each exit status means is written once, in `megalab.cli`'s docstring.
"""

from __future__ import annotations

import json
import re

EXIT_OK, EXIT_RUN_FAILED, EXIT_INVALID, EXIT_NOT_RECORDED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a writer whose reader went away


class BadArgument(ValueError):
    """An argument names something that is not there, or two arguments disagree; the message says
    which."""


# all but tab and newline: escape sequences, ...
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Text safe to print on a terminal: control characters (an imported record's escape sequences,
    which would retitle the window or clear the screen) shown as \\x1b and the like."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def fmt(v) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10_000:
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt(x) for x in v) + "]"
    return str(v)


def _flat(d: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _flat(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def table(d: dict) -> str:
    rows = _flat(d)
    width = max((len(k) for k, _ in rows), default=0)
    return printable("\n".join(f"{k:<{width}}  {fmt(v)}" for k, v in rows))


def to_json(obj) -> str:
    return json.dumps(obj, indent=2, default=str)


def validated_config(ns):
    """The RunConfig the flags describe, validated first in every command and mode (InvalidLayout:
    exit 2)."""
    from megalab.runs.flags import config_from_args

    return config_from_args(ns).validate()
