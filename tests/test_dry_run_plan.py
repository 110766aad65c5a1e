"""tools/gpu/dry_run_plan.py reads a plan as pack.py does and checks each job on CPU; its parsing
and its TE rule are checked here (the dry runs themselves: tests/test_train_cpu.py)."""

import importlib.util
from pathlib import Path

from megalab.runs import presets

_spec = importlib.util.spec_from_file_location(
    "dry_run_plan", Path(__file__).parents[1] / "tools/gpu/dry_run_plan.py"
)
dry = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dry)


def test_a_fit_line_keeps_its_model(tmp_path):
    """fit's own --hi/--lo must not be read as an abbreviated --hidden (argparse's default
    allow_abbrev)."""
    plan = tmp_path / "plan.txt"
    plan.write_text(
        "# comment\nch03 fit --preset gpt-22b --gpus 4 --tp 4 --vary mbs --lo 5 --hi 9 --step "
        "1\nwait\n"
        "ch03! --preset gpt-1.2b --gpus 2 --tp 2 --sp\n"
    )
    jobs = list(dry._jobs(plan))
    assert [tag for tag, _ in jobs] == ["ch03", "ch03!"]
    assert jobs[0][1].hidden == presets.get("gpt-22b").hidden and jobs[0][1].tp == 4
    assert jobs[1][1].sp


def test_what_needs_transformer_engine_to_build():
    base = presets.get("gpt-1.2b")
    assert dry.needs_te(base.replace(gpus=2, tp=2)) is None
    assert dry.needs_te(base.replace(gpus=2, tp=2, sp=True)) == "sequence parallelism"
    assert dry.needs_te(base.replace(gpus=2, cp=2)) == "context parallelism"
    # experts build with the local spec
    assert dry.needs_te(presets.get("olmoe-like").replace(gpus=2, ep=2)) is None


def test_an_invalid_layout_fails_before_anything_starts():
    verdict, detail = dry.check(presets.get("gpt-1.2b").replace(gpus=3, tp=3), timeout=10)
    assert verdict == "FAILED" and detail.startswith("invalid: ")


def test_a_peer_job_is_checked_as_its_trainer_twin_without_a_checkout(monkeypatch):
    """A runner megatron-lm job has its pretrain_gpt.py flags mapped, then builds as the trainer's
    twin (the same model and shards), so the check needs no Megatron-LM checkout."""
    from megalab.jobs import peer

    built = []
    monkeypatch.setattr(dry, "needs_te", lambda cfg: built.append(cfg) or "stub")
    monkeypatch.setattr(dry.importlib.util, "find_spec", lambda name: None)
    cfg = peer.peer_config(presets.get("gpt-1.2b").replace(gpus=2, tp=2, mbs=8, gbs=8))
    verdict, _ = dry.check(cfg.replace(grad_accum_fusion="off"), timeout=10)
    assert verdict == "validated" and built[0].runner == "megalab"
    assert built[0].grad_accum_fusion == "off"
