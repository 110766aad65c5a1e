"""The papers the book cites and the glossary's Megatron-LM flags: links listed once, flags the peer
really passes."""

import re
from pathlib import Path

import pytest

from megalab.book import frame, references
from megalab.jobs import peer
from megalab.runs import presets

ROOT = Path(__file__).resolve().parents[1]


def test_references_page_lists_every_paper_with_its_link():
    page = (ROOT / "book" / "references.md").read_text()
    for p in references.PAPERS.values():
        assert p.line() in page, p.short
    assert "file: book/references" in (ROOT / "_toc.yml").read_text()


def test_cite_writes_the_link():
    assert (
        references.cite("korthikanti2022")
        == "[Korthikanti et al. 2022](https://arxiv.org/abs/2205.05198)"
    )
    assert (
        references.cite("narayanan2021", "Table 1")
        == "[Narayanan et al. 2021, Table 1](https://arxiv.org/abs/2104.04473)"
    )
    with pytest.raises(KeyError, match="korthikanti2022"):
        references.cite("nobody1999")


def test_every_flag_in_the_glossary_is_one_the_peer_passes():
    g = presets.get("gpt-1.2b")
    m = presets.get("moe-small")
    configs = [
        g.replace(
            gpus=8,
            tp=2,
            sp=True,
            pp=2,
            vpp=2,
            cp=2,
            dist_opt=True,
            overlap=True,
            mbs=1,
            gbs=16,
            recompute="selective",
        ),
        g.replace(recompute="full", cuda_graphs="te"),
        m.replace(gpus=4, ep=2, etp=2),
    ]
    passed = {a for c in configs for a in peer.args(peer.peer_config(c)) if a.startswith("--")}
    table = (ROOT / "book" / "glossary.md").read_text().split("## Megatron-LM flags")[1]
    flags = set(re.findall(r"`(--[a-z-]+)`", table))
    assert flags and flags <= passed, flags - passed
    # the In Megatron-LM box explains each
    assert flags <= set(frame.FLAGS) | set(frame.SIZE_FLAGS)
