"""tools/check_html.py's verdicts on math, and MathJax served with the book (no CDN)."""

import importlib.util
import types
from pathlib import Path

import pytest
import yaml

from megalab.book import reproduce

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_html", ROOT / "tools" / "check_html.py")
check_html = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_html)


def test_unrendered_tex_is_a_problem():
    for text in (
        r"the bubble is \(\frac{p-1}{m}\) of the step",
        r"$$M = 16 \Psi$$",
        r"where \[ x \]",
        r"memory \frac{1}{2} per rank",
    ):
        assert check_html.unrendered_tex(text), text
        assert any("unrendered TeX" in p for p in check_html.math_problems(0, 0, 0, text))
    assert check_html.unrendered_tex("costs $3 and 4 GiB; a path C:/x (not TeX)") is None


def test_formulas_not_typeset_or_in_error_are_problems():
    assert check_html.math_problems(3, 3, 0, "all typeset") == []
    assert "2 of 3 formulas not typeset" in check_html.math_problems(3, 1, 0, "")[0]
    assert "could not typeset" in check_html.math_problems(1, 1, 1, "")[0]


def test_mathjax_is_served_from_the_build_not_a_cdn(tmp_path):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
    assert config["mathjax_path"] == "mathjax/tex-chtml.js"  # relative: _static/mathjax/
    # make book fetches it (test_install.py)
    assert "tools/mathjax-setup.sh" in (ROOT / "Makefile").read_text()
    src = tmp_path / "src" / ".mathjax"
    (src / "output" / "chtml" / "fonts" / "woff-v2").mkdir(parents=True)
    (src / "tex-chtml.js").write_text("// MathJax")
    (src / "output" / "chtml" / "fonts" / "woff-v2" / "MathJax_Main-Regular.woff").write_bytes(b"w")
    app = types.SimpleNamespace(
        srcdir=str(tmp_path / "src"),
        outdir=str(tmp_path / "html"),
        builder=types.SimpleNamespace(format="html"),
        config=types.SimpleNamespace(megalab_mathjax_dir=".mathjax"),
    )
    reproduce._copy_mathjax(app, None)
    out = tmp_path / "html" / "_static" / "mathjax"
    assert (out / "tex-chtml.js").exists() and (
        out / "output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff"
    ).exists()


# -- the rewritten chapters' pages, read as a reader reads them
# -------------------------------------------
KEY = "gpt2-xl_tp1_pp1_cp1_ep1_dp4_mbs4_gbs16_seq1024_distopt"


def test_which_pages_are_rewritten():
    assert check_html.rewritten("book/01_data_parallel/data_parallel.html", ("01",)) == "reader"
    assert check_html.rewritten("book/01_data_parallel/evidence.html", ("01",)) == "evidence"
    assert check_html.rewritten("book/04_context_parallel/context_parallel.html", ("01",)) is None
    assert check_html.rewritten("book/glossary.html", ("01",)) is None


def test_rewritten_pages_of_book_are_read_too():
    pages = {"performance": "performance_evidence"}
    assert check_html.rewritten("book/performance.html", ("01",), pages) == "reader"
    assert check_html.rewritten("book/performance_evidence.html", ("01",), pages) == "evidence"
    assert check_html.rewritten("book/planner.html", ("01",), pages) is None
    assert check_html.rewritten("book/performance.html") == "reader"  # frame.REWRITTEN_PAGES


def test_text_problems_name_what_a_reader_should_not_meet():
    for text, what in (
        ("recorded in session 14", "diary word"),
        ("the lease ran out", "diary word"),
        ("two runs queued", "diary word"),
        ("see the Errata", "diary word"),
        ("at commit 3f9a2c1d the step", "commit-hash"),
        (f"{KEY} ran", "run key"),
        ("median step_time_s over 20 steps", "raw column name"),
        ("MFU NaN %", "NaN"),
        ("loss nan after step 5", "NaN"),
    ):
        problems = check_html.text_problems(text)
        assert len(problems) == 1 and what in problems[0], (text, problems)


