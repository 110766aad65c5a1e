"""reproduce: toc order, chapter picking, papermill with this interpreter's kernel, resuming, and
the Sphinx hook that substitutes executed copies."""

import json
import sys
from pathlib import Path

import nbformat
import pytest

from megalab.book import reproduce


def _book(tmp_path, body="import sys\nprint(sys.executable)"):
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: book/planner\n"
        "  - file: book/00_know_your_machine/know\n  - file: book/glossary\n"
    )
    (tmp_path / "book" / "00_know_your_machine").mkdir(parents=True, exist_ok=True)
    (tmp_path / "book" / "intro.md").write_text("# Intro\n")
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('mode: str = "auto"   # how to run')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    for path in ("book/planner.ipynb", "book/00_know_your_machine/know.ipynb"):
        nbformat.write(nb, tmp_path / path)
    return tmp_path


def test_notebooks_in_toc_order_and_by_chapter(tmp_path):
    root = _book(tmp_path)
    assert [p.as_posix() for p in reproduce.notebooks(root=root)] == [
        "book/planner.ipynb",
        "book/00_know_your_machine/know.ipynb",
    ]
    assert reproduce.notebooks(["00"], root=root) == [Path("book/00_know_your_machine/know.ipynb")]
    assert reproduce.notebooks(["planner"], root=root) == [Path("book/planner.ipynb")]
    with pytest.raises(ValueError, match="pick from"):
        reproduce.notebooks(["07"], root=root)


def test_kernelspec_runs_this_interpreter(tmp_path):
    spec = reproduce.kernel_dir(tmp_path) / "kernels" / "python3" / "kernel.json"
    assert json.loads(spec.read_text())["argv"][0] == sys.executable


@pytest.mark.timeout(120)
def test_reproduce_executes_resumes_and_reports_failure(tmp_path, monkeypatch, capsys):
    (tmp_path / "results").mkdir(exist_ok=True)
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path / "results"))
    root = _book(tmp_path)
    assert reproduce.reproduce(["00"], mode="live", root=root) == 0
    out = reproduce.executed_path("book/00_know_your_machine/know.ipynb", root)
    nb = nbformat.read(out, as_version=4)
    assert nb["metadata"]["papermill"]["parameters"] == {"mode": "auto"}  # live reads back records
    printed = "".join(o.get("text", "") for c in nb["cells"] for o in c.get("outputs", []))
    # the venv's kernel ran it
    assert sys.executable in printed
    assert reproduce.reproduce(["00"], mode="live", root=root) == 0
    assert "up to date" in capsys.readouterr().out
    _book(tmp_path, body="raise RuntimeError('boom')")
    assert reproduce.reproduce(["00"], mode="cached", root=root) == 1
    assert "FAILED" in capsys.readouterr().out


def test_html_only_drops_plotly_mime_beside_html():
    mime = reproduce.PLOTLY_MIME
    nb = {
        "cells": [{"outputs": [{"data": {mime: {}, "text/html": "<div>"}}, {"data": {mime: {}}}]}]
    }
    outs = reproduce._html_only(nb)["cells"][0]["outputs"]
    assert list(outs[0]["data"]) == ["text/html"] and list(outs[1]["data"]) == [mime]


def test_chapters_by_any_of_their_names(tmp_path):
    root = _book(tmp_path)
    (root / "book" / "01_data_parallel").mkdir()
    nbformat.write(
        nbformat.v4.new_notebook(), root / "book" / "01_data_parallel" / "data_parallel.ipynb"
    )
    (root / "_toc.yml").write_text(
        (root / "_toc.yml").read_text() + "  - file: book/01_data_parallel/data_parallel\n"
    )
    want = [Path("book/01_data_parallel/data_parallel.ipynb")]
    for name in ("ch01", "01", "1", "01_data_parallel", "data_parallel"):
        assert reproduce.notebooks([name], root=root) == want, name
    with pytest.raises(reproduce.UnknownNotebook, match="no page of the book matches 'ch09'"):
        reproduce.notebooks(["ch09"], root=root)


def _fake_papermill(monkeypatch, then):
    """papermill as it behaves: the output file is written cell by cell; `then` ends the run."""
    import papermill

    def execute_notebook(src, out, **kw):
        Path(out).write_text('{"half": "executed"}')
        then()

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)


def _previous_copy(tmp_path, monkeypatch, notebook, error):
    """A book whose `notebook` has an executed copy reading "previous", and a papermill that raises
    `error`."""
    (tmp_path / "results").mkdir(exist_ok=True)
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path / "results"))
    root = _book(tmp_path)
    dst = reproduce.executed_path(notebook, root)
    dst.parent.mkdir(parents=True)
    dst.write_text("previous")

    def end():
        raise error

    _fake_papermill(monkeypatch, end)
    return root, dst


