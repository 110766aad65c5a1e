"""Which layouts Megatron Core 0.16.1 (and Transformer Engine 2.x) refuse at start-up, and why.

`problems(cfg)` checks every rule and returns every problem, one line each, saying what to change;
`RunConfig.validate()` raises `InvalidLayout` with them. Each rule cites the Megatron function that
refuses it (MC = megatron/core). Rules are only those reachable from RunConfig's fields.
"""

from __future__ import annotations

import dataclasses
import math
import re

from megalab.runs.axes import SIZES

# a run's name goes into its folder (runs/<label>-<time>), an sbatch job name and the records
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# the run folder, runs/<label>-<time>, must stay under the 255 bytes a file name can take
MAX_NAME = 64
SEEDS = 2**32  # torch, numpy and Python's random all take a seed in [0, 2**32)

# MC transformer_config.__post_init__'s allowed recompute_modules (less the MLA and shared-expert
# ones)
RECOMPUTE_MODULES = ("core_attn", "mlp", "layernorm", "moe_act", "moe")
# GPUs with FP8 tensor cores (compute capability 8.9+): Ada, Hopper, Blackwell
_FP8_GPUS = re.compile(
    r"\bG?H\d{2,3}\b|\bG?B\d{3}\b|\bL40S?\b|\bL4\b|RTX [45]0\d0|Ada|Hopper|Blackwell"
)


def _divisors(n: int, most: int = 64) -> str:
    """Divisors of n up to `most` (parallel sizes beyond that are not useful advice)."""
    return ", ".join(str(d) for d in range(1, min(n, most) + 1) if n % d == 0)


def name_problem(name) -> str | None:
    """Why `name` cannot name a run (it goes into a folder name and a script), or None when it
    can."""
    if isinstance(name, str) and len(name) > MAX_NAME:
        return (
            f"name={name[:20]!r}... ({len(name)} characters) cannot name a run folder: use "
            f"{MAX_NAME} at most"
        )
    if isinstance(name, str) and _SAFE_NAME.fullmatch(name) and ".." not in name:
        return None
    return (
        f"name={name!r} cannot name a run folder: use letters, digits and . _ - only "
        f"(starting with a letter or digit, no '..')"
    )


