"""The peer: Megatron-LM's own `pretrain_gpt.py`, given the same RunConfig as megalab's trainer.

    megalab peer --preset gpt-1.2b --mbs 8 --gbs 8      # a run with runner="megatron-lm"

A peer run is an ordinary megalab run whose config says runner="megatron-lm" (and init="megatron":
the peer cannot make megalab's layout-invariant init). The launcher starts pretrain_gpt.py under
torchrun with `args(cfg)`, this module reads its log back into the step lines megalab's trainer
prints (`parse_log`), and the store keeps the record beside the trainer's, tagged "peer". The
comparison is fair by construction: the same model, layout, batch, optimizer and schedule, the
same fusions where Megatron-LM has a flag for them, speed counted with megalab's own FLOP formula.
One fusion differs unless the config says otherwise: at grad_accum_fusion auto the trainer
accumulates weight gradients inside TE's GEMMs and the peer runs --no-gradient-accumulation-fusion
(its output layer needs Apex for the fusion); grad_accum_fusion off (or on, where Apex is installed)
makes both sides the same, as the performance page's pair perf.peer does. `sides(cfg)` is the
table of what is the same on both sides of a pair and what is not, read from this module's flags
and the trainer's wiring.

Megatron-LM is found at --megatron-lm PATH, else $MEGATRON_LM, else .peer/Megatron-LM in the
checkout (git clone --depth 1 --branch core_v0.16.1 https://github.com/NVIDIA/Megatron-LM
.peer/Megatron-LM).
"""

from __future__ import annotations

import math
import os
import re
from datetime import datetime
from pathlib import Path

from megalab import metrics, theory
from megalab.runs.axes import lm_flags
from megalab.runs.config import hierarchical_cp, trainer_config  # noqa: F401  (trainer_config: handed on)
from megalab.train import wiring

RELEASE = "core_v0.16.1"  # the Megatron-LM tag of the pinned megatron-core
CLONE = (
    f"git clone --depth 1 --branch {RELEASE} https://github.com/NVIDIA/Megatron-LM "
    f".peer/Megatron-LM"
)


class PeerNotFound(FileNotFoundError):
    """No Megatron-LM checkout holding pretrain_gpt.py; the message says how to get one."""


def peer_config(cfg):
    """The peer's twin of a trainer config: same everything, run by Megatron-LM with its own
    init."""
    return cfg.replace(runner="megatron-lm", init="megatron")


def source_dir(path: str | os.PathLike | None = None) -> Path:
    """The Megatron-LM checkout: `path`, else $MEGATRON_LM, else .peer/Megatron-LM in the
    checkout."""
    from megalab.machine.env import repo_root

    where = (
        path
        or os.environ.get("MEGATRON_LM")
        or (repo_root() or Path.cwd()) / ".peer" / "Megatron-LM"
    )
    where = Path(where).expanduser()
    if not (where / "pretrain_gpt.py").is_file():
        raise PeerNotFound(
            f"no Megatron-LM at {where} (pretrain_gpt.py missing): {CLONE}, "
            f"or pass --megatron-lm PATH / set MEGATRON_LM"
        )
    return where


def release(path: Path) -> str:
    """What the checkout says it is: its VERSION file (written by tools/gpu/peer.sh) or
    'unknown'."""
    version = path / "VERSION"
    return version.read_text().strip() if version.is_file() else "unknown"


