"""The reader-path budgets a rewritten chapter notebook is held to (tests/test_book_text.py applies
them).

    >>> budgets.problems(json.load(open("book/01_data_parallel/data_parallel.ipynb")))   # [] when it keeps them

The reader path is the notebook's cells before its Evidence part (a heading "Evidence" in a markdown
cell); everything from there on, and the chapter's appendix page `evidence.ipynb`, is exempt. On the
reader path: at most WORDS words of prose (markdown; code blocks, math and directive lines left out,
a role such as {glue:text}`x:.1f` counted as one word), code cells of at most CELL_LINES lines and
CELL_COLUMNS columns, no `def`. Over the whole notebook: at most GLUES `glue(` or `say(` calls, each
naming its value with a string literal (or an f-string, read as a pattern); every name the prose
reads ({glue:text}, {eval}, {glue:}, {glue:figure}, the glue directives) is glued, every glued name
is read; one cell tagged `parameters`, holding literals only; every paper cited on the reader path
("Korthikanti et al. 2022") linked at least once (megalab.book.references has the links).
"""

from __future__ import annotations

import ast
import re

WORDS = 3000  # prose words on the reader path: about 30 minutes with its figures
PAGE_WORDS = {"performance": 4000}  # pages read in about 40 minutes (frame.REWRITTEN_PAGES)
GLUES = 60  # glue( calls a chapter makes
CELL_LINES = 15
CELL_COLUMNS = 100

EVIDENCE = re.compile(r"^#{1,6}\s+Evidence\b", re.M)
_FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1\s*$", re.M | re.S)  # ```code``` blocks
_MATH = re.compile(r"\$\$.*?\$\$", re.S)
_INLINE_MATH = re.compile(r"\$[^$\n]+\$")
# {glue:text}`x:.1f`, {term}`SP`
_ROLE = re.compile(r"\{[\w:.-]+\}`[^`]*`")
# ::: fences, :class: options
_DIRECTIVE_LINE = re.compile(r"^\s*(:{3,}|`{3,}).*$|^\s*:[\w-]+:.*$", re.M)
_HTML = re.compile(r"<[^>]+>|<!--.*?-->", re.S)
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_WORD = re.compile(r"[A-Za-z0-9]+(?:['’.,-][A-Za-z0-9]+)*")

GLUE_CALL = re.compile(r"\b(?:glue|say)\(")  # say: megalab.book.prose
_GLUE_NAME = re.compile(r"\b(?:glue|say)\(\s*(f?)(['\"])(.*?)\2")
_GLUE_READ = re.compile(r"\{(?:glue(?::\w*)?|eval)\}`([^`:]+)(?::[^`]*)?`")
_GLUE_DIRECTIVE = re.compile(r"^\s*(?:`{3,}|:{3,})\{glue(?::\w*)?\}\s+(\S+)", re.M)
_DEF = re.compile(r"^\s*(async\s+)?def\s", re.M)
CITATION = re.compile(
    r"\b([A-Z][A-Za-z-]+(?: et al\.?| and [A-Z][A-Za-z-]+)?),? \(?((?:19|20)\d\d)\b"
)


