"""Wrap comments and docstrings past the line limit, changing nothing else.

    python3 tools/wrap_long_lines.py [--width 100] PATH ...

`ruff format` wraps code but leaves comments and docstrings as they are. This tool splits each
overlong comment or docstring line at its last space before the limit and carries the rest onto the
next line of the same paragraph (or a new line at the same indent), so a paragraph is reflowed only
where it must be. Code, strings that are not docstrings, and lines without a space to break at are
left alone (the linter still reports those). Deterministic: running it twice changes nothing more.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from pathlib import Path


def docstring_lines(source: str) -> set[int]:
    """0-based numbers of the prose lines of docstrings (module, class, function): the first line
    and those at the docstring's own indent; deeper lines are examples (commands, code) and stay as
    they are."""
    out: set[int] = set()
    lines = source.split("\n")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                first, last = body[0].lineno - 1, body[0].end_lineno
                rest = [lines[n] for n in range(first + 1, last) if lines[n].strip()]
                base = min((len(x) - len(x.lstrip()) for x in rest), default=0)
                out.add(first)
                out.update(
                    n
                    for n in range(first + 1, last)
                    if lines[n].strip() and len(lines[n]) - len(lines[n].lstrip()) == base
                )
    return out


def move_trailing_comments(source: str, width: int) -> str:
    """A code line made too long by its trailing comment: the comment moves onto its own line above,
    at the line's indent (ruff format would otherwise break the code to keep the comment beside
    it)."""
    lines = source.split("\n")
    code_rows: set[int] = set()
    trailing = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            trailing[tok.start[0] - 1] = tok.start[1]
        elif tok.type not in (
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            code_rows.update(range(tok.start[0] - 1, tok.end[0]))
    for row in sorted((r for r in trailing if r in code_rows), reverse=True):
        line = lines[row]
        col = trailing[row]
        if (
            len(line) <= width
            or "noqa" in line[col:]
            or "type:" in line[col:]
            or "pragma" in line[col:]
        ):
            continue
        code, comment = line[:col].rstrip(), line[col:]
        indent = line[: len(line) - len(line.lstrip())]
        lines[row : row + 1] = [indent + comment, code]
    return "\n".join(lines)


def comment_only_lines(source: str) -> set[int]:
    """0-based numbers of the lines that hold a comment and nothing else."""
    out, code = set(), set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.add(tok.start[0] - 1)
        elif tok.type not in (
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            code.update(range(tok.start[0] - 1, tok.end[0]))
    return out - code


def _split(line: str, width: int, floor: int) -> tuple[str, str] | None:
    """The line cut at its last space at or before `width` (not inside the first `floor`
    columns)."""
    cut = line.rfind(" ", floor, width + 1)
    if cut <= floor:
        return None
    return line[:cut].rstrip(), line[cut + 1 :].lstrip()


def _prose(line: str, prefix: str) -> bool:
    """A line that continues a paragraph: same prefix, some text, not a list item, a quote or a
    blank."""
    if not line.startswith(prefix):
        return False
    rest = line[len(prefix) :]
    return (
        bool(rest.strip())
        and not rest[0].isspace()
        and not rest.startswith(('- ', '* ', '>>>', '"""', "'''", '```', '|'))
    )


def wrap(source: str, width: int = 100) -> str:
    lines = source.split("\n")
    docs, comments = docstring_lines(source), comment_only_lines(source)
    i = 0
    while i < len(lines):
        line = lines[i]
        if len(line) > width and (i in docs or i in comments):
            indent = len(line) - len(line.lstrip())
            prefix = line[:indent] + ("# " if i in comments else "")
            if (
                i in docs
                and line.lstrip().startswith(('"""', "'''"))
                and i + 1 < len(lines)
                and i + 1 in docs
            ):
                nxt_prefix = lines[i + 1][: len(lines[i + 1]) - len(lines[i + 1].lstrip())]
                prefix = nxt_prefix or prefix
            parts = _split(line, width, len(prefix) + 8)
            if parts:
                head, rest = parts
                lines[i] = head
                same = i + 1 in (docs if i in docs else comments)
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                ends_doc = i in docs and rest.rstrip().endswith(('"""', "'''"))
                if same and not ends_doc and _prose(nxt, prefix):
                    lines[i + 1] = prefix + rest + " " + nxt[len(prefix) :]
                    if i + 1 in docs or i + 1 in comments:
                        pass
                else:
                    lines.insert(i + 1, prefix + rest)
                    docs = {n + 1 if n > i else n for n in docs} | ({i + 1} if i in docs else set())
                    comments = {n + 1 if n > i else n for n in comments} | (
                        {i + 1} if i in comments else set()
                    )
                continue  # the carried line may itself be too long now
        i += 1
    out = "\n".join(lines)
    ast.parse(out)  # never write a file that no longer parses
    return out


