"""Execute the book's notebooks into `_build/executed/`, and let Jupyter Book render those copies.

    megalab reproduce --mode cached          # every notebook, from the recorded results (no GPU)
    megalab reproduce 00 --mode live --gpus 4  # one chapter, measured on this machine
    jupyter-book build . -W                  # renders the executed copies; never executes anything
    python tools/check_html.py _build/html   # every figure drawn in a real (offline) browser

Layout. The notebooks under `book/` stay output-free in git. papermill runs each one (in `_toc.yml`
order) with the injected parameters and writes `_build/executed/book/<chapter>/<name>.ipynb`. The
book is built from the repository root with `execute_notebooks: "off"`; this module is also a Sphinx
extension (listed in `_config.yml`): when Sphinx reads `book/X.ipynb` it substitutes the text of
`_build/executed/book/X.ipynb` and records it as a dependency, so the page shows the executed
outputs and is rebuilt when the executed copy changes. A notebook with no executed copy is a warning
(an error under -W) telling you to run `megalab reproduce`. The same extension loads plotly.js once
per page from the installed plotly package, and MathJax from `.mathjax/` (fetched by
tools/mathjax-setup.sh; `mathjax_path` in _config.yml points at the copy), so the HTML works offline
(see `megalab.charts`). It also renders the prose's `{eval}`name`` roles from what the notebook said
(`megalab.book.prose`).

Modes. `cached` runs the notebooks with mode="cached" (recorded results only). `live` runs them
with mode="auto": a configuration already recorded on this GPU model is read back, anything else
runs on this machine's GPUs (or falls back to the reference record when it does not fit); with
`force` they run with mode="live", which measures everything again. `auto` is passed through as is.
`gpus`, when given, is injected as the notebooks' `gpus` parameter. A notebook gets only the
parameters its `parameters` cell declares, and an evidence page always runs cached: it reads the
records the chapter's runs made.

Live reproductions (megalab.book.live). In live or auto mode each page executed is a reproduction
of it, recorded in the store (megalab.records.reproductions: its seconds, the runs it launched and
read back); its estimated time to finish, full and quick, is printed first. Interrupted, the same
command resumes it: the runs it measured are read back, not launched again (`fresh` starts over).
`quick` launches only the defining points of the chapter's figures.

Resuming. A notebook is skipped when its executed copy was made, with the same parameters, from the
same content of everything it reads: the notebook, the results store (its path and every file in
it), `results/probes/` and the library (`inputs_digest`, taken before the run and kept in the copy's
metadata, so an edit made while it executes counts as a change); `force` re-executes it. Mtimes
decide nothing. Kernel: papermill starts `python3` from a kernelspec written under `_build/kernels`
that points at this interpreter (`sys.executable`), whatever other `python3` kernels are installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path

OUT_DIR = "_build/executed"
KERNEL = "python3"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
MODES = {"cached": "cached", "auto": "auto", "live": "auto"}  # reproduce mode -> notebook mode


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
INTERRUPTED = "INTERRUPTED (its previous executed copy kept)"


class UnknownNotebook(ValueError):
    """No page of the book has this name; the message lists the names to pick from."""


class NoExecutedCopy(UserWarning):
    """A book notebook has no executed copy: run `megalab reproduce` before `jupyter-book build`."""


# -- which notebooks ----------------------------------------------------------------------------
def _root(root=None) -> Path:
    if root is not None:
        return Path(root)
    from megalab.machine.env import repo_root

    return repo_root() or Path.cwd()


def _toc_files(toc: dict) -> list[str]:
    out = [toc["root"]] if "root" in toc else []
    for key in ("parts", "chapters", "sections"):
        for entry in toc.get(key, []):
            if "file" in entry:
                out.append(entry["file"])
            out += _toc_files({k: v for k, v in entry.items() if k != "file"})
    return out


def notebooks(chapters=None, root=None) -> list[Path]:
    """The book's notebooks in `_toc.yml` order, relative to the repository root. `chapters` picks
    some by name: "00", "00_know_your_machine", "planner" or a path."""
    import yaml

    base = _root(root)
    toc = yaml.safe_load((base / "_toc.yml").read_text())
    found = [Path(f).with_suffix(".ipynb") for f in _toc_files(toc)]
    found = [p for p in found if (base / p).exists()]
    if not chapters:
        return found
    picked = [p for p in found if any(_matches(p, c) for c in chapters)]
    unknown = [c for c in chapters if not any(_matches(p, c) for p in found)]
    if unknown:
        names = ", ".join(_page_name(p) for p in found)
        raise UnknownNotebook(
            f"no page of the book matches {', '.join(map(repr, unknown))}: pick from {names} "
            f"(a chapter also as ch01, 01, 1 or data_parallel)"
        )
    return picked


def _page_name(path: Path) -> str:
    return path.parent.name if path.parent.name != "book" else path.stem


def page_names(root=None) -> list[str]:
    """The names `reproduce` takes, in the book's order ([] outside a checkout of the book)."""
    try:
        return list(dict.fromkeys(_page_name(p) for p in notebooks(root=root)))
    except (OSError, ValueError):
        return []