def test_ctrl_c_keeps_the_previous_copy_and_reports(tmp_path, monkeypatch, capsys):
    root, dst = _previous_copy(
        tmp_path, monkeypatch, "book/00_know_your_machine/know.ipynb", KeyboardInterrupt
    )
    assert reproduce.reproduce(None, mode="cached", root=root, force=True) == 130
    captured = capsys.readouterr()
    assert "INTERRUPTED" in captured.out and "not run" in captured.out  # the summary table
    assert "interrupted" in captured.err and "Traceback" not in captured.err
    assert (
        sorted(p.name for p in dst.parent.iterdir()) == ["know.ipynb"]
        and dst.read_text() == "previous"
    )


def test_a_failed_run_never_replaces_the_executed_copy(tmp_path, monkeypatch, capsys):
    root, dst = _previous_copy(
        tmp_path, monkeypatch, "book/planner.ipynb", RuntimeError("cell 3 raised")
    )
    assert reproduce.reproduce(["planner"], mode="cached", root=root) == 1
    assert "planner.failed.ipynb" in capsys.readouterr().out
    assert dst.read_text() == "previous" and reproduce.failed_path(dst).exists()
    assert sorted(p.name for p in dst.parent.iterdir() if p.is_file()) == [
        "planner.failed.ipynb",
        "planner.ipynb",
    ]


@pytest.mark.timeout(120)
def test_freshness_follows_the_content_of_everything_a_page_reads(tmp_path, monkeypatch, capsys):
    for name in ("results", "other", "results/probes"):
        (tmp_path / name).mkdir(exist_ok=True)
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path / "results"))
    root = _book(tmp_path)
    (tmp_path / "_build/executed/book/00_know_your_machine").mkdir(parents=True)
    orphan = tmp_path / "_build/executed/book/00_know_your_machine/.know.999999999.part.ipynb"
    orphan.write_text("{}")  # left by a reproduce killed with -9
    assert reproduce.reproduce(["00"], mode="cached", root=root) == 0
    out = reproduce.executed_path("book/00_know_your_machine/know.ipynb", root)
    # readable like any file, no orphan
    assert out.stat().st_mode & 0o077 == 0o044 and not orphan.exists()
    src, params = root / "book/00_know_your_machine/know.ipynb", {"mode": "cached"}
    assert reproduce.is_fresh(src, out, params, root)
    # another store, though older than the copy
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path / "other"))
    assert not reproduce.is_fresh(src, out, params, root)
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path / "results"))
    assert reproduce.is_fresh(src, out, params, root)
    (tmp_path / "results/probes/startup.jsonl").write_text("{}\n")  # a probe the chapter reads
    assert not reproduce.is_fresh(src, out, params, root)