def _string_cut(text: str, width: int, start: int) -> int | None:
    """Where to cut a line ending in a plain or f-string literal that begins at `start`: the last
    space before the limit that is inside the literal and, for an f-string, outside its braces."""
    prefix_end = start
    while text[prefix_end] not in "\"'":
        prefix_end += 1
    quote = text[prefix_end]
    if text[prefix_end : prefix_end + 3] in ('"""', "'''"):
        return None
    is_f = "f" in text[start:prefix_end].lower()
    depth, best = 0, None
    for col in range(prefix_end + 1, min(len(text), width)):
        ch = text[col]
        if ch == "\\":
            continue
        if is_f and ch == "{":
            depth += 1
        elif is_f and ch == "}":
            depth -= 1
        elif ch == quote and text[col - 1] != "\\":
            return None  # the literal ends before the limit: not this tool's case
        elif ch == " " and depth == 0 and col > prefix_end + 20:
            best = col
    return best


def split_strings(source: str, width: int = 100) -> str:
    """A line too long because of the string literal that ends it (a call argument, a keyword value,
    a piece of an implicit concatenation): the literal splits at a space into two adjacent literals,
    the second on the next line at the first one's column. Kept only where the result still parses
    and says the same (the literal's value is unchanged by construction; ast checks the file)."""
    lines = source.split("\n")
    strings = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.STRING and tok.start[0] == tok.end[0]:
            strings[tok.start[0] - 1] = (tok.start[1], tok.end[1])
        elif tok.type == getattr(tokenize, "FSTRING_START", None):
            strings[tok.start[0] - 1] = (tok.start[1], None)
    base = ast.dump(ast.parse(source))
    for row in sorted(strings, reverse=True):  # bottom up: earlier rows keep their numbers
        line = lines[row]
        if len(line) <= width:
            continue
        start = strings[row][0]
        rest = line.rstrip()
        tail = rest[len(rest.rstrip(",)")) :]  # a closing comma or parenthesis after the literal
        body = rest[: len(rest) - len(tail)] if tail else rest
        if not body.endswith(("\"", "'")):
            continue
        cut = _string_cut(body, width - 2, start)
        if cut is None:
            continue
        prefix_end = start
        while body[prefix_end] not in "\"'":
            prefix_end += 1
        prefix, quote = body[start:prefix_end], body[prefix_end]
        first = body[: cut + 1] + quote
        second = " " * start + prefix + quote + body[cut + 1 :] + tail
        wrapped = [
            body[:start] + "(" + body[start : cut + 1] + quote,
            " " * (start + 1) + prefix + quote + body[cut + 1 :] + ")" + tail,
        ]
        for candidate in ([first, second], wrapped):
            trial = lines[:row] + candidate + lines[row + 1 :]
            try:
                if ast.dump(ast.parse("\n".join(trial))) == base:
                    lines = trial
                    break
            except SyntaxError:
                pass
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+")
    p.add_argument("--width", type=int, default=100)
    p.add_argument(
        "--comments-up",
        action="store_true",
        help="only move overlong trailing comments onto their own line (run before ruff format)",
    )
    args = p.parse_args(argv)
    changed = 0
    for root in map(Path, args.paths):
        for f in sorted([root] if root.is_file() else root.rglob("*.py")):
            text = f.read_text()
            if args.comments_up:
                new = move_trailing_comments(text, args.width)
            else:
                new = text
                for _ in range(4):  # a split line may need splitting again
                    new = split_strings(wrap(new, args.width), args.width)
            if new != text:
                f.write_text(new)
                changed += 1
    print(f"wrap_long_lines: {changed} file(s) changed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