def _matches(path: Path, name: str) -> bool:
    """A page by path, stem or folder ("00", "00_know_your_machine", "planner"); a chapter of
    megalab.book.chapters also by any name chapters.resolve accepts ("ch01", "1",
    "data_parallel")."""
    from megalab.book import chapters

    name = str(name).rstrip("/")
    try:
        # "ch01" -> "01", matched against the folder's number below
        name = chapters.resolve(name)[2:]
    except chapters.UnknownChapter:
        if re.fullmatch(r"ch\d\d", name):  # a page with no runs module, as chapter 0
            name = name[2:]
    return (
        path.as_posix() == name
        or path.with_suffix("").as_posix() == name
        or path.stem == name
        or path.parent.name == name
        or path.parent.name.split("_")[0] == name
        or (path.parent.name != "book" and path.parent.name.startswith(name + "_"))
    )


def executed_path(notebook: str | os.PathLike, root=None, out_dir: str = OUT_DIR) -> Path:
    """Where the executed copy of a book notebook (path relative to the root) is written."""
    return _root(root) / out_dir / Path(notebook)


# -- running --------------------------------------------------------------------------------------
def kernel_dir(root=None) -> Path:
    """Write (once) a `python3` kernelspec that runs this interpreter; returns the JUPYTER_PATH
    entry."""
    path = _root(root) / "_build" / "kernels"
    spec = path / "kernels" / KERNEL / "kernel.json"
    # log level CRITICAL: the kernel's own log is noise to a reader (a TCP warning at start, and on
    # Ctrl-C a ZMQError traceback: papermill interrupts, then asks for shutdown while the
    # interrupted cell still replies); a cell's errors reach the notebook, not this log
    body = {
        "argv": [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            "--IPKernelApp.log_level=CRITICAL",
        ],
        "display_name": "Python 3 (megalab)",
        "language": "python",
    }
    if not spec.exists() or json.loads(spec.read_text()) != body:
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(json.dumps(body, indent=1))
    return path