@pytest.mark.timeout(180)
def test_ctrl_c_on_a_real_reproduce_prints_one_line_and_exits_130(tmp_path):
    """The terminal's Ctrl-C (SIGINT to the whole foreground group) while a cell runs: the summary
    table on stdout, one line on stderr besides the progress bar, no traceback (of megalab's,
    papermill's or the kernel's)."""
    import os
    import shutil
    import signal
    import subprocess
    import time

    # a checkout of its own: reproduce finds the book beside lib/
    lib = Path(reproduce.__file__).parents[1]
    shutil.copytree(lib, tmp_path / "lib" / "megalab", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'fixture'\n")
    (tmp_path / "results").mkdir()
    started = tmp_path / "started"
    _book(
        tmp_path,
        body=f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(120)",
    )
    env = dict(
        os.environ, MEGALAB_RESULTS=str(tmp_path / "results"), PYTHONPATH=str(tmp_path / "lib")
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "megalab", "reproduce", "00"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert started.exists(), proc.communicate(timeout=10)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "INTERRUPTED" in out and "Traceback" not in err and "Error" not in err, err
    lines = err.replace("\r", "\n").splitlines()
    # "know:" is the progress bar
    said = [line for line in lines if line.strip() and not line.startswith("know:")]
    assert said == ["megalab reproduce: interrupted; run the same command again to go on"], err
    assert not reproduce.executed_path("book/00_know_your_machine/know.ipynb", tmp_path).exists()


def test_glue_only_cells_are_bookkeeping():
    for code in (
        'glue("a", 1, display=False)',
        'from myst_nb import glue\nglue("a", x)',
        'for d in (2, 4):\n    glue(f"ms_{d}", ms[d], display=False)',
        'from megalab.book.prose import say\nsay("a", 0.5, ".0%")',
        'prose.say("a", x)',
    ):
        assert reproduce.glue_only(code), code
    for code in ("", "x = 1\nglue('a', x)", "charts.memory(df)", "glue('a',", "# a comment only"):
        assert not reproduce.glue_only(code), code


def test_tag_cells_hides_bookkeeping_and_renders_the_box_as_myst():
    from megalab.book import frame
    from megalab.runs import presets

    box = frame.megatron_box({"DP 4": presets.get("gpt2-xl").replace(gpus=4, mbs=4, gbs=16)})
    cell = lambda src, tags=(), outputs=(): {
        "cell_type": "code",
        "source": src,
        "metadata": {"tags": list(tags)},  # noqa: E731
        "outputs": list(outputs),
    }
    nb = {
        "cells": [
            cell('mode = "cached"\n', ["injected-parameters"]),
            cell('glue("a", 1, display=False)'),
            cell("frame.megatron_box(layouts)", outputs=[{"data": {"text/markdown": box.data}}]),
            cell("charts.memory(df)"),
            {"cell_type": "markdown", "source": "# Title", "metadata": {}},
        ]
    }
    cells = reproduce.tag_cells(nb)["cells"]
    assert [("remove-cell" in c["metadata"].get("tags", [])) for c in cells] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert cells[2]["metadata"]["mystnb"] == {"markdown_format": "myst"}
    assert "mystnb" not in cells[3]["metadata"]


def test_tag_cells_folds_the_code_of_rewritten_chapters():
    cell = lambda src, tags=(): {
        "cell_type": "code",
        "source": src,
        "metadata": {"tags": list(tags)},  # noqa: E731
        "outputs": [],
    }
    nb = lambda: {
        "cells": [
            cell('glue("a", 1, display=False)'),
            cell("charts.memory(df)"),  # noqa: E731
            cell("x = 1", ["hide-input"]),
            {"cell_type": "markdown", "source": "# T", "metadata": {}},
        ]
    }
    tags = [c["metadata"].get("tags") for c in reproduce.tag_cells(nb(), hide_input=True)["cells"]]
    assert tags == [["remove-cell"], ["hide-input"], ["hide-input"], None]
    tags = [c["metadata"].get("tags") for c in reproduce.tag_cells(nb())["cells"]]
    assert tags == [["remove-cell"], [], ["hide-input"], None]


def test_every_page_of_the_book_folds_its_code(tmp_path):
    from types import SimpleNamespace

    executed = tmp_path / "_executed"
    code = {"cell_type": "code", "source": "charts.memory(df)", "metadata": {}, "outputs": []}
    pages = ("planner.ipynb", "hardware.ipynb", "performance.ipynb", "02_tp/tensor_parallel.ipynb")
    for page in pages:
        (executed / page).parent.mkdir(parents=True, exist_ok=True)
        (executed / page).write_text(json.dumps({"cells": [code], "metadata": {}}))
        (tmp_path / page).parent.mkdir(exist_ok=True)
        (tmp_path / page).write_text("{}")
    env = SimpleNamespace(doc2path=lambda d: tmp_path / d, note_dependency=lambda p: None)
    config = SimpleNamespace(megalab_executed_dir="_executed")
    app = SimpleNamespace(env=env, srcdir=tmp_path, config=config)
    for page in pages:
        source = [""]
        reproduce._source_read(app, page, source)
        assert json.loads(source[0])["cells"][0]["metadata"]["tags"] == ["hide-input"], page


def test_a_page_gets_only_the_parameters_it_declares_and_evidence_reads_records(tmp_path):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('mode: str = "auto"  # x\ngpu = "H200"\n# quick = True\n')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("gpus = 4")]
    page, evidence = tmp_path / "page.ipynb", tmp_path / "evidence.ipynb"
    nbformat.write(nb, page)
    nbformat.write(nb, evidence)
    assert reproduce.declared(page) == {"mode", "gpu"}
    asked = {"mode": "auto", "gpus": 2, "quick": True}
    assert reproduce.injected(page, asked) == {"mode": "auto"}
    assert reproduce.injected(evidence, asked) == {"mode": "cached"}
    nb.cells = nb.cells[1:]
    nbformat.write(nb, page)
    assert reproduce.injected(page, asked) == {}


def test_a_page_is_named_by_folder_number_or_ch_number_chapter_0_too():
    from pathlib import Path

    page = Path("book/00_know_your_machine/know_your_machine.ipynb")
    assert all(reproduce._matches(page, n) for n in ("00", "ch00", "00_know_your_machine"))
    assert reproduce._matches(Path("book/01_data_parallel/data_parallel.ipynb"), "ch01")
    assert not reproduce._matches(page, "ch01")
    names = reproduce.page_names()
    assert len(names) == len(set(names)) and "performance_evidence" in names


def test_a_live_reproduction_forks_its_ranks_from_the_warm_server(monkeypatch):
    """Live or auto: MEGALAB_LAUNCHER=forkserver while it runs, unless the reader set one;
    cached leaves it alone; the variable is as before afterwards."""
    import os

    from megalab.jobs.launch import LAUNCHER

    monkeypatch.delenv(LAUNCHER, raising=False)
    with reproduce._reader_launcher("auto"):
        assert os.environ[LAUNCHER] == "forkserver"
    assert LAUNCHER not in os.environ
    with reproduce._reader_launcher("cached"):
        assert LAUNCHER not in os.environ
    monkeypatch.setenv(LAUNCHER, "spawn")
    with reproduce._reader_launcher("live"):
        assert os.environ[LAUNCHER] == "spawn"
