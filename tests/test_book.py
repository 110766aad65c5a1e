"""The book's sources: notebooks stored without outputs, every chapter follows the house skeleton,
the parameters cell holds typed, commented literals, the toc and config agree, the planner
renders."""

import ast
import re
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").rglob("*.ipynb"))
# not appendices
CHAPTERS = sorted(p for p in (ROOT / "book").glob("[0-9][0-9]_*/*.ipynb") if p.stem != "evidence")
SKELETON = [
    "What you will measure",
    "Concept",
    "Predict",
    "Run",
    "Measure",
    "Is it still correct",
    "Takeaway",
    "Exercises",
    "How to reproduce",
]


def _ids(paths):
    return [p.relative_to(ROOT).as_posix() for p in paths]


def test_there_are_notebooks():
    assert CHAPTERS, "no chapter notebooks under book/NN_*/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count)
    ]
    assert not dirty, (
        f"{path.name}: cells {dirty} have outputs: clear them (jupyter nbconvert --clear-output)"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=_ids(CHAPTERS))
def test_chapter_follows_the_skeleton(path):
    nb = nbformat.read(path, as_version=4)
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert re.match(r"#\s+\S", nb.cells[0].source), "the first cell must be the title (# ...)"
    headings = [h.strip() for h in re.findall(r"^##\s+(.+)$", md, flags=re.M)]
    positions = []
    for want in SKELETON:
        hit = [i for i, h in enumerate(headings) if h.lower().startswith(want.lower())]
        assert hit, f"{path.name}: missing section '## {want}...' (found {headings})"
        positions.append(hit[0])
    assert positions == sorted(positions), f"{path.name}: sections out of order: {headings}"
    assert ":class: dropdown" in md, (
        "exercises need folded solutions ({admonition} Solution, :class: dropdown)"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_parameters_cell_is_typed_commented_literals(path):
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{path.name}: exactly one cell must be tagged 'parameters'"
    src = cells[0].source
    for node in ast.parse(src).body:
        assert isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name), (
            f"{path.name}: parameters must be typed assignments like `mode: str = \"auto\"`"
        )
        ast.literal_eval(node.value)  # raises on anything but a literal
    for line in filter(str.strip, src.splitlines()):
        assert "#" in line, f"{path.name}: comment every parameter: {line!r}"


@pytest.mark.parametrize("path", CHAPTERS, ids=_ids(CHAPTERS))
def test_cells_are_short(path):
    nb = nbformat.read(path, as_version=4)
    long = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and len(c.source.splitlines()) > 15
    ]
    assert not long, (
        f"{path.name}: code cells {long} are longer than 15 lines: move the code into the lib"
    )


def test_toc_lists_existing_pages_and_every_notebook():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    from megalab.book.reproduce import _toc_files

    files = _toc_files(toc)
    for f in files:
        assert any((ROOT / f).with_suffix(s).exists() for s in (".md", ".ipynb")), (
            f"_toc.yml: {f} not found"
        )
    listed = {(ROOT / f).with_suffix(".ipynb") for f in files}
    assert set(NOTEBOOKS) <= listed, f"notebooks missing from _toc.yml: {set(NOTEBOOKS) - listed}"


def test_config_never_executes_and_excludes_non_book_folders():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["execute"]["execute_notebooks"] == "off"
    assert {"README.md", "results", "lib", "tests", "runs", ".venv", "_build"} <= set(
        cfg["exclude_patterns"]
    )
    assert "megalab.book.reproduce" in cfg["sphinx"]["extra_extensions"]


def test_planner_shows_a_static_figure_and_layout_problems():
    from megalab.book import widgets

    p = widgets.planner("gpt-tiny", gpu="H200", gpus=2, tp=2)
    bundle = p._repr_mimebundle_()
    assert "Plotly.newPlot" in bundle["text/html"] and "plotly.js v" not in bundle["text/html"]
    p._c["tp"].value = 8  # 2 GPUs cannot hold tp=8
    assert "✗" in p._status.value
