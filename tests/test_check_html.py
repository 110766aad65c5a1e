"""tools/check_html.py's verdicts on math, and MathJax served with the book (no CDN)."""
import importlib.util
import types
from pathlib import Path

import yaml

from megalab.book import reproduce

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_html", ROOT / "tools" / "check_html.py")
check_html = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_html)


def test_unrendered_tex_is_a_problem():
    for text in (r"the bubble is \(\frac{p-1}{m}\) of the step", r"$$M = 16 \Psi$$", r"where \[ x \]",
                 r"memory \frac{1}{2} per rank"):
        assert check_html.unrendered_tex(text), text
        assert any("unrendered TeX" in p for p in check_html.math_problems(0, 0, 0, text))
    assert check_html.unrendered_tex("costs $3 and 4 GiB; a path C:/x (not TeX)") is None


def test_formulas_not_typeset_or_in_error_are_problems():
    assert check_html.math_problems(3, 3, 0, "all typeset") == []
    assert "2 of 3 formulas not typeset" in check_html.math_problems(3, 1, 0, "")[0]
    assert "could not typeset" in check_html.math_problems(1, 1, 1, "")[0]


def test_mathjax_is_served_from_the_build_not_a_cdn(tmp_path):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
    assert config["mathjax_path"] == "mathjax/tex-chtml.js"          # relative: _static/mathjax/
    assert "tools/mathjax-setup.sh" in (ROOT / "Makefile").read_text()  # make book fetches it (test_install.py)
    src = tmp_path / "src" / ".mathjax"
    (src / "output" / "chtml" / "fonts" / "woff-v2").mkdir(parents=True)
    (src / "tex-chtml.js").write_text("// MathJax")
    (src / "output" / "chtml" / "fonts" / "woff-v2" / "MathJax_Main-Regular.woff").write_bytes(b"w")
    app = types.SimpleNamespace(srcdir=str(tmp_path / "src"), outdir=str(tmp_path / "html"),
                                builder=types.SimpleNamespace(format="html"),
                                config=types.SimpleNamespace(megalab_mathjax_dir=".mathjax"))
    reproduce._copy_mathjax(app, None)
    out = tmp_path / "html" / "_static" / "mathjax"
    assert (out / "tex-chtml.js").exists() and (out / "output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff").exists()
