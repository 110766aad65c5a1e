"""The linter: every line of lib/, tests/ and tools/ within 100 columns, no unused names, and the
code as `ruff format` leaves it (pyproject's [tool.ruff]). `tools/wrap_long_lines.py` wraps
comments, docstrings and long strings, which ruff format leaves alone."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["lib", "tests", "tools"]


def _ruff() -> str:
    found = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(found).exists():
        pytest.skip("ruff is not installed: pip install -e '.[test]'")
    return found


def test_every_line_within_100_columns_and_no_unused_names():
    out = subprocess.run(
        [_ruff(), "check", "--output-format", "concise", *PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_code_is_formatted():
    out = subprocess.run(
        [_ruff(), "format", "--check", *PATHS], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, (
        "run: ruff format lib tests tools && python3 tools/wrap_long_lines.py lib "
        "tests tools\n" + out.stdout[-2000:]
    )


def test_wrap_long_lines_keeps_meaning_and_is_stable(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import wrap_long_lines as w

    src = (
        'def f(x):\n'
        '    """' + "word " * 30 + '"""\n'
        '    y = g(x, "' + "text " * 25 + '")  # ' + "note " * 10 + '\n'
        '    return y\n'
    )
    once = w.wrap(w.move_trailing_comments(src, 100), 100)
    once = w.split_strings(once, 100)
    import ast

    assert (
        ast.dump(ast.parse(once)).replace(" ", "") != "" and max(map(len, once.splitlines())) <= 100
    )
    assert w.split_strings(w.wrap(once, 100), 100) == once
    f = {}
    exec(compile(src.replace("g(x,", "(lambda *a: a[1])(x,"), "a", "exec"), f)
    g = {}
    exec(compile(once.replace("g(x,", "(lambda *a: a[1])(x,"), "b", "exec"), g)
    assert f["f"](1) == g["f"](1) and f["f"].__doc__.split() == g["f"].__doc__.split()
