"""tools/glue_to_eval.py on a fixture chapter: the rewritten prose shows, word for word, the text
the `{glue:text}` roles showed, and a notebook it cannot rewrite exactly is left as it is."""

import importlib.util
import json
import re
import types
from pathlib import Path

import pytest
from myst_nb.core.variables import format_plain_text

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "prose" / "glue_chapter.ipynb"
spec = importlib.util.spec_from_file_location("glue_to_eval", ROOT / "tools" / "glue_to_eval.py")
glue_to_eval = importlib.util.module_from_spec(spec)
spec.loader.exec_module(glue_to_eval)


def _source(cell):
    return "".join(cell["source"])


def _run(nb, monkeypatch):
    """Execute the code cells as a kernel would (glue and say captured); return (glued,
    namespace)."""
    glued, ns = {}, {}
    monkeypatch.setattr("IPython.get_ipython", lambda: types.SimpleNamespace(user_ns=ns))
    monkeypatch.setattr(
        "myst_nb.glue", lambda name, value, display=True: glued.update({name: value})
    )
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            exec(_source(cell), ns)
    return glued, ns


def _prose(nb):
    return "\n".join(_source(c) for c in nb["cells"] if c["cell_type"] == "markdown")


def test_the_rewritten_prose_shows_the_same_text(monkeypatch):
    before = json.loads(FIXTURE.read_text())
    after = glue_to_eval.convert(before)
    glued, _ = _run(before, monkeypatch)
    old = [
        format_plain_text(
            repr(glued[m.group(1).split(":")[0]]), m.group(1).partition(":")[2] or "s"
        )
        for m in re.finditer(r"\{glue:text\}`([^`]+)`", _prose(before))
    ]
    _, ns = _run(after, monkeypatch)
    new = [str(ns[name]) for name in re.findall(r"\{eval\}`([^`]+)`", _prose(after))]
    assert new == old == ["791", "46%", "45.7%", "8,192", "4,096"]
    assert "{glue" not in _prose(after)


def test_names_formats_and_imports(monkeypatch):
    after = glue_to_eval.convert(json.loads(FIXTURE.read_text()))
    code = _source(after["cells"][1])
    assert 'say("peak_said", peak, ".0f")' in code  # `peak` is a variable of the notebook
    # two formats
    assert 'say("share_said", share, ".0%")\nsay("share_1pct", share, ".1%")' in code
    assert '    say(f"fit_{n}", 2048 * n, ",")' in code  # an f-string name, one format
    # not read by the prose: left as glue
    assert 'glue("unread", 1, display=False)' in code
    assert code.startswith("from myst_nb import glue\nfrom megalab.book.prose import say\n")
    assert _source(after["cells"][3]) == _source(json.loads(FIXTURE.read_text())["cells"][3])


def test_slug():
    assert [glue_to_eval.slug(f) for f in (".1%", ",.0f", "+.1%", "", ".2f")] == [
        "1pct",
        "c0f",
        "p1pct",
        "s",
        "2f",
    ]


def test_a_notebook_it_cannot_rewrite_exactly_is_left_alone(tmp_path, capsys):
    nb = json.loads(FIXTURE.read_text())
    nb["cells"][1]["source"] += (
        '\nfor name in ("a", "b"):\n    glue(name, 2.0, display=False)\nglue("c", 3)'
    )
    nb["cells"][2]["source"] += " {glue:text}`a:.1f` {glue:text}`c` {glue}`b`"
    path = tmp_path / "chapter.ipynb"
    path.write_text(json.dumps(nb))
    before = path.read_text()
    assert glue_to_eval.main([str(path)]) == 1
    assert path.read_text() == before
    out = capsys.readouterr().out
    for why in (
        "glue name held in a variable (name)",
        "displays its value",
        "other than {glue:text}",
    ):
        assert why in out
    with pytest.raises(glue_to_eval.Refused):
        glue_to_eval.convert(nb)


def test_main_rewrites_in_the_book_s_json_style(tmp_path):
    path = tmp_path / "chapter.ipynb"
    path.write_text(FIXTURE.read_text())
    assert glue_to_eval.main([str(path)]) == 0
    text = path.read_text()
    assert (
        text == json.dumps(json.loads(text), indent=1, ensure_ascii=False) + "\n"
        and "{eval}`fit_4`" in text
    )


def test_a_notebook_without_glue_text_is_left_as_it_is(tmp_path, capsys):
    path = tmp_path / "evidence.ipynb"
    path.write_text(
        json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Evidence"}]})
    )
    assert (
        glue_to_eval.main([str(path)]) == 0
        and "no {glue:text} to rewrite" in capsys.readouterr().out
    )
