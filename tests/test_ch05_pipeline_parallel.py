"""Chapter 05's runs: the recorded ones keep their keys and are answered; the queued ones are legal and fit."""
import pytest

from megalab import chapters, recording, specs, theory
from megalab.config import RunConfig

RECORDED = {"4669ef6b6b069788", "db791470283c19f8", "8998cadd686e91fa",   # PP 4, PP 4 × VPP 2, TP 2 × PP 2 parity
            "013f07ee135a9a24",                                          # gpt-8.3b on one H200: out of memory
            "c944886bc6e91889", "bc35eb7827ea68e4", "3ca1b82d806882f5", "25958349d91d1d00"}  # PP 2's stage alone, m = 1..8


def _cfg(item) -> RunConfig:
    return item if isinstance(item, RunConfig) else item.cfg


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_runs_are_the_recorded_configs(gpus):
    assert {_cfg(i).key for i in specs.items(chapters.runs("ch05", gpus))} == RECORDED
    assert chapters.resolve("pipeline_parallel") == chapters.resolve("05") == "ch05"


def test_the_store_answers_every_run():
    assert recording.plan("ch05", gpus=2, missing_only=True) == []
    assert recording.plan("ch05", gpus=2, gpu="H100", missing_only=True) == []


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_pending_is_legal_scaled_and_fits(gpus):
    queued = chapters.pending("ch05", gpus)
    found = [_cfg(i) for i in specs.items(queued)]
    for cfg in found:
        cfg.validate()
        assert cfg.gpus <= gpus and theory.memory(cfg, "H200")["fits"]
        assert (cfg.layers // cfg.pp) % cfg.vpp == 0               # vpp: chunks that divide a stage's layers
        assert cfg.key not in RECORDED
    pipes = [p for p in specs.degrees(gpus) if p > 1]
    assert sorted(queued.get("bubble", {})) == pipes
    for p in pipes:   # the model needs the pipeline: one GPU is predicted out of memory, every PP p run fits
        big = queued["bubble"][p][-1]
        assert not theory.memory(big.replace(gpus=1, pp=1), "H200")["fits"]
        assert all(c.gbs == big.gbs for c in queued["bubble"][p]) and queued["bubble"][p][0].num_microbatches == 1
