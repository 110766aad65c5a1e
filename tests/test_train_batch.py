"""Process reuse on CPU (gloo, use_cpu_initialization): megalab.train.batch and train.teardown.

1. One 2-rank process builds the GPT model with TP 2, tears down, builds it again with TP 1 (DP 2):
   the second model has the shapes, parameter count and initial weights (Megatron's own init, from
   the seeds) of a fresh process building TP 1, and parallel_state reports the new layout.
2. Teardown leaves no Megatron state set (teardown.leftovers) and no process group but the world.
3. Training through the launcher (jobs.reuse), on CPU (test_train_cpu's harness): two layouts
   trained in one reused process give the loss and grad-norm curves of fresh processes, step for
   step, and the later one starts sooner; a run that fails between them is recorded as failed and
   the next one still runs, each in its own run folder. A worker that dies records the run it was
   in, and the runs it never reached go to a fresh launch.

This file is also the torchrun worker (see `__main__` below).
"""

import json
import os
import subprocess
import sys

from megalab.runs.config import RunConfig

TINY = RunConfig(name="tiny", layers=2, hidden=64, heads=4, vocab=1024, seq=32, impl="local", gbs=2)


def _torchrun(*args, timeout=300) -> list[dict]:
    """Each rank's lines, read from its own file ($BUILT_DIR): two ranks printing long lines to one
    stdout can interleave them."""
    import tempfile
    from pathlib import Path

    from megalab.jobs.launch import child_env

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    with tempfile.TemporaryDirectory() as where:
        env = {**child_env(), "BUILT_DIR": where}
        out = subprocess.run(
            [*cmd, __file__, *args], capture_output=True, text=True, env=env, timeout=timeout
        )
        assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
        lines = [line for f in sorted(Path(where).iterdir()) for line in f.read_text().splitlines()]
    return [json.loads(line) for line in lines]


def test_a_reused_process_builds_the_next_layout_as_a_fresh_one_does():
    reused = _torchrun("tp2", "tp1")
    fresh = _torchrun("tp1")
    by = lambda lines, tp: sorted((x for x in lines if x["built"] == tp), key=lambda x: x["rank"])  # noqa: E731
    assert [x["tp"] for x in by(reused, 2)] == [2, 2] and [x["dp"] for x in by(reused, 2)] == [1, 1]
    again, first = by(reused, 1), by(fresh, 1)
    assert [(x["tp"], x["dp"]) for x in again] == [(1, 2), (1, 2)]
    same = lambda xs: [{k: v for k, v in x.items() if k != "before"} for x in xs]  # noqa: E731
    assert same(again) == same(first)  # shapes, count, every parameter's sum and norm: bit for bit
    assert by(reused, 2)[0]["count"] < again[0]["count"]  # TP 2 held half the matrices
    assert all(x["leftovers"] == [] for x in reused + fresh)
    assert "process groups" in first[0]["before"]  # a run did set state up: the check has teeth
    assert "megatron.core.parallel_state._TENSOR_MODEL_PARALLEL_GROUP" in first[0]["before"]


def test_layouts_trained_in_one_reused_process_train_as_fresh_ones(tmp_path, monkeypatch):
    from test_train_cpu import LOOP, cpu_train

    from megalab.jobs import launch, reuse

    entry = reuse.batch_command
    monkeypatch.setattr(  # this file as the worker, CUDA calls sent to the CPU, "boom" failing
        reuse, "batch_command", lambda cfgs, f: [*entry(cfgs, f)[:5], __file__, "train", str(f)]
    )
    monkeypatch.setattr(launch, "check", lambda cfg, nproc=None: None)  # no GPU here
    # the last is test_train_cpu's pp2-vpp2 layout: its fresh run is trained once for both files
    cfgs = [
        LOOP.replace(gpus=2),
        LOOP.replace(gpus=2, name="boom"),
        LOOP.replace(gpus=2, pp=2, vpp=2),
    ]
    reused = reuse.launch_many(cfgs, runs_root=tmp_path, timeout_s=300)
    assert [o.status for o in reused] == ["ok", "failed", "ok"], [o.error for o in reused]
    assert "boom: a failure in the middle" in reused[1].error["message"]
    assert [o.reused for o in reused] == [{"position": i, "runs": 3} for i in range(3)]
    assert len({o.run_dir for o in reused}) == 3
    fresh = cpu_train(2, cfgs[2])  # the run after another layout and a failure: as if alone
    for key in ("loss", "grad_norm", "lr"):
        assert [s[key] for s in reused[2].parsed.steps] == [s[key] for s in fresh.steps]
    marks = [o.parsed.summary["startup_marks_s"] for o in reused[::2]]
    assert [m["batch_position"] for m in marks] == [0, 2] and marks[1]["python"] == 0.0
    assert marks[1]["first_step"] < marks[0]["first_step"]  # no interpreter, no imports


