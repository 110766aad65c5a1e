"""Merge the records of one store folder into another: `python3 tools/gpu/merge_store.py SRC DST`.

For each SRC/*.jsonl, the lines DST's file of that name lacks are appended to it (a record is known
by its "id"; a line without one, by its text), in SRC's order; a file DST lacks is copied whole.
Nothing in DST is changed or dropped. host.sh seeds a GPU host's store with it: the store a
previous call left first, then the checkout's results/, so a later call that brings the whole
results/ (a live reproduction needs the book's records) adds them to the records the host made.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _identity(line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return line
    return record.get("id", line) if isinstance(record, dict) else line


def merge(src: Path, dst: Path) -> dict[str, int]:
    """{file name: lines appended} for each SRC/*.jsonl merged into DST."""
    dst.mkdir(parents=True, exist_ok=True)
    added = {}
    for f in sorted(src.glob("*.jsonl")):
        target = dst / f.name
        text = target.read_text() if target.exists() else ""
        known = {_identity(line) for line in text.splitlines() if line.strip()}
        new = [
            line
            for line in f.read_text().splitlines()
            if line.strip() and _identity(line) not in known
        ]
        if new:
            with target.open("a") as out:
                if text and not text.endswith("\n"):
                    out.write("\n")
                out.write("\n".join(new) + "\n")
        added[f.name] = len(new)
    return added


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: merge_store.py SRC_DIR DST_DIR")
    for name, n in merge(Path(sys.argv[1]), Path(sys.argv[2])).items():
        if n:
            print(f"merge_store: {n} record(s) of {name} added")
