#!/usr/bin/env python
"""Rewrite a chapter's `{glue:text}`name:fmt`` prose into `{eval}`name`` and its glue calls into
`say`.

    python tools/glue_to_eval.py book/04_context_parallel/context_parallel.ipynb  # in place
    python tools/glue_to_eval.py --check book/*/*.ipynb                            # report only

JupyterLab shows `{eval}`name`` (jupyterlab-myst evaluates it in the kernel) and the HTML book
pastes the same text (megalab.book.prose): see that module. For each name the prose reads:
- `glue("name", value, display=False)` becomes `say("name", value, "fmt")`, the format taken from
the
  prose; a name read with two formats is said twice (`name` with the commonest, `name_<fmt>` with
  the
  other, e.g. `share_1pct` for ".1%"); a name that is also a variable of the notebook (or a
  builtin) is
  said as `name_said`;
- `glue(f"fit_{cp}", ...)` keeps its f-string when every prose name it makes is read with one
format;
- `from myst_nb import glue` becomes `from megalab.book.prose import say` (kept too while glue calls
remain,
  e.g. of names the prose does not read).
A notebook it cannot rewrite exactly is left untouched and its reasons are printed (exit status 1):
a glue name held in a variable (`glue(name, ...)`), a glue call that displays, a format that differs
between the names of one f-string, another glue role or directive, a cross-document reference
(`doc::name`).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import re
import sys
from collections import Counter
from pathlib import Path

GLUE_TEXT = re.compile(r"\{glue:text\}`([^`]+)`")
OTHER_GLUE = re.compile(r"\{glue(:(?!text\})[a-z]*)?\}|```\{glue")
IMPORT = "from myst_nb import glue"
SAY_IMPORT = "from megalab.book.prose import say"
KERNEL_NAMES = {"In", "Out", "get_ipython", "display", "exit", "quit"}


class Refused(ValueError):
    """The notebook cannot be rewritten exactly; the message lists why."""


def _src(cell) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _set_src(cell, text: str) -> None:
    cell["source"] = text.splitlines(keepends=True) if isinstance(cell["source"], list) else text


def _split(role_text: str) -> tuple[str, str]:
    key, _, fmt = role_text.partition(":")
    return key.strip(), fmt


def slug(fmt: str) -> str:
    """A format spec as a name suffix: ".1%" -> "1pct", ",.0f" -> "c0f", "+.1%" -> "p1pct", "" ->
    "s"."""
    text = (
        fmt.replace("%", "pct")
        .replace(",", "c")
        .replace("+", "p")
        .replace("-", "m")
        .replace(".", "")
    )
    return re.sub(r"\W", "", text) or "s"


def taken_names(code: list[str]) -> set[str]:
    """Names the notebook's code binds, and builtins: a said name must not overwrite them."""
    names = set(dir(builtins)) | KERNEL_NAMES
    for text in code:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                names.add(node.name)
                names.update(a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _chars(line: str, col: int) -> int:
    """ast's column (a UTF-8 byte offset) as a str index into `line`."""
    return len(line.encode()[:col].decode("utf-8", "ignore"))


def _fstring_pattern(node: ast.JoinedStr) -> re.Pattern:
    parts = [re.escape(v.value) if isinstance(v, ast.Constant) else ".+?" for v in node.values]
    return re.compile("^" + "".join(parts) + "$")


def _glue_calls(tree: ast.AST) -> list[ast.Call]:
    return sorted(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "glue"
        ),
        key=lambda n: (n.lineno, n.col_offset),
    )


def plan(nb: dict) -> tuple[dict[str, list[str]], dict[tuple[str, str], str], list[str]]:
    """The formats each name is read with (commonest first), (name, fmt) -> the said name, and the
    reasons the notebook is refused."""
    cells = nb["cells"]
    code = [_src(c) for c in cells if c["cell_type"] == "code"]
    problems: list[str] = []
    fmts: dict[str, Counter] = {}
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = _src(cell)
        if OTHER_GLUE.search(text):
            problems.append(f"cell {i}: a glue role or directive other than {{glue:text}}")
        for m in GLUE_TEXT.finditer(text):
            name, fmt = _split(m.group(1))
            if "::" in name:
                problems.append(f"cell {i}: {m.group(0)} reads another document")
            fmts.setdefault(name, Counter())[fmt] += 1
    try:
        taken = taken_names(code)
    except SyntaxError as exc:
        return {}, {}, [f"a code cell is not plain Python ({exc.msg}, line {exc.lineno})"]
    spoken: dict[tuple[str, str], str] = {}
    for name, counts in fmts.items():
        for rank, (fmt, _) in enumerate(counts.most_common()):
            said = name if rank == 0 else f"{name}_{slug(fmt)}"
            spoken[(name, fmt)] = said + "_said" if said in taken else said
    if len(set(spoken.values())) < len(spoken):
        problems.append(
            "two reads map to one said name: "
            + ", ".join(n for n, c in Counter(spoken.values()).items() if c > 1)
        )
    return {n: [f for f, _ in c.most_common()] for n, c in fmts.items()}, spoken, problems


