"""The rewritten chapters (megalab.book.frame.REWRITTEN) keep the reader-path budgets of
megalab.book.budgets: prose words, glue, cell size, parameters; their Evidence pages sit under them
in _toc.yml and are exempt."""

import json
from pathlib import Path

import pytest
import yaml

from megalab.book import budgets
from megalab.book.frame import REWRITTEN, REWRITTEN_PAGES

ROOT = Path(__file__).resolve().parents[1]


def chapter_dir(number: str) -> Path:
    found = sorted(ROOT.glob(f"book/{number}_*"))
    assert len(found) == 1, f"chapter {number}: want one folder book/{number}_*, found {found}"
    return found[0]


def main_notebook(number: str) -> Path:
    found = [p for p in sorted(chapter_dir(number).glob("*.ipynb")) if p.name != "evidence.ipynb"]
    assert len(found) == 1, (
        f"chapter {number}: want one notebook besides evidence.ipynb, found {found}"
    )
    return found[0]


def _toc_entries(node) -> list:
    """(file, [its sections' files]) for every entry of _toc.yml."""
    out = []
    if isinstance(node, dict):
        if "file" in node:
            out.append((node["file"], [s.get("file") for s in node.get("sections", [])]))
        for v in node.values():
            out += _toc_entries(v)
    elif isinstance(node, list):
        for v in node:
            out += _toc_entries(v)
    return out


@pytest.mark.parametrize("number", REWRITTEN)
def test_rewritten_chapter_keeps_the_reader_path_budgets(number):
    path = main_notebook(number)
    problems = budgets.problems(json.loads(path.read_text()))
    assert not problems, f"{path.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


EVIDENCE_PART = "Evidence (appendix)"