def hierarchical_cp(cfg) -> tuple[int, int] | None:
    """For cp_comm='a2a+p2p': (a2a size, p2p size) to pass as
    hierarchical_context_parallel_sizes."""
    return (2, cfg.cp // 2) if cfg.cp_comm == "a2a+p2p" else None


def problems(cfg, gpus_available=None, te_available=None, gpu_name=None) -> list[str]:
    """Every reason the run cannot start, one line each, saying what to change.

    Planning (te_available=None, gpu_name=None, gpus_available=None) skips installation and
    hardware checks; the launcher passes what it found.
    """
    c, out = cfg, []
    add = out.append
    for f in dataclasses.fields(c):
        ch = f.metadata["choices"]
        if ch and getattr(c, f.name) not in ch:
            add(f"{f.name}={getattr(c, f.name)!r} is not supported: pick one of {', '.join(ch)}")
    for n in (
        "layers",
        "hidden",
        "heads",
        "vocab",
        "seq",
        "gpus",
        *SIZES,
        "mbs",
        "gbs",
        "topk",
        "iters",
    ):
        if getattr(c, n) < 1:
            add(f"{n}={getattr(c, n)} must be at least 1")
    for n in ("query_groups", "ffn", "moe_ffn"):
        if getattr(c, n) is not None and getattr(c, n) < 1:
            add(f"{n}={getattr(c, n)} must be at least 1 (or None for the default)")
    if name_problem(c.name):
        add(name_problem(c.name))
    if c.experts < 0:
        add(f"experts={c.experts} must be 0 (dense) or more")
    if not 0 <= c.seed < SEEDS:
        add(f"seed={c.seed} must be a whole number from 0 to {SEEDS - 1}")
    if not 0.0 <= c.dropout < 1.0:
        add(f"dropout={c.dropout} must be in [0, 1)")
    if not (math.isfinite(c.lr) and c.lr > 0):
        add(f"lr={c.lr} must be a positive, finite learning rate (e.g. 3e-4)")
    # what pretrain_gpt.py cannot be told (megalab.jobs.peer maps the rest)
    if c.runner == "megatron-lm":
        if c.init != "megatron":
            add("the peer initialises weights its own way: set init='megatron' (megalab peer does)")
        if not c.compile:
            add(
                "the peer always compiles its fused ops (Megatron-LM has no flag for eager): drop "
                "--no-compile"
            )
        if c.stop_when_tight:
            add("the peer trains every one of --iters steps: drop --stop-when-tight")
    if out:
        # the arithmetic below needs valid sizes
        return out + _machine(c, gpus_available, te_available)
    te = c.impl == "te"
    # MC parallel_state.initialize_model_parallel: world % (tp*pp*cp) == 0
    mp = c.tp * c.pp * c.cp
    if c.gpus % mp:
        add(
            f"gpus={c.gpus} is not divisible by tp*pp*cp={mp}: use gpus = {mp}*dp (e.g. {mp} or "
            f"{2 * mp})"
        )
    # ... and world % (etp*ep*pp) == 0 (expert data-parallel size), checked even for dense models
    emp = c.etp * c.ep * c.pp
    if c.gpus % emp:
        add(
            f"gpus={c.gpus} is not divisible by etp*ep*pp={emp}: the expert groups must tile the "
            f"GPUs; "
            f"use gpus a multiple of {emp} or lower ep/etp"
        )
    # MC tensor_parallel.layers.VocabParallelEmbedding: the vocabulary splits evenly over tp
    # (megalab does not pad it per tp, so that every layout trains the same model:
    # megalab.train.weights, layout-invariant init)
    if c.vocab % c.tp:
        add(
            f"vocab={c.vocab} is not divisible by tp={c.tp}: use a vocab that is a multiple of "
            f"128*tp "
            f"(e.g. {c.padded_vocab})"
        )
    # MC transformer_config.TransformerConfig.__post_init__: heads % tp; groups multiple or divisor
    # of tp
    if c.heads % c.tp:
        add(f"tp={c.tp} does not divide heads={c.heads}: pick tp from {_divisors(c.heads)}")
    g = c.groups
    if g != c.heads and g % c.tp and c.tp % g:
        add(
            f"tp={c.tp} must divide or be a multiple of query_groups={g}: pick tp from "
            f"{_divisors(g)} "
            f"or a multiple of {g}"
        )
    # MC transformer/attention.py Attention.__init__: divide(heads, groups)
    if c.heads % g:
        add(
            f"query_groups={g} does not divide heads={c.heads}: pick query_groups from "
            f"{_divisors(c.heads)}"
        )
    # MC attention: kv_channels = hidden // heads must give back hidden (our rule: no silent resize)
    if c.hidden % c.heads:
        add(
            f"heads={c.heads} does not divide hidden={c.hidden}: pick heads from "
            f"{_divisors(c.hidden)}"
        )
    elif c.position == "rope" and (c.hidden // c.heads) % 2:
        add(
            f"rope needs an even head size, hidden/heads={c.hidden // c.heads}: change hidden or "
            f"heads"
        )
    # MC tensor_parallel/layers.py ColumnParallelLinear: divide(ffn, tp)
    if c.ffn_size % c.tp:
        add(
            f"tp={c.tp} does not divide ffn={c.ffn_size}: pick tp from {_divisors(c.ffn_size)} or "
            f"change ffn"
        )
    # MC transformer_config (pipeline split) and parallel_state: layers % pp, (layers/pp) % vpp
    if c.layers % (c.pp * c.vpp):
        add(
            f"layers={c.layers} is not divisible by pp*vpp={c.pp * c.vpp}: pick pp*vpp from "
            f"{_divisors(c.layers)}"
        )
    # Megatron's microbatch calculator: gbs % (mbs*dp)
    if c.dp and c.gbs % (c.mbs * c.dp):
        add(
            f"gbs={c.gbs} is not divisible by mbs*dp={c.mbs * c.dp}: use gbs a multiple of "
            f"{c.mbs * c.dp}"
        )
    # MC parallel_state.initialize_model_parallel: interleaving needs pp > 1
    if c.vpp > 1 and c.pp == 1:
        add(f"vpp={c.vpp} needs pp > 1: set pp >= 2 or vpp=1")
    # MC pipeline_parallel/schedules.forward_backward_pipelining_with_interleaving, with
    # microbatch_group_size_per_vp_stage = pp (MC model_parallel_config default): M % pp == 0
    elif c.vpp > 1 and c.dp and c.gbs % (c.mbs * c.dp) == 0 and c.num_microbatches % c.pp:
        add(
            f"vpp={c.vpp} needs num_microbatches={c.num_microbatches} divisible by pp={c.pp}: "
            f"raise gbs to a multiple of {c.mbs * c.dp * c.pp} or set vpp=1"
        )
    # MC model_parallel_config.ModelParallelConfig.__post_init__: sp needs tp > 1
    if c.sp and c.tp == 1:
        add("sp needs tp > 1: set tp >= 2 or drop --sp")
    # MC transformer/torch_norm.WrappedTorchNorm: "sequence parallel not supported by torch
    # LayerNorm"
    if c.sp and not te:
        add(
            "sp needs impl te (the local norm refuses sequence parallelism): pass --impl te or "
            "drop --sp"
        )
    if c.sp and (c.seq // c.cp) % c.tp:
        add(
            f"sp splits seq/cp={c.seq // c.cp} over tp={c.tp}: make seq a multiple of "
            f"cp*tp={c.cp * c.tp}"
        )
    # MC transformer/dot_product_attention.DotProductAttention: context_parallel_size == 1
    if c.cp > 1 and not te:
        add(
            f"cp={c.cp} needs impl te (local attention has no context parallelism): pass --impl "
            f"te or cp=1"
        )
    # MC utils.get_batch_on_this_cp_rank: the sequence is cut into 2*cp chunks (load balance)
    if c.cp > 1 and c.seq % (2 * c.cp):
        add(f"cp={c.cp} needs seq divisible by 2*cp={2 * c.cp}: change seq={c.seq} or cp")
    # TE attention/dot_product_attention/context_parallel.py (a2a): heads and kv heads per tp rank %
    # a2a size
    a2a = {"a2a": c.cp, "a2a+p2p": 2}.get(c.cp_comm, 1) if c.cp > 1 else 1
    if c.cp_comm == "a2a+p2p" and c.cp > 1 and (c.cp < 4 or c.cp % 2):
        add(
            f"cp_comm a2a+p2p splits cp={c.cp} into a2a 2 x p2p cp/2: use an even cp >= 4 or "
            f"cp_comm p2p"
        )
    elif a2a > 1 and c.heads % c.tp == 0:
        hp, gp = c.heads // c.tp, max(1, g // c.tp)
        if hp % a2a or gp % a2a:
            add(
                f"cp_comm {c.cp_comm} needs heads/tp={hp} and query_groups/tp={gp} divisible by "
                f"{a2a}: "
                f"use cp_comm p2p or lower cp/tp"
            )
    # MoE: MC transformer_config (ep needs experts), MC moe_layer.MoELayer (experts % ep)
    if c.experts == 0:
        if c.ep > 1:
            add(f"ep={c.ep} needs a MoE model: set experts > 0 or ep=1")
    else:
        if c.experts % c.ep:
            add(
                f"ep={c.ep} does not divide experts={c.experts}: pick ep from "
                f"{_divisors(c.experts)}"
            )
        if c.topk > c.experts:
            add(f"topk={c.topk} exceeds experts={c.experts}: pick topk <= experts")
        # MC experts.SequentialMLP / TEGroupedMLP: expert fc1 is column-parallel over etp
        if c.moe_ffn_size % c.etp:
            add(
                f"etp={c.etp} does not divide moe_ffn={c.moe_ffn_size}: pick etp from "
                f"{_divisors(c.moe_ffn_size)}"
            )
        # MC moe/moe_layer.MoELayer.forward: training with tp > 1 raises without sequence
        # parallelism
        if c.tp > 1 and not c.sp:
            add(f"MoE with tp={c.tp} needs sp: pass --sp (and impl te) or set tp=1")
    # MC transformer_config.__post_init__: recompute_modules (selective only), the modules it knows
    mods = c.recompute_module_names
    if c.recompute_modules != "core_attn" and c.recompute != "selective":
        add(
            f"recompute_modules={c.recompute_modules} needs recompute selective: pass --recompute "
            f"selective "
            f"or drop --recompute-modules"
        )
    if not mods or set(mods) - set(RECOMPUTE_MODULES) or len(set(mods)) < len(mods):
        add(
            f"recompute_modules={c.recompute_modules!r}: name each module once, comma-separated, "
            f"from "
            f"{', '.join(RECOMPUTE_MODULES)}"
        )
    if {"moe_act", "moe"} & set(mods) and not (c.experts and te):
        add(
            "recompute of moe or moe_act needs a MoE model with impl te (grouped GEMM): drop them "
            "from --recompute-modules"
        )
    if c.moe_balance != "aux_loss" and not c.experts:
        add(f"moe_balance={c.moe_balance} needs a MoE model: set experts > 0 or drop --moe-balance")
    if c.lr_warmup is not None and not 0 <= c.lr_warmup < c.iters:
        add(f"lr_warmup={c.lr_warmup}: warm up for 0 to iters - 1 ({c.iters - 1}) steps")
    if (c.moe_aux_coeff != 1e-2 or c.moe_router_fp32) and not c.experts:
        add("--moe-aux-coeff and --moe-router-fp32 need a MoE model: set experts > 0 or drop them")
    if c.moe_aux_coeff <= 0 or (c.moe_aux_coeff != 1e-2 and c.moe_balance == "none"):
        add(
            f"moe_aux_coeff={c.moe_aux_coeff:g}: give a positive weight, with moe_balance aux_loss "
            "or force (for no auxiliary loss pass --moe-balance none)"
        )
    # CUDA graphs: Megatron-LM turns on TE's RNG tracker for them (arguments.py), so the layers must
    # be TE's; MC transformer_config.__post_init__: full recompute only inside a whole-iteration
    # graph; MC moe_layer: an MoE layer routes a data-dependent number of tokens, so only TE's
    # capture of its attention and router
    if c.cuda_graphs != "none":
        if not te:
            add(
                f"cuda_graphs={c.cuda_graphs} needs impl te (Transformer Engine's graph-safe "
                f"RNG): pass --impl te "
                f"or --cuda-graphs none"
            )
        if c.recompute == "full":
            add(
                "cuda_graphs with recompute full: Megatron captures full recompute only in a "
                "whole-iteration "
                "graph; use --recompute selective (or none), or --cuda-graphs none"
            )
        # MC transformer_config.__post_init__: no dropout inside a graphed recompute (attention is
        # graphed in both scopes, the MLP in the whole-layer one)
        graphed = [
            m
            for m in c.recompute_module_names
            if m == "core_attn" or (m == "mlp" and not c.experts)
        ]
        if c.recompute == "selective" and c.dropout > 0 and graphed:
            add(
                f"cuda_graphs with selective recompute of {','.join(graphed)} and "
                f"dropout={c.dropout}: Megatron "
                f"cannot graph a recompute that draws dropout; pass --dropout 0, --recompute none "
                f"or --cuda-graphs none"
            )
        if c.experts and c.cuda_graphs != "te":
            add(
                "MoE layers with CUDA graphs: use --cuda-graphs te (it captures attention and the "
                "router; the "
                "experts run eagerly), or --cuda-graphs none"
            )
    # MC transformer_config + TE fp8: fp8 runs TE GEMMs on Ada/Hopper/Blackwell
    if c.fp8:
        if not te:
            add("fp8 needs impl te: pass --impl te or drop --fp8")
        if gpu_name is not None and not _FP8_GPUS.search(gpu_name):
            add(
                f"fp8 needs an Ada, Hopper or Blackwell GPU (H100, H200, B200, ...), not "
                f"{gpu_name}: drop --fp8"
            )
        # TE utils.assert_dim_for_fp8_exec: GEMM input height % 8, width % 16
        tokens = c.seq // c.cp * c.mbs
        if tokens % 8:
            add(f"fp8 needs seq/cp*mbs={tokens} divisible by 8: change seq or mbs")
        for n, v in (
            ("hidden", c.hidden),
            ("hidden/tp", c.hidden // c.tp),
            ("ffn/tp", c.ffn_size // c.tp),
        ):
            if v % 16:
                add(f"fp8 needs {n}={v} divisible by 16: change hidden, ffn or tp")
    return out + _machine(c, gpus_available, te_available)


def _machine(c, gpus_available, te_available) -> list[str]:
    """Problems with this machine rather than the layout (checked only when the launcher asks)."""
    out = []
    if gpus_available is not None and isinstance(c.gpus, int) and c.gpus > gpus_available:
        out.append(
            f"not enough GPUs: the layout needs gpus={c.gpus} but only {gpus_available} are "
            f"available: lower dp, tp, pp or cp so that gpus <= {gpus_available}"
        )
    if c.impl == "te" and te_available is False:
        out.append(
            "Transformer Engine is not installed: pass --impl local, or install it (make gpu-setup)"
        )
    return out
