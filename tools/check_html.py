#!/usr/bin/env python
"""Open every page of the built book in a real, offline browser and check what a reader would see.

    python tools/check_html.py _build/html

For each page: every plotly figure div is drawn (`.js-plotly-plot .main-svg`), every formula is
typeset by MathJax (each Sphinx `.math` element holds an `mjx-container`, no TeX such as `\(` or `$$`
is left in the visible text, no MathJax error), no cell output shows an error (stderr, a traceback,
an `...Error:` line), and no script throws. Pages are served from a
local http.server; every request to another host is aborted, as in CI, so a figure that needs the
network fails here. Chromium is Debian's (`tools/browser-setup.sh`), driven by Playwright (the pip
package; no `playwright install`). Exits 1 with one line per problem, 0 when every page passes.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import re
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SKIP = {"genindex.html", "search.html", "index.html", "py-modindex.html"}
# TeX a reader should never see: math delimiters, or a command MathJax would have typeset
RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\(frac|sqrt|mathrm|cdot|times|text|sum|left|right)\b")
# the page's visible text, less code (where TeX-like text is legitimate) and MathJax's own output
VISIBLE_TEXT_JS = """() => { const body = document.body.cloneNode(true);
  body.querySelectorAll('pre, code, script, style, mjx-container, .highlight').forEach(e => e.remove());
  return body.textContent; }"""
ERROR_TEXT = re.compile(r"Traceback \(most recent call last\)|^\w*(Error|Exception): ", re.M)


def pages(html_dir: Path) -> list[Path]:
    """The book's content pages (Sphinx's own index/search pages and static assets left out)."""
    return sorted(p for p in html_dir.rglob("*.html")
                  if p.name not in SKIP and not any(part.startswith("_") for part in p.relative_to(html_dir).parts))


def _serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def unrendered_tex(text: str) -> str | None:
    """The first piece of TeX left in a page's visible text (with some context), or None."""
    m = RAW_TEX.search(text)
    return None if m is None else " ".join(text[max(0, m.start() - 30):m.end() + 30].split())


def math_problems(formulas: int, typeset: int, errors: int, visible_text: str) -> list[str]:
    """What is wrong with a page's math: formulas Sphinx emitted vs. those MathJax typeset, MathJax's
    errors, TeX left in the visible text."""
    out = []
    if typeset < formulas:
        out.append(f"{formulas - typeset} of {formulas} formulas not typeset (is MathJax loaded from "
                   f"_static/mathjax? run tools/mathjax-setup.sh)")
    if errors:
        out.append(f"{errors} formula(s) MathJax could not typeset")
    tex = unrendered_tex(visible_text)
    if tex:
        out.append(f"unrendered TeX in the page: {tex!r}")
    return out


def _check_math(page, timeout_ms: int) -> list[str]:
    formulas = page.locator(".math").count()   # Sphinx wraps each formula: span.math, div.math
    if formulas:
        try:
            page.wait_for_function("n => document.querySelectorAll('.math mjx-container').length >= n",
                                   arg=formulas, timeout=timeout_ms)
        except Exception:
            pass  # counted below
    typeset = page.locator(".math:has(mjx-container)").count()
    return math_problems(formulas, typeset, page.locator("mjx-merror").count(), page.evaluate(VISIBLE_TEXT_JS))


def check_page(page, url: str, timeout_ms: int) -> tuple[int, int, list[str]]:
    """(figures drawn, figure divs, problems) for one page."""
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))
    page.goto(url, wait_until="load")
    total = page.locator(".plotly-graph-div").count()
    if total:
        try:
            page.wait_for_function(
                "n => document.querySelectorAll('.js-plotly-plot .main-svg').length > 0 && "
                "document.querySelectorAll('.plotly-graph-div.js-plotly-plot').length >= n", arg=total,
                timeout=timeout_ms)
        except Exception:
            pass  # counted below
    drawn = page.locator(".plotly-graph-div.js-plotly-plot:has(.main-svg)").count()
    if drawn < total:
        problems.append(f"{total - drawn} of {total} plotly figures not drawn "
                        f"(is plotly.js loaded? did the notebook call charts.setup_notebook()?)")
    problems += _check_math(page, timeout_ms)
    if page.locator(".output.stderr, .output.traceback, .output.error").count():
        problems.append("a cell output shows stderr or a traceback")
    for text in page.locator(".cell_output").all_inner_texts():
        m = ERROR_TEXT.search(text)
        if m:
            problems.append(f"a cell output shows an error: {text[m.start():m.start() + 120]!r}")
            break
    return drawn, total, problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html_dir", nargs="?", default="_build/html")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for a page's figures")
    ns = ap.parse_args(argv)
    root = Path(ns.html_dir)
    found = pages(root)
    if not found:
        print(f"check_html: no pages under {root}: build the book first (jupyter-book build . -W)")
        return 1
    from playwright.sync_api import sync_playwright
    server, base = _serve(root)
    failures = 0
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            context = browser.new_context()
            context.route("**/*", lambda route: route.continue_() if urlparse(route.request.url).hostname
                          == "127.0.0.1" else route.abort())   # offline, like CI
            for path in found:
                rel = path.relative_to(root).as_posix()
                page = context.new_page()
                drawn, total, problems = check_page(page, f"{base}/{rel}", int(ns.timeout * 1000))
                page.close()
                failures += bool(problems)
                print(f"{'FAIL' if problems else 'ok  '}  {rel}  figures {drawn}/{total}")
                for p in problems:
                    print(f"      {p}")
            browser.close()
    finally:
        server.shutdown()
    print(f"check_html: {len(found) - failures} of {len(found)} pages pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
