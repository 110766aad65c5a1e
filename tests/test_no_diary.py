"""The lib speaks of what the code does and what it costs, not of when or where it was written: no
recording sessions, host leases or commit hashes in its source (git keeps the history). A commit or
date that selects records (records.TRAINER_CHANGES) is data in a string, and stays."""

import io
import re
import tokenize
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "megalab"
DIARY = re.compile(r"\bsession \d|(?<![a-z])leases?(?![a-z])|\bcommit [0-9a-f]{7}", re.IGNORECASE)
# a short or full commit hash
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")


def _prose(source: str):
    """(line, text) of every comment and docstring: the places a hash is narrative, not data."""
    previous = tokenize.NEWLINE  # a module docstring opens the file
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT or (
            tok.type == tokenize.STRING and previous in (tokenize.INDENT, tokenize.NEWLINE)
        ):
            yield tok.start[0], tok.string
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok.type


def _lines(pattern, texts):
    return [
        f"{path}:{line}: {m.group(0)!r}"
        for path, pairs in texts
        for line, text in pairs
        for m in pattern.finditer(text)
    ]


def test_no_sessions_leases_or_commits_in_the_lib():
    sources = sorted(LIB.rglob("*.py"))
    assert sources
    whole = [(p.relative_to(LIB), enumerate(p.read_text().splitlines(), 1)) for p in sources]
    assert _lines(DIARY, whole) == []


def test_no_commit_hashes_in_comments_or_docstrings():
    prose = [(p.relative_to(LIB), list(_prose(p.read_text()))) for p in sorted(LIB.rglob("*.py"))]
    assert _lines(HASH, prose) == []


def test_the_checks_see_what_they_look_for():
    assert DIARY.search("made in session 15") and DIARY.search("one lease of a host")
    assert DIARY.search("df['lease_at']") and DIARY.search("at commit 6b7f807")
    assert not DIARY.search("release(path)") and not DIARY.search("start_new_session=True")
    text = (
        '"""Made by 6b7f807."""\nX = ("70bfd18", 1)  # the fused trainer\ny = 1  # from '
        'b4fce72 on\n'
    )
    assert [line for line, t in _prose(text) if HASH.search(t)] == [1, 3]
