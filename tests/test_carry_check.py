"""tools/gpu/carry_check.py: the working tree and carried paths a device call would copy, against 64
MiB."""

import importlib.util
import subprocess
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "carry_check", Path(__file__).parents[1] / "tools/gpu/carry_check.py"
)
cc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cc)


def test_tree_and_carried_paths_are_counted_ignored_files_are_not(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/.wheels/\n")
    # untracked, not ignored: copied
    (tmp_path / "big.jsonl").write_bytes(b"x" * 2**20)
    (tmp_path / ".wheels" / "lite").mkdir(parents=True)
    # ignored: only when carried
    (tmp_path / ".wheels" / "lite" / "a.whl").write_bytes(b"x" * 3 * 2**20)
    got = cc.parts(tmp_path, [".wheels/lite"])
    assert round(got["carry .wheels/lite"], 3) == 3.0 and 1.0 <= got["tree"] < 1.01
    assert "  of which big.jsonl" in got and "shared/" not in got