def inputs_digest(src: Path, root: Path, parameters: dict) -> str:
    """A digest of what an executed copy depends on: the notebook, the store's path and files,
    results/probes/, the library's source and the parameters."""
    import hashlib

    from megalab.jobs import running as results
    from megalab.records.store import REPRODUCTIONS

    store = results.default_root()
    data = [store, _root(root) / "results" / "probes"]
    files = [
        src,
        *sorted(
            {
                f
                for base in data
                if base.is_dir()
                for f in base.rglob("*")
                if f.is_file()
                and not f.is_symlink()
                and not f.name.endswith(".lock")
                and f.name != REPRODUCTIONS  # when pages were reproduced: no input of theirs
            }
        ),
        *sorted(Path(__file__).parents[1].rglob("*.py")),
    ]  # chapters/, theory/ too
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps([str(store.resolve()), parameters], sort_keys=True).encode())
    for f in files:
        h.update(f"\0{f}\0".encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def declared(src: Path) -> set[str]:
    """The names a notebook's `parameters` cell assigns (`name: type = value` or `name = value`)."""
    import re

    for cell in json.loads(src.read_text())["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            code = "".join(cell["source"])
            return set(re.findall(r"^([A-Za-z_]\w*)\s*(?::[^=\n]*)?=", code, re.M))
    return set()


def injected(src: Path, parameters: dict) -> dict:
    """What papermill injects into `src` of the parameters asked: only the names its parameters
    cell declares (papermill warns of the others, and the notebook would ignore them). An evidence
    page reads the records whatever the mode asked: it never launches a run."""
    asked = {**parameters, "mode": "cached"} if src.stem == "evidence" else parameters
    names = declared(src)
    return {k: v for k, v in asked.items() if k in names}


def is_fresh(src: Path, dst: Path, parameters: dict, root: Path) -> bool:
    """The executed copy exists and was made, with these parameters, from inputs of the same
    content."""
    if not dst.exists():
        return False
    try:  # a copy cut short (by a megalab that wrote in place) is not JSON: run the notebook again
        meta = json.loads(dst.read_text()).get("metadata", {})
    except (ValueError, AttributeError, OSError):
        return False
    run = meta.get("papermill", {})
    return (
        meta.get("megalab", {}).get("inputs") == inputs_digest(src, root, parameters)
        and run.get("parameters") == injected(src, parameters)
        and run.get("exception") in (None, False)
    )


def execute(src: Path, dst: Path, parameters: dict, root: Path) -> None:
    """papermill one notebook: parameters injected (those it declares: `injected`), cwd = the
    notebook's folder, a tqdm bar of cells.

    papermill saves its output after every cell, so it writes to a temporary file beside `dst`,
    renamed onto `dst` only once every cell ran: an interrupted or failed run never leaves a
    half-executed copy where the book (or the resume check) would take it for a finished one. A
    failed run's notebook is kept as `<name>.failed.ipynb` to read the error in."""
    import tempfile

    import papermill as pm

    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(kernel_dir(root)), *filter(None, [os.environ.get("JUPYTER_PATH")])]
    )
    dst.parent.mkdir(parents=True, exist_ok=True)
    _drop_orphan_parts(dst)
    # before: an edit made while it runs makes the copy stale
    digest = inputs_digest(src, root, parameters)
    fd, name = tempfile.mkstemp(
        prefix=f".{dst.stem}.{os.getpid()}.", suffix=".part.ipynb", dir=dst.parent
    )
    os.close(fd)
    tmp = Path(name)
    try:
        pm.execute_notebook(
            str(src),
            str(tmp),
            parameters=injected(src, parameters),
            kernel_name=KERNEL,
            cwd=str(src.parent),
            progress_bar={"desc": src.stem, "unit": "cell"},
            log_output=False,
        )
    except BaseException as exc:
        if _interrupted(exc) or not tmp.exists() or not tmp.stat().st_size:
            tmp.unlink(missing_ok=True)
        else:
            os.replace(tmp, failed_path(dst))
        raise
    nb = json.loads(tmp.read_text())
    nb.setdefault("metadata", {})["megalab"] = {"inputs": digest}
    tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    umask = os.umask(0)
    os.umask(umask)
    # mkstemp made it 0600: the executed copy reads like any file written here
    tmp.chmod(0o666 & ~umask)
    os.replace(tmp, dst)
    failed_path(dst).unlink(missing_ok=True)


