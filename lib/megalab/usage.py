"""Command-line parsing that answers a mistake in one line: the reason first, then where help is.

argparse's own `error()` prints the whole usage (17 lines for `megalab run`) before the reason; a
`Parser` prints `megalab run: error: argument --tp: invalid int value: 'two'` and `(megalab run
--help lists the options)`, and exits with status 2. The value types here refuse what argparse would
let through to a traceback later (`--nodes 0`, a `--partition` with a newline in it).
"""

from __future__ import annotations

import argparse
import re
import sys

EXIT_USAGE = 2
SAFE_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._,:+-]*")  # slurm partitions, accounts, time limits


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (plus a pointer to --help), exit status 2.
    Options are taken by their whole name only: `--gpu H100` must not pass as an abbreviation of
    `--gpus`."""

    def __init__(self, *args, **kw):
        kw.setdefault("allow_abbrev", False)
        super().__init__(*args, **kw)

    def error(self, message: str):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        print(f"({self.prog} --help lists the options)", file=sys.stderr)
        self.exit(EXIT_USAGE)


# int() also takes "1_0" and other scripts' digits ("٤"): not here
_ASCII_INT = re.compile(r"[+-]?[0-9]+")


def whole_number(text: str) -> int:
    """An int written in ASCII digits, as argparse type: "٤" and "1_0" are refused, not read as 4
    and 10."""
    if not _ASCII_INT.fullmatch(text.strip()):
        raise ValueError(f"invalid whole number: {text!r}")
    return int(text)


whole_number.__name__ = "int"  # argparse names the type in its message: "invalid int value: '٤'"


def number(text: str) -> float:
    """A float written in ASCII ("4", "3e-4", "nan"), as argparse type: float() also takes "٤" and
    "1_0"."""
    if not text.isascii() or "_" in text:
        raise ValueError(f"invalid number: {text!r}")
    return float(text)


number.__name__ = "float"


def _number(kind, text: str, low, what: str):
    if (
        (kind is int and not _ASCII_INT.fullmatch(text.strip()))
        or not text.isascii()
        or "_" in text
    ):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number in digits 0-9: pass {what}")
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: pass {what}") from None
    if value < low or value != value:  # NaN compares false with everything
        raise argparse.ArgumentTypeError(f"{text} is too small: pass {what}")
    return value


def positive_int(text: str) -> int:
    """An int of 1 or more (GPU and node counts, repeats, bisection bounds)."""
    return _number(int, text, 1, "a whole number of 1 or more")


def count(text: str) -> int:
    """An int of 0 or more (a node rank)."""
    return _number(int, text, 0, "a whole number of 0 or more")


def seconds(text: str) -> float:
    """A time limit in seconds, more than 0."""
    value = _number(float, text, 0, "seconds, more than 0")
    if value == 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: pass seconds, more than 0 and finite")
    return value


# sbatch --time: M, M:S, H:M:S, D-H[:M[:S]]
_SLURM_TIME = re.compile(r"(\d+-)?\d{1,2}(:\d{2}){0,2}|\d+-\d{1,2}")


def slurm_time(text: str) -> str:
    """A time limit as sbatch --time takes it: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or
    D-HH:MM:SS."""
    if not _SLURM_TIME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time limit: pass HH:MM:SS or D-HH:MM:SS (e.g. 01:00:00)"
        )
    return text


def safe_word(text: str) -> str:
    """A word that can stand in a generated script as is: letters, digits and . _ , : + - (no
    spaces)."""
    if not SAFE_WORD.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r}: use letters, digits and . _ , : + - only")
    return text