def test_text_problems_spare_what_a_reader_may_meet():
    for text in (
        "DP 4 + distributed optimizer reaches 41.2% MFU in 1,234 ms",
        "a 4096-token sequence, 1e10 FLOP",
        "see https://github.com/NVIDIA/Megatron-LM/commit/3f9a2c1d5e for the fix",
        "release 0.16.1",
        "differs: NaN checks none; loss (NaN, Inf) every micro-batch, for NaN and Inf",
        "--no-check-for-nan-in-loss-and-grad",
        "colour #1f5fa8",
        "B200 and H200, bf16 and fp8",
        "decade 2000000 and deadbeef",
    ):
        assert check_html.text_problems(text) == [], text


def test_figure_problems_evidence_pages_keep_only_run_keys_out_of_labels():
    figs = [
        {
            "title": "Step time in session 3",
            "legend": [KEY, "DP 4"],
            "axes": ["step_time_s"],
            "clipped": True,
        }
    ]
    reader = check_html.reader_problems("reader", "", figs, 1000)
    assert any("run key as a title or legend" in p for p in reader)
    assert any("diary word" in p for p in reader) and any("raw column" in p for p in reader)
    assert any("wider than the figure at 1000 px" in p for p in reader)
    evidence = check_html.reader_problems(
        "evidence", f"{KEY} recorded in session 3 at 3f9a2c1d", figs
    )
    assert len(evidence) == 1 and "run key" in evidence[0]


def test_an_unrounded_number_on_a_figure_mark_is_a_problem_on_reader_pages():
    figs = [{"title": "Memory", "legend": [], "axes": [], "marks": ["36.279775857925415", "41.2"]}]
    found = check_html.reader_problems("reader", "", figs, 1400)
    assert len(found) == 1 and "unrounded number" in found[0]
    figs[0]["marks"] = ["36.3", "1,234", "0.5%"]
    assert check_html.reader_problems("reader", "", figs, 1400) == []


PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><script src="../../_static/plotly.min.js"></script></head>
<body><main><article class="bd-article"><p>{text}</p>
<div class="cell_input"><pre>megalab.run("{key}")</pre></div>
<div id="f" class="plotly-graph-div" style="height:300px; width:100%;"></div>
<script>Plotly.newPlot("f", [{{x: [1, 2], y: [3, 4], name: "{legend}"}}],
  {{title: {{text: "{title}"}}, width: {width}, height: 300}}, {{responsive: true}});</script>
</article></main></body></html>"""


@pytest.mark.skipif(
    not Path(check_html.CHROMIUM).exists(), reason="no Chromium (tools/browser-setup.sh)"
)
def test_check_html_reads_rewritten_pages_in_a_browser(tmp_path, capsys, monkeypatch):
    import shutil

    import plotly

    (tmp_path / "_static").mkdir()
    shutil.copyfile(
        Path(plotly.__file__).parent / "package_data" / "plotly.min.js",
        tmp_path / "_static" / "plotly.min.js",
    )
    ch = tmp_path / "book" / "01_data_parallel"
    ch.mkdir(parents=True)
    ok = dict(
        text="DP 4 + distributed optimizer takes 812 ms a step.",
        key=KEY,
        legend="DP 4",
        title="Step time",
        width=600,
    )
    (ch / "data_parallel.html").write_text(PAGE.format(**ok))
    (ch / "evidence.html").write_text(
        PAGE.format(**{**ok, "text": f"{KEY}, recorded in session 12"})
    )
    bad = tmp_path / "book" / "02_tensor_parallel"
    bad.mkdir()
    (bad / "tensor_parallel.html").write_text(
        PAGE.format(
            text="Two runs were queued at 3f9a2c1d.",
            key=KEY,
            legend=KEY,
            width=260,
            title="Step time per layout, measured against the prediction, at every TP degree",
        )
    )
    monkeypatch.setattr("megalab.book.frame.REWRITTEN", ("01", "02"))
    assert check_html.main([str(tmp_path), "--timeout", "10"]) == 1
    out = capsys.readouterr().out
    assert "ok    book/01_data_parallel/data_parallel.html" in out
    assert "ok    book/01_data_parallel/evidence.html" in out
    assert "FAIL  book/02_tensor_parallel/tensor_parallel.html" in out
    for what in (
        "a diary word",
        "a commit-hash-like token",
        "run key as a title or legend",
        "wider than the figure",
    ):
        assert what in out, what
