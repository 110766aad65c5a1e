"""Chapter 04's runs: the store answers every one (the H100's 80 GB search included); the queued ones wait for cp > 1."""
import pytest

from megalab import chapters, recording, specs
from megalab.config import RunConfig
from megalab.specs import Fit


def _cfg(item) -> RunConfig:
    return item if isinstance(item, RunConfig) else item.cfg


def test_the_store_answers_every_run_on_both_cards():
    assert recording.plan("ch04", gpus=2, missing_only=True) == []
    assert recording.plan("ch04", gpus=2, gpu="H100", missing_only=True) == []


def test_the_80gb_search_is_recorded_and_belongs_to_the_h100_plan():
    fit = chapters.runs("ch04", 2)["fit_seq_80gb"]
    assert isinstance(fit, Fit) and fit.gpu == "H100" and fit.vary == "seq"
    assert fit.cfg == chapters.runs("ch04", 2, gpu="H100")["fit_seq"][1].cfg      # the same one-GPU search
    h100 = recording.plan("ch04", gpus=2, gpu="H100")
    assert len(h100) == 1 and " fit " in f" {h100[0]} " and not any(line in recording.plan("ch04", 2) for line in h100)
    assert recording.plan("ch04", gpus=2, gpu="H100", pending=True) == []


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_pending_waits_for_cp_above_one(gpus):
    recorded = {_cfg(i).key for i in specs.items(chapters.runs("ch04", gpus))}
    for item in specs.items(chapters.pending("ch04", gpus)):
        cfg = _cfg(item)
        cfg.validate()
        assert cfg.cp > 1 and cfg.gpus <= gpus and cfg.key not in recorded
