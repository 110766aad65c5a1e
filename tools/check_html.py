#!/usr/bin/env python
"""Open every page of the built book in a real, offline browser and check what a reader would see.

    python tools/check_html.py _build/html

For each page: every plotly figure div is drawn (`.js-plotly-plot .main-svg`), every formula is
typeset by MathJax (each Sphinx `.math` element holds an `mjx-container`, no TeX such as `\(` or
`$$` is left in the visible text, no MathJax error), no cell output shows an error (stderr, a
traceback, an `...Error:` line), and no script throws. The pages of the rewritten chapters
(megalab.book.frame.REWRITTEN, and the pages of REWRITTEN_PAGES) are also read as a reader reads
them (`reader_problems`): no diary words (session, lease, queued, ...), no commit-hash-like token,
run key, raw column name (`step_time_s`) or NaN in the text or the figures, and no figure title
wider than its figure at 1000 and 1400 pixels; their Evidence pages (`evidence.html`) only keep run
keys out of figure titles and legends. Pages are served from a local http.server; every request to
another host is aborted, as in CI, so a figure that needs the network fails here. Chromium is
Debian's (`tools/browser-setup.sh`), driven by Playwright (the pip package; no `playwright
install`). Exits 1 with one line per problem, 0 when every page passes.
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
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SKIP = {"genindex.html", "search.html", "index.html", "py-modindex.html"}
# TeX a reader should never see: math delimiters, or a command MathJax would have typeset
RAW_TEX = re.compile(
    r"\\\(|\\\)|\\\[|\\\]|\$\$|\\(frac|sqrt|mathrm|cdot|times|text|sum|left|right)\b"
)
# the page's visible text, less code (where TeX-like text is legitimate) and MathJax's own output
VISIBLE_TEXT_JS = """() => { const body = document.body.cloneNode(true);
  body.querySelectorAll('pre, code, script, style, mjx-container, .highlight')
      .forEach(e => e.remove());
  return body.textContent; }"""
ERROR_TEXT = re.compile(r"Traceback \(most recent call last\)|^\w*(Error|Exception): ", re.M)

# -- the rewritten chapters, read as a reader reads them
# --------------------------------------------
DIARY = re.compile(r"\b(sessions?|leases?|leased|queued|pending|packed|errata|retracted)\b", re.I)
HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
URL = re.compile(r"\b(?:https?://|www\.)\S+")
RUN_KEY = re.compile(r"\S*_tp\d+_pp\d+_cp\d+\S*")
# a missing value shown as NaN; not the word in a flag (--no-check-for-nan-in-loss-and-grad) or in
# prose about NaN checks ("NaN checks", "(NaN, Inf)")
NAN = re.compile(
    r"(?<![-\w])(NaN|nan)(?![-\w])(?!\s*(checks?\b|,\s*Inf\b|/Inf\b|(and|or)\s+Inf\b))"
)
# a number printed with all its float digits (36.279775857925415): a label without a format
RAW_FLOAT = re.compile(r"\d\.\d{6,}")
WIDTHS = (1000, 1400)  # viewport widths at which no figure title may be clipped
# the main text of a page (code inputs, the In Megatron-LM box's commands, scripts and MathJax left
# out), its text nodes joined by spaces so that neighbouring tick labels never run together; and
# each plotly figure's labels, title and whether it is clipped
READER_JS = """() => {
  const root = (document.querySelector('article.bd-article') || document.querySelector('main') || document.body)
    .cloneNode(true);
  root.querySelectorAll('.cell_input, script, style, mjx-container, .headerlink, .admonition pre')
    .forEach(e => e.remove());
  const parts = [], walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) parts.push(walk.currentNode.nodeValue);
  const figures = [...document.querySelectorAll('.js-plotly-plot')].map(gd => {
    const lay = gd.layout || {}, text = t => (t && typeof t === 'object') ? t.text : t;
    const axes = Object.keys(lay).filter(k => /^[xy]axis\\d*$/.test(k)).map(k => text((lay[k] || {}).title));
    const svg = gd.querySelector('.main-svg'), title = gd.querySelector('.gtitle');
    let clipped = false;
    if (svg && title) {
      const s = svg.getBoundingClientRect(), t = title.getBoundingClientRect();
      clipped = t.width > 0 && (t.left < s.left - 1 || t.right > s.right + 1);
    }
    const marks = [...gd.querySelectorAll('.textpoint text, .bartext')].map(e => e.textContent);
    return {title: text(lay.title) || '', legend: (gd.data || []).map(t => t.name || '')
              .concat([text((lay.legend || {}).title) || '']), axes: axes.map(a => a || ''), clipped: clipped,
            marks: marks};
  });
  return {text: parts.join(' '), figures: figures};
}"""


def column_names() -> tuple[str, ...]:
    """The records' raw column names a reader should never see (megalab.records.schema), those with
    an underscore."""
    from megalab.records import schema

    return tuple(
        sorted(
            {
                c
                for c in (*schema.SUMMARY_FIELDS, *schema.SERIES_FIELDS, *schema.ENV_FIELDS)
                if "_" in c
            }
        )
    )


def rewritten(
    rel: str, chapters: tuple[str, ...] | None = None, pages: dict | None = None
) -> str | None:
    """ "reader" for a page of a rewritten chapter (`book/01_data_parallel/data_parallel.html`) or
    a rewritten page of book/ (`book/performance.html`, megalab.book.frame.REWRITTEN_PAGES),
    "evidence" for its Evidence page (`book/01_.../evidence.html`,
    `book/performance_evidence.html`), None for any other page."""
    if chapters is None:
        from megalab.book.frame import REWRITTEN as chapters
    if pages is None:
        from megalab.book.frame import REWRITTEN_PAGES as pages
    for page, evidence in pages.items():
        if rel == f"book/{page}.html":
            return "reader"
        if rel == f"book/{evidence}.html":
            return "evidence"
    parts = rel.split("/")
    folder = parts[-2] if len(parts) >= 2 else ""
    if not any(folder.startswith(f"{n}_") for n in chapters):
        return None
    return "evidence" if parts[-1] == "evidence.html" else "reader"


def _show(m: re.Match, text: str) -> str:
    return " ".join(text[max(0, m.start() - 30) : m.end() + 30].split())


def text_problems(text: str) -> list[str]:
    """What a reader should not meet in a page's text: diary words, commit-hash-like tokens (outside
    URLs), run keys, raw column names, NaN; the first of each kind, with its context."""
    out = []
    plain = URL.sub(" ", text)
    for what, pattern in (
        ("a diary word", DIARY),
        ("a commit-hash-like token", HASH),
        ("a run key", RUN_KEY),
        ("NaN", NAN),
    ):
        m = pattern.search(plain)
        if m:
            out.append(f"{what} in the text: {m.group(0)!r} in {_show(m, plain)!r}")
    columns = re.compile(r"\b(" + "|".join(map(re.escape, column_names())) + r")\b")
    m = columns.search(plain)
    if m:
        out.append(
            f"a raw column name in the text: {m.group(0)!r} in {_show(m, plain)!r} (head tables "
            f"with words)"
        )
    return out


def figure_problems(
    figures: list[dict], evidence: bool = False, width: int | None = None
) -> list[str]:
    """Run keys in figure titles and legends (every page of a rewritten chapter); on its reader
    pages also the text problems of every label and clipped titles."""
    out = []
    for n, fig in enumerate(figures, 1):
        labels = [fig.get("title", ""), *fig.get("legend", []), *fig.get("axes", [])]
        for label in filter(None, labels):
            if RUN_KEY.search(label):
                out.append(
                    f"figure {n}: a run key as a title or legend: {label!r} (say the layout in "
                    f"words: "
                    f"megalab.book.frame.describe)"
                )
            elif not evidence:
                out += [f"figure {n}: {p}" for p in text_problems(label)]
        if not evidence:
            raw = next((t for t in fig.get("marks", []) if RAW_FLOAT.search(t)), None)
            if raw:
                out.append(f"figure {n}: an unrounded number on a mark: {raw!r} (give it a format)")
        if fig.get("clipped") and not evidence:
            out.append(
                f"figure {n}: its title {fig.get('title', '')!r} is wider than the figure"
                + (f" at {width} px" if width else "")
            )
    return out


def reader_problems(
    kind: str, text: str, figures: list[dict], width: int | None = None
) -> list[str]:
    """A rewritten chapter's page: `kind` "reader" (every check) or "evidence" (run keys in figure
    labels only)."""
    if kind == "evidence":
        return figure_problems(figures, evidence=True)
    return text_problems(text) + figure_problems(figures, width=width)


def _check_reader(page, kind: str) -> list[str]:
    """reader_problems at each width of WIDTHS (the text once, the titles' clipping at every
    width)."""
    out: list[str] = []
    for i, width in enumerate(WIDTHS if kind == "reader" else WIDTHS[:1]):
        page.set_viewport_size({"width": width, "height": 900})
        # plotly's responsive figures resize on the window's resize event
        page.wait_for_timeout(500)
        facts = page.evaluate(READER_JS)
        found = reader_problems(kind, facts["text"], facts["figures"], width)
        out += found if i == 0 else [p for p in found if "wider than the figure" in p]
    return out


def pages(html_dir: Path) -> list[Path]:
    """The book's content pages (Sphinx's own index/search pages and static assets left out)."""
    return sorted(
        p
        for p in html_dir.rglob("*.html")
        if p.name not in SKIP
        and not any(part.startswith("_") for part in p.relative_to(html_dir).parts)
    )


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
    return None if m is None else " ".join(text[max(0, m.start() - 30) : m.end() + 30].split())


def math_problems(formulas: int, typeset: int, errors: int, visible_text: str) -> list[str]:
    """What is wrong with a page's math: formulas Sphinx emitted vs. those MathJax typeset,
    MathJax's errors, TeX left in the visible text."""
    out = []
    if typeset < formulas:
        out.append(
            f"{formulas - typeset} of {formulas} formulas not typeset (is MathJax loaded from "
            f"_static/mathjax? run tools/mathjax-setup.sh)"
        )
    if errors:
        out.append(f"{errors} formula(s) MathJax could not typeset")
    tex = unrendered_tex(visible_text)
    if tex:
        out.append(f"unrendered TeX in the page: {tex!r}")
    return out