def _drop_orphan_parts(dst: Path) -> None:
    """Remove the `.part.ipynb` files of runs of this notebook whose process is gone (killed
    reproduces)."""
    for part in dst.parent.glob(f".{dst.stem}.*.part.ipynb"):
        pid = part.name[len(dst.stem) + 2 :].split(".", 1)[0]
        if (
            pid.isdigit()
            and int(pid) != os.getpid()
            and Path("/proc/self").exists()
            and not Path(f"/proc/{pid}").exists()
        ):
            part.unlink(missing_ok=True)


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C, in this process or in the kernel (papermill reports the kernel's as a cell error)."""
    return isinstance(exc, KeyboardInterrupt) or getattr(exc, "ename", None) == "KeyboardInterrupt"


def failed_path(dst: Path) -> Path:
    """Where the output of a notebook that raised is kept (never where the book reads)."""
    return dst.with_name(dst.stem + ".failed.ipynb")


def reproduce(
    chapters=None,
    mode: str = "cached",
    gpus: int | None = None,
    force: bool = False,
    out_dir: str = OUT_DIR,
    root=None,
    quick: bool = False,
    fresh: bool = False,
    reuse: bool = True,
) -> int:
    """Execute the chosen notebooks (all, in toc order, when None); print a summary table; return 0
    when all succeeded, 1 otherwise, 130 when interrupted (Ctrl-C: the notebook running then keeps
    its previous executed copy, the table says which ran). See the module docstring for modes and
    resuming; `quick`, `fresh` and `reuse` (measure the shareable runs first, in shared launches:
    live.warm) for live reproductions: megalab.book.live."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: pick one of {', '.join(MODES)}")
    if quick and mode == "cached":
        raise ValueError("quick re-measures a chapter's defining points: pass mode='live' with it")
    base = _root(root)
    parameters = {"mode": "live" if (mode == "live" and force) else MODES[mode]}
    if gpus is not None:
        parameters["gpus"] = int(gpus)
    if quick:  # injected too: a quick copy is never taken for a full one
        parameters["quick"] = True
    rows = []
    todo = notebooks(chapters, base)
    with _reader_launcher(mode):
        return _run_all(todo, base, out_dir, parameters, force, quick, fresh, reuse, rows)


@contextlib.contextmanager
def _reader_launcher(mode: str):
    """A live (or auto) reproduction starts its runs' ranks from the warm fork-server
    (launch.READER_LAUNCHER) unless $MEGALAB_LAUNCHER says otherwise; restored after."""
    from megalab.jobs.launch import LAUNCHER, READER_LAUNCHER

    before = os.environ.get(LAUNCHER)
    if mode != "cached" and not before:
        os.environ[LAUNCHER] = READER_LAUNCHER
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(LAUNCHER, None)
        else:
            os.environ[LAUNCHER] = before


def _run_all(todo, base, out_dir, parameters, force, quick, fresh, reuse, rows) -> int:
    """reproduce's loop over the notebooks: its exit code."""
    for nb in todo:
        src, dst = base / nb, executed_path(nb, base, out_dir)
        start = time.perf_counter()
        if not force and is_fresh(src, dst, parameters, base):
            rows.append((nb.as_posix(), "up to date", 0.0))
            continue
        status = _execute_live(src, dst, nb, parameters, base, quick, fresh, reuse)
        rows.append((nb.as_posix(), status, time.perf_counter() - start))
        if status == INTERRUPTED:
            rows += [(n.as_posix(), "not run", 0.0) for n in todo[len(rows) :]]
            print(_table(rows, parameters))
            print(
                "megalab reproduce: interrupted; run the same command again to go on",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
    print(_table(rows, parameters))
    return 0 if all(not s.startswith("FAILED") for _, s, _ in rows) else 1


def _execute_live(src, dst, nb, parameters, base, quick, fresh, reuse=True) -> str:
    """execute() one notebook, under its live reproduction when it measures (megalab.book.live:
    resumed or new, its estimate printed, how it ended recorded); its status for the table."""
    import contextlib

    from megalab.book import live
    from megalab.jobs import reproduction

    # it measures only as the page runs: an evidence page, or one without `mode`, never does
    asked = {**parameters, "mode": injected(src, parameters).get("mode")}
    run = live.begin(nb, asked, quick=quick, fresh=fresh)
    try:
        if run is not None:
            said = live.estimate(run.page, run.gpus, reproduction=run.id)
            print(
                f"megalab reproduce: {'resuming' if run.resumed else 'starting'} {run.id}"
                + (f"; {said}" if said else ""),
                file=sys.stderr,
            )
        with reproduction.active(run.id) if run else contextlib.nullcontext():
            if run is not None and reuse:
                live.warm(run)
            execute(src, dst, parameters, base)
        status = "ok"
    except KeyboardInterrupt:
        status = INTERRUPTED
    except Exception as exc:  # a failing chapter must not stop the others; reported below
        last = str(exc).strip().splitlines()[-1][:120] if str(exc).strip() else ""
        status = (
            INTERRUPTED
            if _interrupted(exc)
            else f"FAILED: {type(exc).__name__}: {last} (see {_shown(failed_path(dst), base)})"
        )
    if run is not None:
        run.end(
            "finished" if status == "ok" else "interrupted" if status == INTERRUPTED else "failed"
        )
        if said := run.launch():
            print(f"megalab reproduce: {run.id}: {said}", file=sys.stderr)
    return status


def _shown(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return str(path)


def _table(rows, parameters) -> str:
    width = max([len("notebook")] + [len(r[0]) for r in rows])
    lines = [f"megalab reproduce {parameters}", f"{'notebook':<{width}}  {'time':>8}  status"]
    lines += [f"{nb:<{width}}  {t:>7.1f}s  {status}" for nb, status, t in rows]
    return "\n".join(lines)


# -- Sphinx extension: render the executed copies ------------------------------------------------
def _source_read(app, docname: str, source: list) -> None:
    src = Path(app.env.doc2path(docname))
    if src.suffix != ".ipynb":
        return
    rel = src.resolve().relative_to(Path(app.srcdir).resolve())
    executed = Path(app.srcdir) / app.config.megalab_executed_dir / rel
    if not executed.exists():
        from sphinx.util import logging

        logging.getLogger(__name__).warning(
            f"{rel} has no executed copy in {app.config.megalab_executed_dir}/: run "
            f"`megalab reproduce {rel.parent.name if rel.parent.name != 'book' else rel.stem} "
            f"--mode cached` "
            f"first",
            location=docname,
        )
        return
    app.env.note_dependency(str(executed.resolve()))
    nb = json.loads(executed.read_text())
    _warn_read_before_said(nb, docname)
    # every page folds its code, chapters and top-level pages (performance, planner, hardware) alike
    source[0] = json.dumps(tag_cells(_html_only(nb), hide_input=True))


def _warn_read_before_said(nb: dict, docname: str) -> None:
    """JupyterLab evaluates a markdown cell's {eval} roles when the cell runs: a name said further
    down shows an error there. A warning (an error under -W) per such read; the HTML alone would not
    show it."""
    from sphinx.util import logging

    from megalab.book import prose

    for name, read, said in prose.read_before_said(nb):
        if said is not None:  # never said: the eval role reports it where it is read
            logging.getLogger(__name__).warning(
                f"{{eval}}`{name}` in cell {read} reads a name said in cell {said} below it: "
                f"JupyterLab shows "
                f"an error there until that cell ran; say it in a cell above",
                location=docname,
            )


def _html_only(nb: dict) -> dict:
    """Drop plotly's mime type where a text/html version sits beside it (myst-nb cannot render it
    and warns); a figure with no HTML version keeps it, so the warning says setup_notebook() was not
    called."""
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "text/html" in data:
                data.pop(PLOTLY_MIME, None)
    return nb


# a Markdown output written in MyST (frame.megatron_box)
MYST_OUTPUT = (":::{admonition}", "```{admonition}")


SAYING = ("glue", "say")  # myst-nb's glue; megalab.book.prose.say


def glue_only(code: str) -> bool:
    """A cell that only glues values (`glue(...)` or `say(...)` calls, loops over them, imports):
    bookkeeping, not for the page."""
    import ast

    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False

    def only(stmts) -> bool:
        for st in stmts:
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(st, (ast.For, ast.If)) and only(st.body) and only(st.orelse):
                continue
            call = st.value if isinstance(st, ast.Expr) else None
            fn = getattr(call, "func", None)
            if not (
                isinstance(call, ast.Call)
                and (getattr(fn, "id", None) or getattr(fn, "attr", None)) in SAYING
            ):
                return False
        return True

    return bool(tree.body) and only(tree.body) and any(name in code for name in SAYING)


def tag_cells(nb: dict, hide_input: bool = False) -> dict:
    """What the HTML page shows of the executed copy: papermill's injected-parameters cell and
    glue-only cells removed (tag remove-cell), and a Markdown output written in MyST (the In
    Megatron-LM box) rendered as MyST. With `hide_input` (the rewritten chapters) every other code
    cell is tagged hide-input: the page shows its outputs, the code folds behind a toggle."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        meta = cell.setdefault("metadata", {})
        tags = meta.setdefault("tags", [])
        code = "".join(cell.get("source", ""))
        if ("injected-parameters" in tags or glue_only(code)) and "remove-cell" not in tags:
            tags.append("remove-cell")
        if hide_input and "remove-cell" not in tags and "hide-input" not in tags:
            tags.append("hide-input")
        for out in cell.get("outputs", []):
            md = "".join(out.get("data", {}).get("text/markdown", ""))
            if md.lstrip().startswith(MYST_OUTPUT):
                meta.setdefault("mystnb", {})["markdown_format"] = "myst"
    return nb


def _copy_plotly_js(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        import shutil

        import plotly

        js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        shutil.copyfile(js, Path(app.outdir) / "_static" / "plotly.min.js")


def _copy_mathjax(app, exception) -> None:
    """.mathjax/ (tools/mathjax-setup.sh) -> _static/mathjax/, where _config.yml's mathjax_path
    points."""
    if exception is not None or app.builder.format != "html":
        return
    import shutil

    src = Path(app.srcdir) / app.config.megalab_mathjax_dir
    if not (src / "tex-chtml.js").exists():
        from sphinx.util import logging

        logging.getLogger(__name__).warning(
            f"no MathJax in {src}: run tools/mathjax-setup.sh (make book does), or formulas show "
            f"as TeX"
        )
        return
    shutil.copytree(src, Path(app.outdir) / "_static" / "mathjax", dirs_exist_ok=True)


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    # jupyter-book 1.0.4 on Sphinx 7.4 lists some scripts twice (at two priorities); the inline
    # `const THEBE_JS_URL = ...` then throws "Identifier 'THEBE_JS_URL' has already been declared"
    seen, kept = set(), []
    for js in context.get("script_files", []):
        key = (
            getattr(js, "filename", js) or "",
            repr(sorted(getattr(js, "attributes", {}).items())),
        )
        if key not in seen:
            seen.add(key)
            kept.append(js)
    context["script_files"] = kept


def setup(app):
    """Sphinx entry point (`sphinx: extra_extensions: [megalab.book.reproduce]` in _config.yml)."""
    app.add_config_value("megalab_executed_dir", OUT_DIR, "env")
    app.add_config_value("megalab_mathjax_dir", ".mathjax", "env")
    app.connect("source-read", _source_read)
    app.add_js_file("plotly.min.js", priority=200)  # before the pages' inline figure scripts
    app.connect("build-finished", _copy_plotly_js)
    app.connect("build-finished", _copy_mathjax)
    app.connect("html-page-context", _dedupe_scripts)
    from megalab.book import prose

    # {eval}`name` pastes what the notebook said (myst-nb's own needs a kernel)
    prose.setup_sphinx(app)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="megalab reproduce", description=__doc__.splitlines()[0])
    p.add_argument("chapters", nargs="*", help="chapter names, e.g. 00 or planner (default: all)")
    p.add_argument("--mode", choices=list(MODES), default="cached")
    p.add_argument("--gpus", type=int, default=None)
    p.add_argument("--force", action="store_true", help="execute again even when up to date")
    from megalab.book.live import add_args

    add_args(p)
    ns = p.parse_args(argv)
    return reproduce(
        ns.chapters or None,
        ns.mode,
        ns.gpus,
        ns.force,
        quick=ns.quick,
        fresh=ns.fresh,
        reuse=ns.reuse,
    )


if __name__ == "__main__":
    sys.exit(main())
