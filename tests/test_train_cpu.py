"""The trainer on CPU: `--dry-run` builds Megatron's model shards with gloo, as the launcher starts it.

Each run checks two things against the tensor-parallel-free, pipeline-free model:
- parameters per rank equal `theory.params_per_rank` (what Megatron Core actually allocates);
- the layout-invariant init: the per-rank checksums (each unique weight summed once) add up to the
  same total in every layout, so global layer numbers, expert numbers and shard slices are right.
"""

import json

import pytest

from megalab import theory
from megalab.config import RunConfig
from megalab.launch import launch

# Small enough for 4 processes on 2 cores; vocab 1024 is a multiple of 128*tp for tp <= 8.
TINY = RunConfig(name="tiny", layers=4, hidden=128, heads=4, vocab=1024, seq=64, impl="local", iters=1)
# The trickier weight layouts: SwiGLU's [gate; up] fc1, grouped-query QKV, RMSNorm, no biases.
LLAMA = TINY.replace(activation="swiglu", norm="RMSNorm", position="rope", query_groups=2)
MOE = TINY.replace(experts=4, topk=2)


def dry_run(cfg, tmp_path) -> list[dict]:
    outcome = launch(cfg, runs_root=tmp_path, progress=False, dry_run=True, timeout_s=300)
    log = (outcome.run_dir / "log.txt").read_text()
    assert outcome.status == "ok", log[-3000:]
    rows = [json.loads(line[line.index("{"):]) for line in log.splitlines() if '"kind": "params"' in line]
    return sorted(rows, key=lambda r: r["rank"])


def checksum(rows) -> float:
    return sum(r["init_checksum"] for r in rows)


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    """The reference layout for the others: tensor parallel only."""
    cfg = LLAMA.replace(gpus=2, tp=2)
    return cfg, dry_run(cfg, tmp_path_factory.mktemp("tp2"))


def test_tensor_parallel(tp2):
    cfg, rows = tp2
    assert [r["params"] for r in rows] == theory.params_per_rank(cfg)
    assert [r["tp_rank"] for r in rows] == [0, 1]


@pytest.mark.parametrize("layout", [dict(gpus=2, pp=2, vpp=2, gbs=2), dict(gpus=4, tp=2, pp=2)],
                         ids=["pp2-vpp2", "tp2-pp2"])
def test_pipeline_layouts_match_theory_and_init(layout, tmp_path, tp2):
    cfg = LLAMA.replace(**layout)
    rows = dry_run(cfg, tmp_path)
    assert [r["params"] for r in rows] == theory.params_per_rank(cfg)
    assert [(r["tp_rank"], r["pp_rank"]) for r in rows] == [  # Megatron's rank order tp-cp-ep-dp-pp
        (r % cfg.tp, r // (cfg.gpus // cfg.pp)) for r in range(cfg.gpus)]
    assert checksum(rows) == pytest.approx(checksum(tp2[1]), rel=1e-9, abs=1e-9)


def test_expert_parallel(tmp_path):
    cfg = MOE.replace(gpus=2, ep=2, gbs=2)
    rows = dry_run(cfg, tmp_path)
    assert [r["params"] for r in rows] == theory.params_per_rank(cfg)
    assert [r["ep_rank"] for r in rows] == [0, 1]
    one_gpu = dry_run(MOE.replace(gpus=1), tmp_path)
    assert checksum(rows) == pytest.approx(checksum(one_gpu), rel=1e-9, abs=1e-9)


def test_invalid_layout_is_one_json_line(tmp_path):
    import subprocess
    import sys

    from megalab.launch import child_env
    cmd = [sys.executable, "-m", "megalab.train", "--layers", "4", "--hidden", "128", "--heads", "3",
           "--impl", "local", "--dry-run"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=120)
    assert out.returncode == 2
    err = json.loads(out.stdout.strip().splitlines()[-1])
    assert err["kind"] == "error" and err["status"] == "invalid" and "heads" in err["message"]
