"""Chapter 03's runs: the store answers every one it reads (fits settled, profiles kept), the queued ones
are legal, scale with the GPU count and are not among them."""
import pytest

from megalab import chapters, recording, specs
from megalab.config import RunConfig
from megalab.sweep import with_value


def _cfg(item) -> RunConfig:
    return item if isinstance(item, RunConfig) else item.cfg


def _keys(found) -> set:
    return {_cfg(i).key for i in specs.items(found)}


def test_the_store_answers_every_run():
    assert recording.plan("ch03", gpus=2, missing_only=True) == []
    assert recording.plan("ch03", gpus=2, gpu="H100", missing_only=True) == []


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_runs_do_not_change_with_the_gpu_count_and_pending_is_apart(gpus):
    """Only one-GPU runs and the recorded TP 2 + SP parity are read: 4 and 8 GPUs read the same ones."""
    assert _keys(chapters.runs("ch03", gpus)) == _keys(chapters.runs("ch03", 2)) or gpus == 1
    queued = chapters.pending("ch03", gpus)
    for item in specs.items(queued):
        _cfg(item).validate()
        assert _cfg(item).gpus <= gpus
    assert not _keys(queued) & _keys(chapters.runs("ch03", gpus))


def test_the_fit_without_recompute_is_settled_inside_its_window():
    """The module's search and the recorded probes agree: the largest probe that fits lies inside the
    window theory's prediction sets, and the next micro-batch is recorded out of memory."""
    fit = chapters.runs("ch03", 2)["fit_mbs_1gpu"]["none"]
    result = fit.run("cached", quiet=True)
    lo, hi = fit.window
    assert result.largest is not None and lo <= result.largest < hi
    probes = dict(result.probes)
    assert probes[result.largest].ok and probes[result.largest + 1].status == "oom"
    assert all(lo <= v <= hi for v in probes)
    assert probes[result.largest].config == with_value(fit.cfg, "mbs", result.largest)


def test_the_profiled_steps_keep_kernels_by_kind():
    for item in chapters.runs("ch03", 2)["profile_recompute_1gpu"]:
        profile = item.run("cached", quiet=True).record["profile"]
        assert set(profile["kernel_s_per_step"]) >= {"gemm", "attention", "other"}
        assert profile["timeline"]["kernels"]