def appendix() -> list[str]:
    """The files of _toc.yml's evidence part: out of the reader's Previous/Next chain through the
    chapters, in the chapters' order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = [p for p in toc["parts"] if p.get("caption") == EVIDENCE_PART]
    assert len(parts) == 1, f"_toc.yml: want one part with caption {EVIDENCE_PART!r}"
    return [c["file"] for c in parts[0]["chapters"]]


def test_no_evidence_page_sits_in_the_reader_path():
    reader = [f for f, _ in _toc_entries(yaml.safe_load((ROOT / "_toc.yml").read_text()))]
    inside = [f for f in reader if "evidence" in f.rsplit("/", 1)[-1] and f not in appendix()]
    assert not inside, f"_toc.yml: move {inside} to the {EVIDENCE_PART!r} part"


@pytest.mark.parametrize("number", REWRITTEN)
def test_an_evidence_page_is_listed_in_the_appendix(number):
    evidence = chapter_dir(number) / "evidence.ipynb"
    if not evidence.exists():
        pytest.skip(f"chapter {number} keeps its evidence in the notebook's Evidence part")
    assert evidence.relative_to(ROOT).with_suffix("").as_posix() in appendix(), (
        f"_toc.yml: list {evidence.relative_to(ROOT)} in the {EVIDENCE_PART!r} part"
    )


@pytest.mark.parametrize("page", sorted(REWRITTEN_PAGES))
def test_rewritten_page_keeps_the_reader_path_budgets(page):
    """A rewritten page of book/ that is no numbered chapter (the performance page): the same
    budgets, with its own word limit (budgets.PAGE_WORDS)."""
    path = ROOT / "book" / f"{page}.ipynb"
    limit = budgets.PAGE_WORDS.get(page, budgets.WORDS)
    problems = budgets.problems(json.loads(path.read_text()), words_limit=limit)
    assert not problems, f"{path.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("page", sorted(REWRITTEN_PAGES))
def test_a_rewritten_pages_evidence_is_listed_in_the_appendix(page):
    evidence = ROOT / "book" / f"{REWRITTEN_PAGES[page]}.ipynb"
    assert evidence.exists(), f"{evidence.relative_to(ROOT)}: the page's evidence page is missing"
    assert f"book/{REWRITTEN_PAGES[page]}" in appendix(), (
        f"_toc.yml: list book/{REWRITTEN_PAGES[page]} in the {EVIDENCE_PART!r} part"
    )


def test_a_page_word_limit_replaces_the_chapters():
    text = " ".join(["word"] * (budgets.WORDS + 1))
    book = nb(("markdown", text), PARAMS)
    assert "at most 3000" in budgets.problems(book)[0]
    assert budgets.problems(book, words_limit=budgets.PAGE_WORDS["performance"]) == []


# -- the budgets, on small notebooks
# --------------------------------------------------------------------
def nb(*cells) -> dict:
    out = []
    for kind, text, *tags in cells:
        out.append({"cell_type": kind, "source": text, "metadata": {"tags": tags}})
    return {"cells": out}


PARAMS = ("code", 'mode: str = "cached"   # where results come from\ngpus: int = 4\n', "parameters")


def test_a_kept_notebook_has_no_problems():
    book = nb(
        ("markdown", "# Title\n\nTP 2 takes {glue:text}`tp2_ms:.1f` ms."),
        PARAMS,
        ("code", 'glue("tp2_ms", 12.5, display=False)'),
    )
    assert budgets.problems(book) == []


def test_words_count_prose_not_code_math_or_markup():
    md = (
        "**The step takes** {glue:text}`x:.1f` ms [in the "
        "paper](https://arxiv.org/abs/2205.05198).\n\n"
        "```python\nthese are not words at all\n```\n\n$$M = 16 \\Psi$$\n\n:::{note}\n:class: "
        "dropdown\nTwo words\n:::\n"
    )
    assert budgets.words(md) == len("The step takes x ms in the paper".split()) + 2


def test_words_past_the_evidence_heading_are_exempt():
    long = " ".join(["word"] * (budgets.WORDS + 1))
    assert "words of prose" in budgets.problems(nb(("markdown", long), PARAMS))[0]
    assert (
        budgets.problems(
            nb(("markdown", "# Title"), PARAMS, ("markdown", "## Evidence\n\n" + long))
        )
        == []
    )


def test_glue_read_and_glued_must_agree():
    book = nb(
        (
            "markdown",
            "{glue:text}`a` and {glue:}`b` and {glue:text}`ms_4:.0f`\n\n```{glue:figure} fig\n```",
        ),
        (
            "code",
            'glue("a", 1)\nglue("c", 2)\nfor d in (4,):\n    glue(f"ms_{d}", 3)\nglue(name, 4)',
        ),
        ("code", 'glue("fig", f)'),
        PARAMS,
    )
    problems = budgets.glue_problems(book)
    assert "the prose reads 'b', which the notebook never glues" in problems
    assert "glued but never read: 'c'" in problems
    assert any("not a string literal" in p for p in problems)
    assert not any("ms_4" in p or "'fig'" in p or "'a'" in p for p in problems)
    many = nb(("code", "\n".join(f'glue("g{i}", {i})' for i in range(budgets.GLUES + 1))))
    assert (
        budgets.glue_problems(many)[0]
        == f"{budgets.GLUES + 1} glue( calls: at most {budgets.GLUES}"
    )


def test_cells_short_narrow_and_without_def():
    long = "\n".join(f"x{i} = {i}" for i in range(budgets.CELL_LINES + 1))
    problems = budgets.cell_problems(
        nb(
            ("code", long),
            ("code", "y = '" + "a" * 100 + "'"),
            ("code", "def f():\n    return 1"),
            ("markdown", "## Evidence"),
            ("code", "def g():\n    pass"),
        )
    )
    assert (
        len(problems) == 3
        and "16 lines" in problems[0]
        and "columns" in problems[1]
        and "defines" in problems[2]
    )


def test_the_parameters_cell_holds_literals():
    assert budgets.parameters_problems(nb(PARAMS)) == []
    assert "want exactly one" in budgets.parameters_problems(nb(("code", "x = 1")))[0]
    bad = nb(("code", 'mode = "cached"\ngpus = len(range(4))\nimport os', "parameters"))
    assert len(budgets.parameters_problems(bad)) == 2


def test_papers_cited_on_the_reader_path_are_linked():
    linked = (
        "As [Korthikanti et al. 2022](https://arxiv.org/abs/2205.05198) show, and "
        "Korthikanti et al. (2022) again."
    )
    assert budgets.citation_problems(nb(("markdown", linked))) == []
    bare = nb(
        ("markdown", "Narayanan et al. 2021 measured it; in 2021 and 1024 tokens."),
        ("markdown", "## Evidence"),
        ("markdown", "[Narayanan et al. 2021](https://arxiv.org/abs/2104.04473)"),
    )
    assert budgets.citation_problems(bare) == [
        "Narayanan et al. 2021 is cited but never linked: link it (megalab.book.references.cite)"
    ]


def test_said_names_and_eval_reads_count_as_glue():
    book = nb(
        ("markdown", "# T\n\nTP 2 takes {eval}`tp2_ms` ms, {eval}`never`."),
        PARAMS,
        ("code", 'say("tp2_ms", 12.5, ".1f")\nsay("unread", 1)'),
    )
    assert budgets.glue_problems(book) == [
        "the prose reads 'never', which the notebook never glues",
        "glued but never read: 'unread'",
    ]
