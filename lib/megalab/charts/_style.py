"""The look every figure shares (template, palette, markers) and the renderer that shows it in the
book.

Rendering: Jupyter Book 1 (myst-nb) cannot render plotly's own mime type, and the HTML book must
work offline. `setup_notebook()` therefore registers a renderer that emits *both* plotly's mime type
(JupyterLab draws it) and a `text/html` div whose script calls `Plotly.newPlot` without bundling
plotly.js. The book loads plotly.js once per page, from the copy inside the installed plotly
package (see `megalab.book.reproduce.setup`, a Sphinx extension listed in `_config.yml`).
"""

from __future__ import annotations

import sys

import plotly.graph_objects as go
import plotly.io as pio
from plotly.io.base_renderers import PlotlyRenderer

RENDERER = "megalab"
PALETTE = ["#1f5fa8", "#d1495b", "#2e933c", "#edae49", "#6c4f9e", "#00798c", "#8d6a4f", "#555555"]
SYMBOLS = {"reference": "circle", "yours": "diamond-open"}
TEMPLATE = go.layout.Template(
    layout=go.Layout(
        template=pio.templates["plotly_white"],
        colorway=PALETTE,
        font=dict(size=13),
        margin=dict(l=60, r=30, t=60, b=50),
        legend=dict(orientation="h", y=-0.2),
        hovermode="closest",
    )
)


def _figure(title: str, **layout) -> go.Figure:
    fig = go.Figure(layout=dict(template=TEMPLATE, title=title))
    return fig.update_layout(**layout)


def _by_source(df):
    """[(source, rows)]: the reference records first, then the reader's own ("yours")."""
    if "source" not in df:
        return [("reference", df)]
    return [
        (src, df[df["source"] == src])
        for src in ("reference", "yours")
        if (df["source"] == src).any()
    ]


def _split_yours(df):
    """(the book's rows, the reader's own rows): rows whose `source` is "yours" apart from the rest
    (reference records, and rows without a source such as predictions)."""
    if "source" not in df:
        return df, df.iloc[0:0]
    mine = df["source"].eq("yours")
    return df[~mine], df[mine]


def _yours(name) -> str:
    """The legend name of a reader's own points: "<name> (yours)"."""
    return f"{name} (yours)"


class _BookRenderer(PlotlyRenderer):
    """plotly's mime type for JupyterLab plus an HTML div (no plotly.js inside) for the HTML
    book."""

    def to_mimebundle(self, fig_dict):
        bundle = super().to_mimebundle(fig_dict)
        html = pio.to_html(
            bundle["application/vnd.plotly.v1+json"],
            include_plotlyjs=False,
            full_html=False,
            config={"responsive": True, "displaylogo": False},
            validate=False,
        )
        return {**bundle, "text/html": html}


def setup_notebook() -> None:
    """Make notebook figures render both in JupyterLab and in the static HTML book (renderer
    RENDERER)."""
    # plotly's renderers import nbformat, and its jsonschema imports rfc3987_syntax when installed
    # (jupyter-events requires it): 38 Lark grammars built at import, 3 s of every kernel's start on
    # a 2-core CPU. Nothing in a chapter validates IRIs against a schema: marked absent, jsonschema
    # goes without its "iri" format check (its import expects that, ImportError).
    sys.modules.setdefault("rfc3987_syntax", None)
    pio.renderers[RENDERER] = _BookRenderer()
    pio.renderers.default = RENDERER