def _check_math(page, timeout_ms: int) -> list[str]:
    formulas = page.locator(".math").count()  # Sphinx wraps each formula: span.math, div.math
    if formulas:
        try:
            page.wait_for_function(
                "n => document.querySelectorAll('.math mjx-container').length >= n",
                arg=formulas,
                timeout=timeout_ms,
            )
        except Exception:
            pass  # counted below
    typeset = page.locator(".math:has(mjx-container)").count()
    return math_problems(
        formulas, typeset, page.locator("mjx-merror").count(), page.evaluate(VISIBLE_TEXT_JS)
    )


def check_page(
    page, url: str, timeout_ms: int, kind: str | None = None
) -> tuple[int, int, list[str]]:
    """(figures drawn, figure divs, problems) for one page; `kind` (see rewritten) adds the reader's
    checks."""
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))
    page.goto(url, wait_until="load")
    total = page.locator(".plotly-graph-div").count()
    if total:
        try:
            page.wait_for_function(
                "n => document.querySelectorAll('.js-plotly-plot .main-svg').length > 0 && "
                "document.querySelectorAll('.plotly-graph-div.js-plotly-plot').length >= n",
                arg=total,
                timeout=timeout_ms,
            )
        except Exception:
            pass  # counted below
    drawn = page.locator(".plotly-graph-div.js-plotly-plot:has(.main-svg)").count()
    if drawn < total:
        problems.append(
            f"{total - drawn} of {total} plotly figures not drawn "
            f"(is plotly.js loaded? did the notebook call charts.setup_notebook()?)"
        )
    problems += _check_math(page, timeout_ms)
    if page.locator(".output.stderr, .output.traceback, .output.error").count():
        problems.append("a cell output shows stderr or a traceback")
    for text in page.locator(".cell_output").all_inner_texts():
        m = ERROR_TEXT.search(text)
        if m:
            problems.append(f"a cell output shows an error: {text[m.start() : m.start() + 120]!r}")
            break
    if kind:
        problems += _check_reader(page, kind)
    return drawn, total, problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html_dir", nargs="?", default="_build/html")
    ap.add_argument(
        "--timeout", type=float, default=20.0, help="seconds to wait for a page's figures"
    )
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
            context.route(
                "**/*",
                lambda route: (
                    route.continue_()
                    if urlparse(route.request.url).hostname == "127.0.0.1"
                    else route.abort()
                ),
            )  # offline, like CI
            for path in found:
                rel = path.relative_to(root).as_posix()
                page = context.new_page()
                drawn, total, problems = check_page(
                    page, f"{base}/{rel}", int(ns.timeout * 1000), rewritten(rel)
                )
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
