"""The trainer on CPU, as torchrun starts it.

1. `--dry-run` (what `megalab run --dry-run` uses): Megatron builds the model shards with gloo;
   parameters per rank must equal `theory.params_per_rank`.
2. The real training loop (DDP, distributed optimizer, 1F1B and interleaved schedules, MoE), run on
   CPU by a test-only harness that sends Megatron's hard-coded CUDA calls to the CPU (this file is
   also the torchrun worker: see `__main__` below). Layouts must give the same loss and grad norm
   step by step as one process: the layout-invariant init, the data order and the TP attributes
   that Megatron's grad norm relies on are all checked by that.
"""

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from megalab import metrics, theory
from megalab.runs.config import RunConfig
from megalab.runs.flags import config_to_args

# Small enough for 4 processes on 2 cores; vocab 1024 is a multiple of 128*tp for tp <= 8. Fused
# ops run eagerly: what is proved here does not depend on torch.compile, and inductor's C++ build
# cost a run up to 15 s on a cold cache (the wrapper that defers it is still called: imports.py).
TINY = RunConfig(
    name="tiny",
    layers=4,
    hidden=128,
    heads=4,
    vocab=1024,
    seq=64,
    impl="local",
    iters=1,
    compile=False,
)
# The trickier weight layouts: SwiGLU's [gate; up] fc1, grouped-query QKV, RMSNorm (no biases),
# rope.
LLAMA = TINY.replace(activation="swiglu", norm="RMSNorm", position="rope", query_groups=2)
LOOP = LLAMA.replace(hidden=64, seq=32, gbs=4, mbs=1, iters=3)
MOE = LOOP.replace(experts=4, topk=2, moe_dispatcher="allgather")  # gloo has no uneven all-to-all
# biases, GELU, LayerNorm, learned positions
GPT2 = TINY.replace(hidden=64, seq=32, gbs=2, mbs=1, iters=2)
TOL = dict(rel=2e-3)  # bf16 GEMMs split differently per layout; Adam amplifies it at high lr


def _torchrun(nproc: int, entry: list[str], cfg, timeout=300) -> str:
    from megalab.jobs.launch import child_env

    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        *entry,
        *config_to_args(cfg),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=timeout)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return out.stdout


# -- 1. dry run
# -------------------------------------------------------------------------------------
def test_dry_run_tp2_pp2_matches_theory(tmp_path):
    from megalab.jobs.launch import launch

    cfg = LLAMA.replace(gpus=4, tp=2, pp=2)
    outcome = launch(cfg, runs_root=tmp_path, progress=False, dry_run=True, timeout_s=300)
    assert outcome.status == "ok", (outcome.run_dir / "log.txt").read_text()[-4000:]
    rows = sorted(outcome.parsed.params, key=lambda r: r["rank"])
    assert [r["params"] for r in rows] == theory.params_per_rank(cfg)
    # tp-cp-ep-dp-pp
    assert [(r["tp_rank"], r["pp_rank"]) for r in rows] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    budget = outcome.parsed.budget
    assert budget["params_per_rank"] == theory.params_per_rank(cfg) and budget[
        "layout"
    ] == theory.layout(cfg)
    assert all(isinstance(r["init_checksum"], float) for r in rows)


def test_invalid_layout_is_one_json_line():
    from megalab.jobs.launch import child_env

    cmd = [
        sys.executable,
        "-m",
        "megalab.train",
        "--layers",
        "4",
        "--hidden",
        "128",
        "--heads",
        "3",
        "--impl",
        "local",
        "--dry-run",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=120)
    assert out.returncode == 2
    err = json.loads(out.stdout.strip().splitlines()[-1])
    assert err["kind"] == "error" and err["status"] == "invalid" and "heads" in err["message"]
    assert "InvalidLayout" in out.stderr  # what metrics.classify_failure looks for


# -- 2. the training loop
# ---------------------------------------------------------------------------
# (nproc, the configuration) -> the Parsed log of its fresh run: a run compared against in two
# tests (here, and test_train_batch's reused process) is trained once
_TRAINED: dict[tuple, metrics.Parsed] = {}


def cpu_train(nproc: int, cfg) -> metrics.Parsed:
    """The trainer's log of `cfg` trained from a fresh torchrun of `nproc` CPU ranks (once per
    session: do not modify what it returns)."""
    key = (nproc, cfg.to_json())
    if key not in _TRAINED:
        _TRAINED[key] = _fresh_train(nproc, cfg)
    return _TRAINED[key]


