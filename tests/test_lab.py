"""JupyterLab, in a real browser against a real `jupyter lab` server: a chapter's prose shows its
numbers and its Solutions are folded.

The fixture chapter (tests/data/prose/glue_chapter.ipynb, rewritten by tools/glue_to_eval.py into
`say` and `{eval}`) is opened in JupyterLab with jupyterlab-myst, every cell is run, and the
rendered markdown must show the said numbers (no `{eval}` or `{glue` markup) and a folded Solution
dropdown. Chromium is Debian's (tools/browser-setup.sh), as for tools/check_html.py; without it the
test is skipped.
"""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "prose" / "glue_chapter.ipynb"


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


@pytest.fixture
def lab(tmp_path):
    """A `jupyter lab` server on a copy of the fixture chapter rewritten to {eval}; yields its
    URL."""
    from megalab.book import reproduce

    pytest.importorskip("playwright.sync_api", reason="playwright is not installed: make setup")
    notebooks = tmp_path / "book"
    notebooks.mkdir()
    chapter = _tool("glue_to_eval").convert(json.loads(FIXTURE.read_text()))
    (notebooks / "chapter.ipynb").write_text(json.dumps(chapter, indent=1))
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
    log = open(tmp_path / "server.log", "w")
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
                    pytest.fail(
                        f"jupyter lab did not start:\n{(tmp_path / 'server.log').read_text()[-2000:]}"
                    )
                time.sleep(0.3)
        yield f"{base}/lab/tree/chapter.ipynb?token={token}"
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_a_chapter_run_in_jupyterlab_shows_its_numbers_and_folds_its_solutions(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=check_html.CHROMIUM, args=check_html.ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(lab)
            page.wait_for_function(  # the notebook open, its kernel started and idle
                f"(() => {{ const w = window.jupyterapp && {NB}; const k = w && w.sessionContext && w.sessionContext.session"
                f" && w.sessionContext.session.kernel; return !!k && k.status === 'idle'"
                f" && w.content.widgets.length === 4; }})()",
                timeout=90_000,
            )
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
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
            # and it opens
            solution.locator("summary").click()
            answer.wait_for(state="visible", timeout=5_000)
        finally:
            browser.close()