def _rewrite_call(
    call: ast.Call,
    text: str,
    lines: list[str],
    fmts: dict[str, list[str]],
    spoken: dict,
    where: str,
) -> tuple[str | None, list[str]]:
    """The `say` statement(s) replacing one glue call, None to keep it, and the reasons to
    refuse."""
    if len(call.args) != 2 or any(k.arg != "display" for k in call.keywords):
        return None, [f"{where}: glue call with other arguments than (name, value, display=False)"]
    display = [k.value for k in call.keywords]
    if not (display and isinstance(display[0], ast.Constant) and display[0].value is False):
        return None, [f"{where}: glue call that displays its value (say never does)"]
    name_node, value = call.args
    value_src = ast.get_source_segment(text, value)
    indent = lines[call.lineno - 1][: _chars(lines[call.lineno - 1], call.col_offset)]
    if isinstance(name_node, ast.Constant) and isinstance(name_node.value, str):
        name = name_node.value
        if name not in fmts:
            return None, []  # the prose does not read it: left as glue
        says = [f'say("{spoken[(name, f)]}", {value_src}, "{f}")' for f in fmts[name]]
        if len(says) > 1 and indent.strip():
            return None, [f"{where}: {name!r} is read with two formats inside an expression"]
        return ("\n" + indent).join(says), []
    if isinstance(name_node, ast.JoinedStr):
        pattern = _fstring_pattern(name_node)
        matched = {n: fs for n, fs in fmts.items() if pattern.match(n)}
        if not matched:
            return None, []
        kinds = {f for fs in matched.values() for f in fs}
        renamed = [n for n, fs in matched.items() if any(spoken[(n, f)] != n for f in fs)]
        if len(kinds) > 1 or renamed:
            return None, [
                f"{where}: the names of {ast.get_source_segment(text, name_node)} are read with "
                f"formats {sorted(kinds)}{' or renamed' if renamed else ''}"
            ]
        return f'say({ast.get_source_segment(text, name_node)}, {value_src}, "{kinds.pop()}")', []
    return None, [
        f"{where}: glue name held in a variable ({ast.get_source_segment(text, name_node)})"
    ]


def convert(nb: dict) -> dict:
    """The notebook rewritten (a new dict); raises Refused with every reason it cannot be."""
    nb = json.loads(json.dumps(nb))
    fmts, spoken, problems = plan(nb)
    kept_glue = False
    has_import = False
    for i, cell in enumerate(nb["cells"]):
        text = _src(cell)
        if cell["cell_type"] == "markdown":
            _set_src(
                cell, GLUE_TEXT.sub(lambda m: "{eval}`" + spoken[_split(m.group(1))] + "`", text)
            )
            continue
        if cell["cell_type"] != "code" or "glue" not in text:
            continue
        lines = text.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        edits = []
        for call in _glue_calls(ast.parse(text)):
            new, why = _rewrite_call(
                call, text, lines, fmts, spoken, f"cell {i} line {call.lineno}"
            )
            problems += why
            if new is None:
                kept_glue = True
                continue
            start = offsets[call.lineno - 1] + _chars(lines[call.lineno - 1], call.col_offset)
            end = offsets[call.end_lineno - 1] + _chars(
                lines[call.end_lineno - 1], call.end_col_offset
            )
            edits.append((start, end, new))
        for start, end, new in reversed(edits):
            text = text[:start] + new + text[end:]
        has_import |= IMPORT in text
        _set_src(cell, text)
    if not has_import:
        problems.append(f"no `{IMPORT}` line to replace")
    if problems:
        raise Refused("\n".join(problems))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and IMPORT in _src(cell):
            _set_src(
                cell,
                _src(cell).replace(
                    IMPORT, f"{IMPORT}\n{SAY_IMPORT}" if kept_glue else SAY_IMPORT, 1
                ),
            )
            break
    return nb


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--check", action="store_true", help="report what would change; write nothing")
    ns = ap.parse_args(argv)
    status = 0
    for path in ns.notebooks:
        nb = json.loads(path.read_text())
        if not any(GLUE_TEXT.search(_src(c)) for c in nb["cells"] if c["cell_type"] == "markdown"):
            print(f"{path}: no {{glue:text}} to rewrite")
            continue
        try:
            new = convert(nb)
        except Refused as exc:
            status = 1
            reasons = str(exc).splitlines()
            print(f"{path}: left as it is ({len(reasons)} reasons)")
            for line in reasons:
                print(f"    {line}")
            continue
        n = sum(
            len(GLUE_TEXT.findall(_src(c))) for c in nb["cells"] if c["cell_type"] == "markdown"
        )
        print(f"{path}: {n} {{glue:text}} reads -> {{eval}}{' (check only)' if ns.check else ''}")
        if not ns.check:
            path.write_text(json.dumps(new, indent=1, ensure_ascii=False) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
