"""Chapter 07's runs: the decision guide's runs are recorded ones, and the queued runs are legal,
fit and follow the chapter's choice rule."""

import pytest

import megalab
from megalab import theory
from megalab.book import chapters, specs
from megalab.book.chapters import ch07_choosing_a_layout as ch07
from megalab.runs.config import RunConfig


def _cfg(item) -> RunConfig:
    return item if isinstance(item, RunConfig) else item.cfg


def test_the_chapter_has_its_names():
    assert chapters.resolve("choosing_a_layout") == chapters.resolve("07") == "ch07"


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_pending_is_legal_and_fits(gpus):
    queued, measured = chapters.pending("ch07", gpus), chapters.runs("ch07", gpus)["cases"]
    assert set(queued) | set(measured) == set(ch07.CASES) and not set(queued) & set(measured)
    assert set(measured) == set(ch07.RECORDED_CASES.get(gpus, ()))
    for name, picked in {**queued, **measured}.items():
        assert len(picked) == ch07.TOP + ch07.OTHERS
        assert list(picked)[: ch07.TOP] == [f"top{i}" for i in range(1, ch07.TOP + 1)]
        assert len({c.key for c in picked.values()}) == len(picked)  # eight different runs
        for cfg in picked.values():
            assert cfg.gpus == gpus and not cfg.problems()
            assert theory.memory(cfg, "H200")["fits"]
            assert (cfg.name, cfg.seq, cfg.gbs) == (
                ch07.CASES[name].preset,
                ch07.CASES[name].seq,
                ch07.CASES[name].gbs,
            )


def test_frozen_choice_keeps_the_probe_rule():
    """Each frozen pick past the top five qualifies for its probe, and no earlier pick did."""
    probes = {key: rule for key, _, rule in ch07.PROBES}
    for picked in [
        *ch07.pending(2).values(),
        *ch07.pending(4).values(),
        *ch07.runs(2)["cases_by_gpus"][2].values(),
        *ch07.runs(2)["cases_by_gpus"][4].values(),
    ]:
        cfgs = list(picked.values())
        for i, (key, cfg) in enumerate(picked.items()):
            if key in probes:
                assert probes[key](cfg) and not any(probes[key](c) for c in cfgs[:i])


def test_four_gpu_picks_are_frozen():
    """The 4-GPU picks are CHOSEN, not today's search: eight per case, each legal on four GPUs and
    predicted to fit an H200, so a plan printed now and the chapter that reads its records later
    name the same runs."""
    picks = {**ch07.pending(4), **ch07.runs(4)["cases"]}
    assert set(picks) == set(ch07.CASES) and set(ch07.CHOSEN) == {2, 4}
    for name, picked in picks.items():
        assert list(picked) == list(ch07.CHOSEN[4][name]) and len(picked) == ch07.TOP + ch07.OTHERS
        for cfg in picked.values():
            assert cfg.gpus == 4 and not cfg.problems() and theory.memory(cfg, "H200")["fits"]


def test_guide_reads_other_chapters_records():
    guide = ch07.runs(2)["guide"]
    assert {_cfg(i).key for i in specs.items(guide["tp_vs_dp"])} == {
        c.key for c in chapters.runs("ch02", 4)["tp_vs_dp"]
    }
    assert guide["recompute_long"][0].seq == guide["recompute_long"][1].seq


def test_two_gpu_outcomes_the_chapter_quotes():
    """On two GPUs the MoE case ran five picks out of memory and three that trained, and long_32k's
    eight all trained (tests/test_chapters.py: the store answers every case the chapter reads)."""
    cases = ch07.runs(2)["cases"]
    moe = {key: megalab.run(cfg, "cached", quiet=True).status for key, cfg in cases["moe"].items()}
    assert {key for key, status in moe.items() if status == "ok"} == {"top5", "tp", "pp_mbs1"}
    assert {key for key, status in moe.items() if status == "oom"} == {
        "top1",
        "top2",
        "top3",
        "top4",
        "dp_experts",
    }
    long = {key: megalab.run(cfg, "cached", quiet=True) for key, cfg in cases["long_32k"].items()}
    assert {r.status for r in long.values()} == {"ok"} and {
        r.config.gpus for r in long.values()
    } == {2}


def test_four_gpu_outcomes_the_chapter_quotes():
    """On four H200s the dense case's TP pick and the long case's top2 and top5 ran out of memory,
    every other pick trained; whatever `gpus` the notebook runs at, it reads them under
    cases_by_gpus."""
    four = ch07.runs(2)["cases_by_gpus"][4]
    status = {
        (name, key): megalab.run(cfg, "cached", quiet=True).status
        for name, picked in four.items()
        for key, cfg in picked.items()
    }
    oom = {("dense_4k", "tp"), ("long_32k", "top2"), ("long_32k", "top5")}
    assert {k for k, v in status.items() if v != "ok"} == oom and {status[k] for k in oom} == {
        "oom"
    }
    assert four == ch07.runs(4)["cases"]