# -- RunConfig -> pretrain_gpt.py flags
# -------------------------------------------------------------
def args(cfg) -> list[str]:
    """pretrain_gpt.py's flags for this config: the one place Megatron-LM's argument names appear.

    Mirrors megalab.train.wiring.megatron_configs (model, layout, precision, optimizer and
    schedule), with mock data (or cfg.data) through Megatron's NullTokenizer: its vocabulary is
    --vocab-size + 1 (the end-of-document id), padded to a multiple of make_vocab_size_divisible_by
    * tp, which is chosen so that nothing is padded and both trainers build the same embedding.
    """
    te, moe, bias = cfg.impl == "te", cfg.experts > 0, theory.has_bias(cfg)
    warmup = cfg.lr_warmup_steps
    out = [
        # model
        "--num-layers",
        cfg.layers,
        "--hidden-size",
        cfg.hidden,
        "--num-attention-heads",
        cfg.heads,
        "--ffn-hidden-size",
        cfg.ffn_size,
        "--seq-length",
        cfg.seq,
        "--max-position-embeddings",
        cfg.seq,
        "--normalization",
        cfg.norm,
        "--init-method-std",
        0.02,
        "--hidden-dropout",
        cfg.dropout,
        "--attention-dropout",
        cfg.dropout,
        "--position-embedding-type",
        "rope" if cfg.position == "rope" else "learned_absolute",
        "--vocab-size",
        cfg.vocab - 1,
        "--make-vocab-size-divisible-by",
        math.gcd(cfg.vocab // cfg.tp, 128),
        # layout
        *lm_flags(cfg, after={"cp": ["--cp-comm-type", cfg.cp_comm]}),  # runs.axes, in its order
        # batch, precision, implementation
        "--micro-batch-size",
        cfg.mbs,
        "--global-batch-size",
        cfg.gbs,
        "--bf16",
        "--transformer-impl",
        "transformer_engine" if te else "local",
        # Megatron's own linears (the output layer) fuse only with Apex (wiring.with_wgrad_fusion):
        # auto and off run unfused, on needs Apex where pretrain_gpt.py runs
        *(["--no-gradient-accumulation-fusion"] if cfg.grad_accum_fusion != "on" else []),
        # optimizer and schedule (megalab.train.wiring.build_training)
        "--optimizer",
        "adam",
        "--lr",
        cfg.lr,
        "--min-lr",
        cfg.lr / 10,
        "--weight-decay",
        0.1,
        "--adam-beta1",
        0.9,
        "--adam-beta2",
        0.95,
        "--adam-eps",
        1e-8,
        "--clip-grad",
        1.0,
        "--lr-decay-style",
        "cosine",
        "--lr-warmup-iters",
        warmup,
        "--lr-decay-iters",
        cfg.iters,
        # run: every step logged with its throughput, no evaluation, no checkpoint
        "--train-iters",
        cfg.iters,
        "--seed",
        cfg.seed,
        "--log-interval",
        1,
        "--log-throughput",
        "--eval-iters",
        0,
        "--eval-interval",
        cfg.iters + 1,
        "--tokenizer-type",
        "NullTokenizer",
    ]
    switches = [
        (not bias, "--disable-bias-linear"),
        (cfg.activation == "swiglu", "--swiglu"),
        (not cfg.tied_embeddings, "--untie-embeddings-and-output-weights"),
        (cfg.position == "rope" and not te, "--no-rope-fusion"),
        (te, "--cross-entropy-loss-fusion"),
        (cfg.sp, "--sequence-parallel"),
        (cfg.dist_opt, "--use-distributed-optimizer"),
        (cfg.overlap, "--overlap-grad-reduce"),
        (cfg.overlap and cfg.dist_opt, "--overlap-param-gather"),
    ]
    out += [flag for on, flag in switches if on]
    if te:
        out += ["--cross-entropy-fusion-impl", "te"]
    if cfg.query_groups and cfg.query_groups != cfg.heads:
        out += ["--group-query-attention", "--num-query-groups", cfg.query_groups]
    if hierarchical_cp(cfg) and cfg.cp > 1:
        out += ["--hierarchical-context-parallel-sizes", *hierarchical_cp(cfg)]
    if moe:
        out += [
            "--num-experts",
            cfg.experts,
            "--moe-router-topk",
            cfg.topk,
            "--moe-ffn-hidden-size",
            cfg.moe_ffn_size,
            "--moe-token-dispatcher-type",
            cfg.moe_dispatcher,
            "--moe-router-load-balancing-type",
            "none" if cfg.moe_balance == "none" else "aux_loss",
        ]
        out += ["--moe-aux-loss-coeff", cfg.moe_aux_coeff] if cfg.moe_balance != "none" else []
        out += ["--moe-router-dtype", "fp32"] if cfg.moe_router_fp32 else []
        out += ["--moe-router-force-load-balancing"] if cfg.moe_balance == "force" else []
        out += ["--moe-grouped-gemm", "--moe-permute-fusion", "--moe-router-fusion"] if te else []
        out += ["--moe-router-pre-softmax"] if cfg.topk == 1 else []
    if cfg.recompute == "selective":
        out += [
            "--recompute-granularity",
            "selective",
            "--recompute-modules",
            *cfg.recompute_module_names,
        ]
    elif cfg.recompute == "full":
        out += [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            1,
        ]
    if cfg.cuda_graphs != "none":  # pretrain_gpt.py turns TE's RNG tracker on itself (arguments.py)
        out += [
            "--cuda-graph-impl",
            {"local": "local", "te": "transformer_engine"}[cfg.cuda_graphs],
            "--cuda-graph-warmup-steps",
            wiring.GRAPH_WARMUP_STEPS,
        ]
        out += ["--cuda-graph-scope", "attn", "moe_router", "moe_preprocess"] if moe else []
    if cfg.fp8:
        out += [
            "--fp8-format",
            "hybrid",
            "--fp8-recipe",
            "delayed",
            "--fp8-amax-history-len",
            1024,
            "--fp8-amax-compute-algo",
            "max",
        ]
    out += ["--data-path", cfg.data, "--split", "100,0,0"] if cfg.data else ["--mock-data"]
    return [str(a) for a in out]


PEER_TRACE = "peer_trace"  # the folder of the peer's torch.profiler trace, inside the run folder


def profile_args(run_dir) -> list[str]:
    """pretrain_gpt.py's flags for megalab's --profile: torch.profiler on rank 0 over the trainer's
    windows (ProfilerStep#5-7, megalab.train.probes.PROFILE_STEPS), its trace written under
    run_dir/peer_trace. Megatron-LM steps its profiler before each iteration and the trainer after,
    so the peer's windows hold iterations 4-6 where the trainer's hold steps 5-7: both past
    warm-up."""
    from megalab.train.probes import PROFILE_STEPS

    first, end = PROFILE_STEPS
    return [
        "--profile",
        "--use-pytorch-profiler",
        "--profile-step-start",
        str(first),
        "--profile-step-end",
        str(end),
        "--profile-ranks",
        "0",
        "--tensorboard-dir",
        str(Path(run_dir) / PEER_TRACE),
    ]


def write_profile(run_dir) -> bool:
    """profile.json from the peer's trace, as the trainer writes its own
    (megalab.train.probes.profile_of): kernel seconds per step by category and the last window's
    kernel timeline, which the record keeps. The raw trace is removed (hundreds of MB with
    Megatron-LM's stacks and shapes). False when there is no trace, or none that reads (a run killed
    while writing it): the run's record then has no profile."""
    import json
    import shutil
    from megalab.train.probes import profile_of

    traces = sorted((Path(run_dir) / PEER_TRACE).glob("*.pt.trace.json"))
    if not traces:
        return False
    try:
        out = profile_of(json.loads(traces[-1].read_text()))
    except ValueError:  # cut-off JSON, or a trace without the profiled windows
        return False
    (Path(run_dir) / "profile.json").write_text(json.dumps(out))
    shutil.rmtree(Path(run_dir) / PEER_TRACE, ignore_errors=True)
    return True


def environment(cfg) -> dict:
    """The trainer's own run environment (megalab.train.wiring.environment): one hardware queue with
    TP or CP, which pretrain_gpt.py asserts, and the same grouped-GEMM kernel for TE's experts."""
    return wiring.environment(cfg)


# -- its log -> megalab's step lines
# -------------------------------------------------------------------
_ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|(.*)$")
_FIELD = re.compile(r"\s*([^:|]+?):\s*([-+0-9.eEinfaINF]+)\s*\|")
_MEMORY = re.compile(
    r"\[Rank (\d+)\] \(after \d+ iterations\) memory \(MB\) \| allocated: ([\d.]+) \| "
    r"max allocated: ([\d.]+) \| reserved: ([\d.]+) \| max reserved: ([\d.]+)"
)
_PADDED = re.compile(r"> padded vocab \(size: (\d+)\) with (\d+) dummy tokens \(new size: (\d+)\)")
# Megatron-LM's local wall clock
_STAMP = re.compile(r"^\s*\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\]")
MIB_PER_GIB = 1024.0


def parse_log(
    text: str, cfg, peak_tflops: float | None = None, launched_at: float | None = None
) -> metrics.Parsed:
    """pretrain_gpt.py's per-iteration lines as megalab step lines (step numbers from 0, as the
    trainer's).

    Step time is Megatron's "elapsed time per iteration (ms)"; tokens/s, TFLOP/s and MFU are
    computed from it with megalab's formula (theory.flops_per_step: no recomputation counted), not
    read from the peer's own TFLOP/s, whose formula differs. Peak memory is the largest rank's
    report after the first iteration (Megatron prints it once, from data-parallel rank 0 of each
    model-parallel rank). With `launched_at` (the launcher's time.time() at launch, on the same
    host), the summary's startup_s is the time from launch to the first iteration's line, stamped by
    Megatron-LM when that step ended: the trainer's launch-to-first-step.
    """
    out, mem = metrics.Parsed(), {}
    for line in text.splitlines():
        if m := _MEMORY.search(line):
            mem[int(m.group(1))] = (
                float(m.group(3)) / MIB_PER_GIB,
                float(m.group(5)) / MIB_PER_GIB,
            )
        if m := _PADDED.search(line):
            out.budget = {
                "kind": "budget",
                "peer_vocab": int(m.group(3)),
                "peer_vocab_padding": int(m.group(2)),
            }
        m = _ITERATION.search(line)
        if not m:
            continue
        fields = {k.strip(): float(v) for k, v in _FIELD.findall(m.group(3) + "|")}
        ms = fields.get("elapsed time per iteration (ms)")
        if ms is None or ms <= 0:
            continue
        if launched_at is not None and not out.steps and (stamp := _STAMP.match(line)):
            # local, as it printed
            ended = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
            out.summary = {"kind": "summary", "startup_s": round(ended - launched_at, 2)}
        step_s = ms / 1e3
        tflops = theory.tflops_per_gpu(cfg, step_s)
        out.steps.append(
            {
                "kind": "step",
                "step": int(m.group(1)) - 1,
                "loss": fields.get("lm loss"),
                "step_time_s": step_s,
                "tokens_per_s": cfg.gbs * cfg.seq / step_s,
                "tflops_per_gpu": tflops,
                "mfu": tflops / peak_tflops if peak_tflops else None,
                "peer_tflops_per_gpu": fields.get("throughput per GPU (TFLOP/s/GPU)"),
                "grad_norm": fields.get("grad norm"),
                "lr": fields.get("learning rate"),
            }
        )
    if mem and out.steps:  # the peak memory over ranks, on the step Megatron reported it after
        out.steps[0]["mem_allocated_peak_gib"] = max(a for a, _ in mem.values())
        out.steps[0]["mem_reserved_peak_gib"] = max(r for _, r in mem.values())
    return out


# what a pair shares (the performance page's table): megalab.jobs.peer_sides
from megalab.jobs.peer_sides import (  # noqa: E402, F401
    MOCK_MAX_LENGTH,
    fusion_equal,
    mock_unigram_nats,
    sides,
)
