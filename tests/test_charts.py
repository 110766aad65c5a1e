"""charts (the package): every public name is re-exported, every call the book makes resolves, the
renderer works, and importing it changes nothing. The figures are tested in
tests/test_charts_<module>.py."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from megalab import charts

ROOT = Path(__file__).resolve().parents[1]


def test_all_names_resolve_and_every_module_is_reexported():
    assert all(hasattr(charts, name) for name in charts.__all__)
    modules = [
        "breakdown",
        "compare",
        "machine",
        "matrix",
        "parity",
        "scaling",
        "spread",
        "timeline",
    ]
    for mod in modules:
        module = __import__(f"megalab.charts.{mod}", fromlist=["_"])
        public = [
            n
            for n, v in vars(module).items()
            if callable(v)
            and not n.startswith("_")
            and getattr(v, "__module__", "") == module.__name__
        ]
        assert public and set(public) <= set(charts.__all__), mod


def test_every_call_in_the_book_and_lib_resolves():
    sources = [json.dumps(json.loads(p.read_text())["cells"]) for p in ROOT.glob("book/**/*.ipynb")]
    sources += [p.read_text() for p in (ROOT / "lib" / "megalab").rglob("*.py")]
    called = {m for s in sources for m in re.findall(r"\bcharts\.([A-Za-z_]\w*)", s)}

    # `from megalab.charts.kernels import ...` names a submodule: it resolves whether or not an
    # earlier import made it an attribute of the package
    def resolves(name):
        return hasattr(charts, name) or importlib.util.find_spec(f"megalab.charts.{name}")

    assert called and {n for n in called if not resolves(n)} == set()


def test_import_has_no_side_effects():
    code = (
        "import sys, plotly.io as pio; before = pio.renderers.default; import megalab.charts; "
        "assert pio.renderers.default == before and 'megalab' not in pio.renderers; "
        "assert not {'torch', 'megalab.runs.config', 'megalab.metrics'} & set(sys.modules), "
        "sys.modules.keys()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_renderer_emits_html_without_plotlyjs_and_the_mime_type():
    charts.setup_notebook()
    try:
        bundle = go.Figure(go.Scatter(x=[1], y=[2]))._repr_mimebundle_()
    finally:
        pio.renderers.default = "plotly_mimetype"
    assert "application/vnd.plotly.v1+json" in bundle
    html = bundle["text/html"]
    assert "Plotly.newPlot" in html and "plotly.js v" not in html and len(html) < 50_000