def cpu_train_side_by_side(*runs: tuple[int, RunConfig]) -> list[metrics.Parsed]:
    """cpu_train of each (nproc, cfg), all at once: a one-rank run is mostly its interpreter's
    imports, one core's work, so two of them share the CI's two cores."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(runs)) as pool:
        return list(pool.map(lambda run: cpu_train(*run), runs))


def _fresh_train(nproc: int, cfg) -> metrics.Parsed:
    # what the trainer writes (routing.json), not the cwd
    run_dir = tempfile.mkdtemp(prefix="megalab-cpu-train-")
    parsed = metrics.parse_log(_torchrun(nproc, [__file__, "--run-dir", run_dir], cfg))
    assert len(parsed.steps) == cfg.iters and parsed.summary["steps"] == cfg.iters
    assert parsed.budget["params_per_rank"] == theory.params_per_rank(cfg)
    # every MoE layer routed each step's tokens topk times, summed over the data-parallel ranks
    if cfg.experts:
        with open(os.path.join(run_dir, "routing.json")) as f:
            counts = json.load(f)["tokens_per_expert"]
        # the steps timings keep
        kept = len(metrics.after_warmup(list(range(cfg.iters)), step_of=lambda i: i)[0])
        assert [sum(layer) for layer in counts] == [
            cfg.gbs * cfg.seq * cfg.topk * kept
        ] * cfg.layers
    shutil.rmtree(run_dir)
    return parsed


def curve(parsed, key):
    return [s[key] for s in parsed.steps]


@pytest.fixture(scope="module")
def one_gpu():
    llama, moe = cpu_train_side_by_side((1, LOOP.replace(gpus=1)), (1, MOE.replace(gpus=1)))
    return {"llama": llama, "moe": moe}


@pytest.mark.parametrize(
    "model,layout",
    [
        ("llama", dict(gpus=2, tp=2)),
        ("llama", dict(gpus=2, pp=2, vpp=2)),
        ("moe", dict(gpus=2, ep=2, dist_opt=True, overlap=True)),  # ep carved out of dp=2
    ],
    ids=["tp2", "pp2-vpp2", "ep2-dp2-distopt-overlap"],
)
def test_layouts_train_like_one_gpu(model, layout, one_gpu):
    cfg = (LOOP if model == "llama" else MOE).replace(**layout)
    run, ref = cpu_train(cfg.gpus, cfg), one_gpu[model]
    assert curve(run, "loss") == pytest.approx(curve(ref, "loss"), **TOL)
    assert curve(run, "grad_norm") == pytest.approx(curve(ref, "grad_norm"), **TOL)
    assert curve(run, "lr") == pytest.approx(curve(ref, "lr"))
    step = run.steps[-1]
    assert step["step_time_s"] > 0 and step["tokens_per_s"] == pytest.approx(
        cfg.gbs * cfg.seq / step["step_time_s"]
    )
    assert len(run.summary["mem_allocated_peak_gib_per_rank"]) == cfg.gpus


def test_mlp_recompute_of_a_model_with_biases_trains_like_no_recompute():
    """megatron-core 0.16.1's MLP returns its fc2 bias parameter: under recompute_modules=mlp the
    backward re-entered its own checkpoint without end (workarounds.copy_mlp_bias_under_recompute);
    now the same steps."""
    ref, run = cpu_train_side_by_side(
        (1, GPT2), (1, GPT2.replace(recompute="selective", recompute_modules="mlp"))
    )
    assert curve(run, "loss") == pytest.approx(curve(ref, "loss"), rel=1e-6)
    assert curve(run, "grad_norm") == pytest.approx(curve(ref, "grad_norm"), rel=1e-6)


def test_first_loss_is_ln_vocab(one_gpu):
    # the N(0, 0.02) init predicts (almost) uniformly over the 1024 tokens
    assert curve(one_gpu["llama"], "loss")[0] == pytest.approx(6.931, abs=0.05)


# -- the CPU harness (test-only)
# --------------------------------------------------------------------
def _send_cuda_to_cpu() -> None:
    """Patch torch and Megatron so the trainer's GPU path runs on CPU with gloo. Not for real
    runs."""
    from megalab.train import imports

    imports.load_less()  # before Megatron's import below, as the trainer does (no torch._dynamo)
    import torch
    import torch.distributed as dist

    def cpu(d):
        return "cpu" if d is not None and (isinstance(d, int) or str(d).startswith("cuda")) else d

    def fix(kw):
        if "device" in kw:
            kw["device"] = cpu(kw["device"])
        return kw

    for name in (
        "zeros",
        "ones",
        "empty",
        "tensor",
        "full",
        "arange",
        "zeros_like",
        "empty_like",
        "ones_like",
        "randn",
        "rand",
        "randint",
        "as_tensor",
    ):
        f = getattr(torch, name)
        setattr(torch, name, functools.wraps(f)(lambda *a, _f=f, **kw: _f(*a, **fix(kw))))
    gen = torch.Generator

    class Generator(gen):
        def __new__(cls, device="cpu"):
            return gen(device=cpu(device))

    class Event:
        def __init__(self, *a, **k):
            pass

        def record(self, *a, **k):
            pass

        def synchronize(self):
            pass

        def wait(self, *a, **k):
            pass

        def query(self):
            return True

    class Stream:
        def __init__(self, *a, **k):
            pass

        def wait_stream(self, *a):
            pass

        def synchronize(self):
            pass

        def record_event(self, *a, **k):
            return Event()

    to, ttype = torch.Tensor.to, torch.Tensor.type
    torch.Generator = Generator
    torch.Tensor.to = lambda self, *a, **k: to(
        self, *(cpu(x) if isinstance(x, (str, torch.device)) else x for x in a), **fix(k)
    )
    # Megatron's mixed-precision optimizer insists on torch.cuda.* tensor types
    torch.Tensor.type = lambda self, *a, **k: (
        ttype(self).replace("torch.", "torch.cuda.", 1) if not a and not k else ttype(self, *a, **k)
    )
    torch.Tensor.cuda = torch.Tensor.pin_memory = torch.nn.Module.cuda = lambda self, *a, **k: self
    c = torch.cuda
    c.current_device, c.set_device, c.synchronize = (
        (lambda: "cpu"),
        (lambda *a, **k: None),
        (lambda *a, **k: None),
    )
    c.max_memory_allocated, c.max_memory_reserved = (lambda *a, **k: 2**30), (lambda *a, **k: 2**31)
    c.get_device_name = lambda *a, **k: "NVIDIA H100 80GB HBM3"
    c.Stream, c.Event, c.current_stream, c.stream = (
        Stream,
        Event,
        (lambda *a, **k: Stream()),
        (lambda *a, **k: contextlib.nullcontext()),
    )
    c.get_rng_state, c.set_rng_state = (
        (lambda *a, **k: torch.get_rng_state()),
        (lambda *a, **k: None),
    )
    init = dist.init_process_group
    dist.init_process_group = lambda backend=None, **kw: init("gloo", **kw)

    import megatron.core.pipeline_parallel.schedules as schedules
    import megatron.core.tensor_parallel as tp
    import megatron.core.transformer.moe.moe_utils as moe_utils
    from megatron.core.tensor_parallel import random as rng

    rng.CudaRNGStatesTracker.fork = lambda self, *a, **k: contextlib.nullcontext()
    rng.CudaRNGStatesTracker.get_states = lambda self: {}
    rng.CudaRNGStatesTracker.set_states = lambda self, states: None
    rng._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    rng._set_cuda_rng_state = lambda *a, **k: None
    tp.model_parallel_cuda_manual_seed = rng.model_parallel_cuda_manual_seed = lambda *a, **k: None
    moe_utils.te_general_gemm = None  # MC 0.16.1 names it even without TE
    # gloo sends read CPU memory from a background thread: keep freed pipeline outputs alive (with
    # NCCL, the stream-ordered allocator makes Megatron's early free safe)
    keep, deallocate = [], schedules.deallocate_output_tensor

    def deallocate_later(out, deallocate_pipeline_outputs=False):
        if out is not None:
            keep.append(out.data)
        deallocate(out, deallocate_pipeline_outputs)

    schedules.deallocate_output_tensor = deallocate_later


# torchrun worker: python -m torch.distributed.run ... test_train_cpu.py FLAGS
if __name__ == "__main__":
    _send_cuda_to_cpu()
    from megalab.train import loop

    loop.main(sys.argv[1:])
