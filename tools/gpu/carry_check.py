"""Will a device call take this working tree and these carried paths? Run it here before a chained
lease: the device refuses a call whose tree passes 64 MiB (tracked and untracked-not-ignored files,
shared/ where the checkout has one, and the carried paths), and the calls chained after a refused
one fail too.

    python3 tools/gpu/carry_check.py .gpuwheels/lite .gpuwheels/tebuilt .gpuwheels/install.sh .peer

Prints the total and the largest parts; exits 1 when it is over, naming what could be set aside.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LIMIT_MIB = 64.0


def size_mib(path: Path) -> float:
    """MiB of a file, or of every file under a folder."""
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def tree_files(root: Path) -> list[Path]:
    """The files the device copies besides the carried ones: tracked and untracked-not-ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [root / f for f in out.split("\0") if f and (root / f).is_file()]


def parts(root: Path, carried: list[str]) -> dict[str, float]:
    """MiB by part: each carried path, shared/, and the tree's files (its largest ones named)."""
    out = {f"carry {c}": size_mib(root / c) for c in carried}
    if (root / "shared").exists():
        out["shared/"] = size_mib(root / "shared")
    files = sorted(tree_files(root), key=lambda p: p.stat().st_size, reverse=True)
    out["tree"] = sum(p.stat().st_size for p in files) / 2**20
    for p in files[:3]:
        out[f"  of which {p.relative_to(root)}"] = p.stat().st_size / 2**20
    return out


def main(argv=None) -> int:
    root = Path(__file__).resolve().parents[2]
    carried = list(sys.argv[1:] if argv is None else argv)
    missing = [c for c in carried if not (root / c).exists()]
    if missing:
        print(f"not here: {', '.join(missing)} (the device would remove them there)")
    got = parts(root, [c for c in carried if c not in missing])
    total = sum(v for k, v in got.items() if not k.startswith("  "))
    for name, mib in got.items():
        print(f"{mib:8.1f} MiB  {name}")
    print(
        f"{total:8.1f} MiB  in all, limit {LIMIT_MIB:.0f}: "
        f"{'fits' if total <= LIMIT_MIB else 'OVER'}"
    )
    if total > LIMIT_MIB:
        print(
            "set a large tracked file aside for this call (e.g. mv results/runs.jsonl /tmp/) or "
            "carry less"
        )
    return 0 if total <= LIMIT_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