def source(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def reader_path(nb: dict) -> list[dict]:
    """The cells before the notebook's Evidence part (all of them when it has none)."""
    out = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown" and EVIDENCE.search(source(cell)):
            break
        out.append(cell)
    return out


def words(markdown: str) -> int:
    """Prose words of one markdown text: code blocks, math, directive lines and HTML left out; a
    role one word."""
    text = _FENCE.sub(" ", markdown)
    text = _MATH.sub(" ", text)
    text = _INLINE_MATH.sub(" x ", text)
    text = _ROLE.sub(" x ", text)
    text = _DIRECTIVE_LINE.sub(" ", text)
    text = _LINK.sub(r" \1 ", _HTML.sub(" ", text))
    return len(_WORD.findall(text))


def prose_words(nb: dict) -> int:
    """Words of prose on the reader path."""
    return sum(words(source(c)) for c in reader_path(nb) if c.get("cell_type") == "markdown")


def glued(nb: dict) -> tuple[set[str], list[re.Pattern], list[str]]:
    """(literal names, f-string names as patterns, calls whose name cannot be read) of the
    notebook's glue calls."""
    names, patterns, unread = set(), [], []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        text = source(cell)
        for m in GLUE_CALL.finditer(text):
            named = _GLUE_NAME.match(text, m.start())
            if not named:
                unread.append(text[m.start() : m.start() + 60].splitlines()[0])
            elif named.group(1):
                parts = re.split(r"\{[^}]*\}", named.group(3))
                patterns.append(re.compile(".+".join(re.escape(p) for p in parts) + r"\Z"))
            else:
                names.add(named.group(3))
    return names, patterns, unread


def read_names(nb: dict) -> set[str]:
    """The glue names the notebook's prose reads."""
    md = "\n".join(source(c) for c in nb.get("cells", []) if c.get("cell_type") == "markdown")
    return {n.strip() for n in _GLUE_READ.findall(md)} | set(_GLUE_DIRECTIVE.findall(md))


def glue_problems(nb: dict, limit: int = GLUES) -> list[str]:
    calls = sum(
        len(GLUE_CALL.findall(source(c)))
        for c in nb.get("cells", [])
        if c.get("cell_type") == "code"
    )
    out = [f"{calls} glue( calls: at most {limit}"] if calls > limit else []
    names, patterns, unread = glued(nb)
    out += [f"glue name not a string literal (or f-string): {u!r}" for u in unread]
    reads = read_names(nb)
    missing = sorted(n for n in reads if n not in names and not any(p.match(n) for p in patterns))
    out += [f"the prose reads {n!r}, which the notebook never glues" for n in missing]
    out += [f"glued but never read: {n!r}" for n in sorted(names - reads)]
    out += [
        f"glued but never read: f-string {p.pattern!r}"
        for p in patterns
        if not any(p.match(n) for n in reads)
    ]
    return out


def cell_problems(nb: dict) -> list[str]:
    """Code cells on the reader path longer than CELL_LINES, wider than CELL_COLUMNS, or defining a
    function."""
    out = []
    for i, cell in enumerate(nb.get("cells", [])[: len(reader_path(nb))]):
        if cell.get("cell_type") != "code":
            continue
        text = source(cell).rstrip("\n")
        lines = text.splitlines()
        first = (lines or [""])[0][:50]
        if len(lines) > CELL_LINES:
            out.append(f"cell {i} has {len(lines)} lines (at most {CELL_LINES}): {first!r}")
        wide = [n for n, line in enumerate(lines, 1) if len(line) > CELL_COLUMNS]
        if wide:
            out.append(
                f"cell {i} line {wide[0]} is {len(lines[wide[0] - 1])} columns (at most "
                f"{CELL_COLUMNS}): "
                f"{first!r}"
            )
        if _DEF.search(text):
            out.append(f"cell {i} defines a function (move it to the lib, with a test): {first!r}")
    return out


def parameters_problems(nb: dict) -> list[str]:
    """Exactly one cell tagged `parameters`, its statements assignments of literals."""
    cells = [
        c for c in nb.get("cells", []) if "parameters" in c.get("metadata", {}).get("tags", [])
    ]
    if len(cells) != 1:
        return [f"{len(cells)} cells tagged 'parameters': want exactly one"]
    try:
        tree = ast.parse(source(cells[0]))
    except SyntaxError as exc:
        return [f"the parameters cell does not parse: {exc}"]
    out = []
    for stmt in tree.body:
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        try:
            ast.literal_eval(value) if value is not None else None
            if value is None:
                raise ValueError
        except ValueError:
            out.append(f"the parameters cell holds more than literals: {ast.unparse(stmt)[:60]!r}")
    return out


def citation_problems(nb: dict) -> list[str]:
    """Papers cited on the reader path ("Narayanan et al. 2021") that no link there points to."""
    md = "\n".join(source(c) for c in reader_path(nb) if c.get("cell_type") == "markdown")
    linked = {
        (m.group(1), m.group(2)) for text in _LINK.findall(md) for m in CITATION.finditer(text)
    }
    cited = [
        (m.group(1), m.group(2))
        for m in CITATION.finditer(md)
        if "et al" in m.group(1) or " and " in m.group(1)
    ]
    return [
        f"{a} {y} is cited but never linked: link it (megalab.book.references.cite)"
        for a, y in dict.fromkeys(cited)
        if (a, y) not in linked
    ]


def problems(nb: dict, words_limit: int = WORDS) -> list[str]:
    """Every budget a rewritten chapter notebook breaks, one line each; [] when it keeps them
    all. `words_limit`: the prose words its reader path may hold (PAGE_WORDS for a longer page)."""
    n = prose_words(nb)
    out = (
        [
            f"{n} words of prose on the reader path: at most {words_limit} (move the rest to "
            "Evidence)"
        ]
        if n > words_limit
        else []
    )
    return (
        out
        + glue_problems(nb)
        + cell_problems(nb)
        + parameters_problems(nb)
        + citation_problems(nb)
    )
