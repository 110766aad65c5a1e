"""megalab.book.prose: a said value shows the same text in JupyterLab ({eval} in the kernel) and in
the HTML book (the eval role over glue data), and the same text `{glue:text}`name:fmt`` showed."""

import json
import types

import pytest
from IPython.core.formatters import format_display_data
from myst_nb.core.variables import format_plain_text

from megalab.book import prose
from megalab.book.prose import ProseNameTaken, Said

CASES = [
    (0.123456, ".1%"),
    (0.5, ".0%"),
    (12.345, ".1f"),
    (12, ".2f"),
    (1234567.8, ",.0f"),
    (3.7, ".0f"),
    (-0.042, "+.1%"),
    (1234, ","),
    (7, ""),
    ("tp2", ""),
    (0.000123, ".5f"),
    (2.5, ".3f"),
    (40, "d"),
]


@pytest.mark.parametrize("value,fmt", CASES)
def test_said_text_is_what_glue_text_showed(value, fmt):
    text = format_display_data(Said(value, fmt))[0]["text/plain"]  # what the kernel displays
    assert text == str(Said(value, fmt)) == repr(Said(value, fmt))
    assert prose.shown_text(text) == format_plain_text(repr(value), fmt or "s")


def test_said_keeps_its_value_and_formats_on_request():
    x = Said(0.4567, ".1%")
    assert x.value == 0.4567 and f"{x}" == "45.7%" and f"{x:.2f}" == "0.46"
    with pytest.raises(ValueError):
        Said("words", ".1f")  # a spec that does not fit fails where the value is said


def _shell(monkeypatch, user_ns):
    glued = {}
    monkeypatch.setattr("IPython.get_ipython", lambda: types.SimpleNamespace(user_ns=user_ns))
    monkeypatch.setattr(
        "myst_nb.glue", lambda name, value, display=True: glued.update({name: (value, display)})
    )
    return glued


def test_say_binds_the_kernel_variable_and_glues_the_same_value(monkeypatch):
    ns = {"p": 3, "In": []}
    glued = _shell(monkeypatch, ns)
    prose.say("att_2k", 0.0731, ".0%")
    assert str(ns["att_2k"]) == "7%" and glued["att_2k"] == (ns["att_2k"], False)
    prose.say("att_2k", 0.1, ".0%")  # a cell run again says it again
    assert str(ns["att_2k"]) == "10%"
    for taken in ("p", "In", "max", "len"):  # a notebook variable, IPython's, builtins
        with pytest.raises(ProseNameTaken, match="another name"):
            prose.say(taken, 1.0)
    with pytest.raises(ValueError, match="identifier"):
        prose.say("pred-fit", 1.0)
    assert ns["p"] == 3


def test_say_outside_a_kernel_only_glues(monkeypatch):
    glued = {}
    monkeypatch.setattr("IPython.get_ipython", lambda: None)
    monkeypatch.setattr(
        "myst_nb.glue", lambda name, value, display=True: glued.update({name: value})
    )
    prose.say("n", 4, "d")
    assert str(glued["n"]) == "4"


def _glue_output(name, said):
    data = format_display_data(said)[0]
    prefix = "application/papermill.record/"
    return {
        "output_type": "display_data",
        "data": {prefix + k: v for k, v in data.items()},
        "metadata": {"scrapbook": {"name": name, "mime_prefix": prefix}},
    }


def _md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(source, outputs=()):
    return {
        "cell_type": "code",
        "metadata": {},
        "source": source,
        "execution_count": 1,
        "outputs": list(outputs),
    }


def _notebook(cells):
    cells = [{"id": f"c{i}", **cell} for i, cell in enumerate(cells)]
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_read_before_said_lists_forward_reads():
    nb = _notebook(
        [
            _md("{eval}`b` then {eval}`a`"),
            _code("say a", [_glue_output("a", Said(1))]),
            _md("{eval}`a` and {eval}`c`"),
            _code("say b", [_glue_output("b", Said(2))]),
        ]
    )
    assert prose.reads(nb) == {"b": 0, "a": 0, "c": 2}
    assert prose.said(nb) == {"a": 1, "b": 3}
    assert prose.read_before_said(nb) == [("b", 0, 3), ("a", 0, 1), ("c", 2, None)]


def test_the_html_book_pastes_the_said_text(tmp_path):
    """A real Sphinx build (myst-nb + megalab.book.reproduce), as jupyter-book renders an executed
    copy."""
    executed = _notebook(
        [
            _md("# Ch"),
            _code(
                "say(...)",
                [
                    _glue_output("share", Said(0.4567, ".1%")),
                    _glue_output("big", Said(12345.6, ",.0f")),
                    {
                        "output_type": "display_data",
                        "data": {"application/papermill.record/text/plain": "0.4567"},
                        "metadata": {
                            "scrapbook": {
                                "name": "raw",
                                "mime_prefix": "application/papermill.record/",
                            }
                        },
                    },
                ],
            ),
            _md("Share {eval}`share`, old {glue:text}`raw:.1%`, big {eval}`big`."),
        ]
    )
    _build(tmp_path, executed)
    html = (tmp_path / "html" / "ch.html").read_text()
    assert (
        'Share <span class="pasted-text">45.7%</span>, old <span class="pasted-text">45.7%</span>'
        in html
    )
    assert '<span class="pasted-text">12,346</span>' in html and "{eval}" not in html


def test_the_html_book_fails_on_a_name_never_said(tmp_path):
    from sphinx.errors import SphinxWarning

    with pytest.raises(SphinxWarning, match="no say"):
        _build(tmp_path, _notebook([_md("# Ch\n\nShare {eval}`nowhere`."), _code("")]))


def _build(tmp_path, executed):
    """Build a Sphinx project of one notebook page whose executed copy is `executed` (as _config.yml
    sets it up), with warnings as errors like `jupyter-book build -W`."""
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace

    src = tmp_path / "src"
    (src / "_build" / "executed").mkdir(parents=True)
    (src / ".mathjax").mkdir()
    (src / ".mathjax" / "tex-chtml.js").write_text("// MathJax")
    (src / "conf.py").write_text(
        'extensions = ["myst_nb", "megalab.book.reproduce"]\n'
        'nb_execution_mode = "off"\nexclude_patterns = ["_build"]\n'
    )
    (src / "index.md").write_text("# Book\n\n```{toctree}\nch\n```\n")
    (src / "ch.ipynb").write_text(json.dumps(_notebook([_md("# Ch\n\nplaceholder"), _code("")])))
    (src / "_build" / "executed" / "ch.ipynb").write_text(json.dumps(executed))
    with docutils_namespace():  # roles and nodes registered by one build do not leak into the next
        Sphinx(
            str(src),
            str(src),
            str(tmp_path / "html"),
            str(tmp_path / "doctrees"),
            "html",
            status=None,
            warning=None,
            freshenv=True,
            warningiserror=True,
        ).build()


def test_the_html_book_fails_on_a_read_before_its_cell_says_it(tmp_path):
    from sphinx.errors import SphinxWarning

    nb = _notebook(
        [
            _md("# Ch\n\nShare {eval}`share`."),
            _code("say", [_glue_output("share", Said(0.5, ".0%"))]),
        ]
    )
    with pytest.raises(SphinxWarning, match="said in cell 1 below it"):
        _build(tmp_path, nb)