def test_a_worker_that_dies_records_its_run_and_the_rest_go_to_a_fresh_launch(
    tmp_path, monkeypatch
):
    from megalab.jobs import reuse

    entry = reuse.batch_command
    monkeypatch.setattr(  # this file as the worker: it dies in every run named "crash"
        reuse, "batch_command", lambda cfgs, f: [*entry(cfgs, f)[:5], __file__, "batch", str(f)]
    )
    cfgs = [TINY, TINY.replace(name="crash"), TINY.replace(layers=4)]  # one rank: cheaper launches
    outcomes = reuse.launch_many(cfgs, runs_root=tmp_path, dry_run=True, timeout_s=300)
    assert [o.status for o in outcomes] == ["ok", "failed", "ok"]
    assert "exited with code" in outcomes[1].error["message"]
    assert [o.reused for o in outcomes] == [
        {"position": 0, "runs": 3},
        {"position": 1, "runs": 3},
        {"position": 0, "runs": 1},  # the run the worker never reached, in a launch of its own
    ]


# -- the torchrun worker (test-only) --------------------------------------------------------------
def _build(tp: int) -> dict:
    """Set up TP tp (DP 2/tp) with Megatron's own init on CPU, as the dry run builds; this rank's
    parameters summarised."""
    import torch
    from megatron.core import parallel_state as ps

    from megalab.train import loop, wiring

    cfg = TINY.replace(gpus=2, tp=tp)
    parallel, config, *_ = wiring.megatron_configs(cfg, dry_run=True)
    config.perform_initialization = True  # Megatron's init, from the seeds set per run
    loop.initialize_distributed(cfg, parallel, dry_run=True)
    chunks = loop.build_chunks(cfg, config, dry_run=True)
    params = {n: p.detach().double() for c in chunks for n, p in c.named_parameters()}
    return {
        "built": tp,
        "rank": torch.distributed.get_rank(),
        "tp": ps.get_tensor_model_parallel_world_size(),
        "dp": ps.get_data_parallel_world_size(),
        "count": sum(p.numel() for p in params.values()),
        "params": {n: [list(p.shape), p.sum().item(), p.norm().item()] for n, p in params.items()},
    }


def _builds(tps: list[int]) -> None:
    from megalab.train.teardown import leftovers, teardown

    for tp in tps:
        built = _build(tp)
        before = leftovers()
        teardown()
        line = json.dumps({**built, "before": before, "leftovers": leftovers()})
        with open(os.path.join(os.environ["BUILT_DIR"], f"rank{built['rank']}.jsonl"), "a") as f:
            f.write(line + "\n")
    import torch

    torch.distributed.destroy_process_group()


def _failing_batch(path: str) -> None:
    from megalab.train import batch, loop

    build = loop.build_chunks  # "boom" raises, "crash" dies

    def build_chunks(cfg, config, dry_run):
        if cfg.name == "boom":
            raise RuntimeError("boom: a failure in the middle")
        if cfg.name == "crash":
            os._exit(3)
        return build(cfg, config, dry_run)

    loop.build_chunks = build_chunks
    batch.main([path])


if __name__ == "__main__":
    if sys.argv[1] == "batch":
        _failing_batch(sys.argv[2])
    elif sys.argv[1] == "train":
        from test_train_cpu import _send_cuda_to_cpu

        _send_cuda_to_cpu()
        _failing_batch(sys.argv[2])
    else:
        _builds([int(a.removeprefix("tp")) for a in sys.argv[1:]])
