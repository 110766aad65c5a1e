"""JupyterLab, in a real browser against a real `jupyter lab` server: a chapter's prose shows its
numbers and its Solutions are folded.

The fixture chapter (tests/data/prose/glue_chapter.ipynb, rewritten by tools/glue_to_eval.py into
`say` and `{eval}`) and the book's chapter 02 (a copy of its folder, run in its default mode: the
records without GPUs) are opened in JupyterLab with jupyterlab-myst, every cell is run, and the
rendered markdown must show the said numbers (no `{eval}` or `{glue` markup, no NameError of a name
read above the cell that says it) and folded Solution dropdowns. Chromium is Debian's
(tools/browser-setup.sh), as for tools/check_html.py; without it the tests are skipped.
"""

import contextlib
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "prose" / "glue_chapter.ipynb"
CHAPTER = ROOT / "book" / "02_tensor_parallel" / "tensor_parallel.ipynb"


def _tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_html = _tool("check_html")
pytestmark = [
    pytest.mark.skipif(
        not Path(check_html.CHROMIUM).exists(),
        reason=f"no Chromium at {check_html.CHROMIUM}: run tools/browser-setup.sh",
    ),
    pytest.mark.timeout(180),
]
# the notebook panel (the app is exposed for this test only)
NB = "window.jupyterapp.shell.currentWidget"
SAID = ["791", "46%", "45.7%", "8,192", "4,096"]  # what the fixture's prose says


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _jupyter_lab(tmp_path: Path, notebooks: Path):
    """A `jupyter lab` server on `notebooks` (its own config, settings and runtime under tmp_path);
    yields its base URL and token."""
    from megalab.book import reproduce

    pytest.importorskip("playwright.sync_api", reason="playwright is not installed: make setup")
    port, token = _free_port(), "megalab-test"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")]),
        JUPYTER_PATH=str(reproduce.kernel_dir(tmp_path)),  # python3 = this interpreter
        **{
            var: str(tmp_path / "jupyter" / var.lower())
            for var in (
                "JUPYTER_CONFIG_DIR",
                "JUPYTER_DATA_DIR",
                "JUPYTER_RUNTIME_DIR",
                "JUPYTERLAB_SETTINGS_DIR",
                "JUPYTERLAB_WORKSPACES_DIR",
            )
        },
    )
    # every cell attached to the page: the test reads them all at once, while JupyterLab's default
    # windowing renders (and evaluates the {eval} of) a markdown cell only as it scrolls into view
    settings = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    log_path = tmp_path / "server.log"
    log = open(log_path, "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.token={token}",
            f"--ServerApp.root_dir={notebooks}",
            "--LabApp.expose_app_in_browser=True",
            "--allow-root",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=notebooks,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not start:\n{log_path.read_text()[-2000:]}")
                time.sleep(0.3)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture
def lab(tmp_path):
    """A `jupyter lab` server on a copy of the fixture chapter rewritten to {eval}; yields its
    URL."""
    notebooks = tmp_path / "book"
    notebooks.mkdir()
    chapter = _tool("glue_to_eval").convert(json.loads(FIXTURE.read_text()))
    (notebooks / "chapter.ipynb").write_text(json.dumps(chapter, indent=1))
    with _jupyter_lab(tmp_path, notebooks) as (base, token):
        yield f"{base}/lab/tree/chapter.ipynb?token={token}"


@pytest.fixture
def lab_chapter(tmp_path):
    """A `jupyter lab` server on a copy of a book chapter's folder (the book's own notebook, as
    `make lab` opens it; a copy, so that JupyterLab's autosave never writes outputs into book/);
    yields (URL, the notebook)."""
    folder = CHAPTER.parent
    notebooks = tmp_path / "book"
    shutil.copytree(folder, notebooks / folder.name)
    with _jupyter_lab(tmp_path, notebooks) as (base, token):
        url = f"{base}/lab/tree/{folder.name}/{CHAPTER.name}?token={token}"
        yield url, json.loads(CHAPTER.read_text())


def _open_and_run_all(page, url: str, cells: int) -> None:
    """Open the notebook, wait for its kernel, run every cell (markdown cells render as they
    run)."""
    page.goto(url)
    page.wait_for_function(  # the notebook open, its kernel started and idle
        f"(() => {{ const w = window.jupyterapp && {NB}; const k = w && w.sessionContext"
        f" && w.sessionContext.session && w.sessionContext.session.kernel; return !!k"
        f" && k.status === 'idle' && w.content.widgets.length === {cells}; }})()",
        timeout=90_000,
    )
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


def test_a_chapter_run_in_jupyterlab_shows_its_numbers_and_folds_its_solutions(lab):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=check_html.CHROMIUM, args=check_html.ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _open_and_run_all(page, lab, cells=4)
            page.wait_for_function(  # the markdown cell's {eval} roles evaluated in the kernel
                f"(() => {{ const e = {NB}.content.widgets[2].model.getMetadata('user_expressions');"
                f" return !!e && e.length === {len(SAID)}; }})()",
                timeout=60_000,
            )
            prose = page.locator(".jp-MarkdownCell .myst").nth(1)
            prose.get_by_text("CP 2: 4,096").wait_for(timeout=10_000)
            text = prose.inner_text()
            for number in SAID:
                assert number in text, text
            assert "{eval}" not in text and "{glue" not in text and "_said" not in text, text
            solution = page.locator(".jp-MarkdownCell details.dropdown")
            assert solution.count() == 1 and solution.get_attribute("open") is None  # folded
            assert solution.locator("summary").inner_text().strip() == "Solution"
            answer = solution.get_by_text("16,384 tokens")
            assert not answer.is_visible()
            # and it opens (a click on a cell still rendering can land on the node it replaces)
            for attempt in range(3):
                solution.locator("summary").click()
                try:
                    answer.wait_for(state="visible", timeout=5_000)
                    break
                except PlaywrightTimeout:
                    if attempt == 2:
                        raise
        finally:
            browser.close()


# Each markdown cell that reads {eval} names: its source, its rendered text, and what
# jupyterlab-myst evaluated for it in the kernel (null until the cell has run).
PROSE = f"""() => {NB}.content.widgets
    .filter(w => w.model.type === 'markdown'
        && w.model.sharedModel.getSource().includes('{{eval}}'))
    .map(w => ({{
        source: w.model.sharedModel.getSource(),
        text: (w.node.querySelector('.myst') || {{textContent: ''}}).textContent,
        expressions: w.model.getMetadata('user_expressions') || null,
    }}))"""
# a cell whose every {eval} has a result, each result's text shown (a str's without its quotes)
SHOWN = r"""c => c.expressions !== null
    && c.expressions.length === (c.source.match(/\{eval\}`/g) || []).length
    && c.expressions.every(e => e.result && e.result.status === 'ok'
        && c.text.includes(e.result.data['text/plain'].replace(/^(["'])(.*)\1$/, '$2')))"""
EVAL = re.compile(r"\{eval\}`([^`]+)`")


@pytest.mark.timeout(300)
def test_chapter_02_run_in_jupyterlab_shows_its_numbers_and_folds_its_solutions(lab_chapter):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    from megalab.book.prose import shown_text

    url, nb = lab_chapter
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=check_html.CHROMIUM, args=check_html.ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _open_and_run_all(page, url, cells=len(nb["cells"]))
            try:  # every {eval} role evaluated in the kernel, and its text in the page
                page.wait_for_function(f"(() => ({PROSE})().every({SHOWN}))()", timeout=240_000)
            except PlaywrightTimeout:
                pass  # the assertions below say what is missing
            prose = page.evaluate(PROSE)
            solutions = page.locator(".jp-MarkdownCell details.dropdown")
            summaries = solutions.locator("summary").all_inner_texts()
            opened = [d.get_attribute("open") for d in solutions.all()]
        finally:
            browser.close()
    markdown = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    assert not any("{glue" in m for m in markdown)  # the prose reads {eval}, which JupyterLab runs
    said = [m.group(1) for c in prose for m in EVAL.finditer(c["source"])]
    assert said and len(said) == sum(len(EVAL.findall("".join(c["source"]))) for c in nb["cells"])
    for cell in prose:
        text = cell["text"]
        assert text and "{eval}" not in text and "{glue" not in text, text
        assert "NameError" not in text and "Traceback" not in text, text
        assert cell["expressions"] is not None, f"never evaluated: {cell['source'][:200]}"
        for name, result in zip(EVAL.findall(cell["source"]), cell["expressions"]):
            assert result["result"]["status"] == "ok", (name, result)
            shown = shown_text(result["result"]["data"]["text/plain"])
            assert re.fullmatch(r"[-+]?[\d,.]+%?", shown), (name, shown)  # a number
            assert shown in text, (name, shown, text)
            assert "_" not in name or name not in text, (name, text)  # not the bare name
    text = " ".join(c["text"] for c in prose)
    assert re.search(r"TP 2 is \d\.\d\d times as fast and TP 4 \d\.\d\d times", text), text
    assert summaries == ["Solution"] * 4 and opened == [None] * 4  # folded
