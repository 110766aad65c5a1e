"""What every rewritten chapter shows the same way: layouts in words, the "In Megatron-LM" box,
tables.

    >>> frame.describe(cfg)                          # 'DP 4 + distributed optimizer'
    >>> frame.megatron_box({"DP 4 + distributed optimizer": cfg})   # the chapter's In Megatron-LM box
    >>> frame.table(df, {"label": "Layout", "step_time_s": ("Step (ms)", 1e3)})

`describe` reads the parallel axes from `runs.axes.AXES`; `megatron_box` prints the flags
`jobs.peer.args` gives Megatron-LM's `pretrain_gpt.py` for the same RunConfig (the peer runs exactly
these), with the environment `jobs.peer.environment` sets. Nothing here types a flag a chapter could
get wrong.

`REWRITTEN` lists the chapters written to the book's reader-path rules (tests/test_book_text.py and
tools/check_html.py hold them to those rules; the other chapters keep the older ones).
"""

from __future__ import annotations

import math

from megalab.runs.axes import AXES

__all__ = ["REWRITTEN", "REWRITTEN_PAGES", "describe", "megatron_box", "box_flags", "command", "table", "refusal"]

# chapters held to the reader-path budgets (tests/test_book_text.py)
REWRITTEN = ("00", "01", "02", "03", "04", "05", "06", "07")
# pages of book/ that are no numbered chapter, held to the same rules: page -> its evidence page
REWRITTEN_PAGES = {"performance": "performance_evidence"}

# -- a layout in words
# --------------------------------------------------------------------------------
CP_COMM = {
    "p2p": "",
    "all_gather": "all-gather",
    "a2a": "all-to-all",
    "a2a+p2p": "all-to-all + P2P",
}
MODULES = {
    "core_attn": "attention",
    "mlp": "MLP",
    "layernorm": "norms",
    "moe_act": "expert activation",
    "moe": "experts",
}
# Korthikanti et al. 2022's selective recomputation: said without a list
DEFAULT_MODULES = "core_attn"


def _axis_words(cfg, short: str, size: int) -> str:
    words = f"{short.upper()} {size}"
    if short == "tp" and cfg.sp:
        words += " + SP"
    if short == "cp" and CP_COMM.get(cfg.cp_comm, cfg.cp_comm):
        words += f" ({CP_COMM.get(cfg.cp_comm, cfg.cp_comm)})"
    return words


def _sizes(cfg) -> list[tuple[str, int]]:
    """The axes above 1, in the AXES order; with EP, DP counts the experts' data-parallel copies
    (gpus / (pp*ep*etp)): EP is carved out of the data-parallel ranks."""
    out = []
    for a in AXES:
        size = getattr(cfg, a.short)
        if a.short == "dp" and cfg.ep > 1:
            size = cfg.gpus // max(1, cfg.pp * cfg.ep * cfg.etp)
        if size > 1:
            out.append((a.short, size))
    return out


def describe(cfg, model: bool = False, batch: bool = False) -> str:
    """The layout in words, for titles, legends and tables: the parallel axes above 1 ('TP 2 + SP ×
    PP 2 × VPP 4', '1 GPU' when there is none), then the memory settings ('+ distributed optimizer',
    '+ full recomputation', '+ selective recomputation (MLP)', '+ overlap'), then the implementation
    (', CUDA graphs', ', FP8', ', plain (non-TE) layers', ', no compile'). `model` puts the model's
    name first ('gpt-1.2b, TP 2'), `batch` the batch last (', micro-batch 4, global batch 64')."""
    text = " × ".join(_axis_words(cfg, s, n) for s, n in _sizes(cfg)) or "1 GPU"
    memory = [
        (cfg.dist_opt, "distributed optimizer"),
        (cfg.recompute == "full", "full recomputation"),
        (cfg.recompute == "selective", "selective recomputation" + _modules(cfg)),
        (cfg.overlap, "overlap"),
    ]
    text += "".join(f" + {w}" for on, w in memory if on)
    extras = [
        (cfg.cuda_graphs != "none", "CUDA graphs"),
        (cfg.fp8, "FP8"),
        (cfg.impl == "local", "plain (non-TE) layers"),  # Megatron Core's local spec
        (not cfg.compile, "no compile"),
        (cfg.experts > 0 and cfg.moe_dispatcher != "alltoall", f"{cfg.moe_dispatcher} dispatcher"),
        (cfg.experts > 0 and cfg.moe_aux_coeff != 1e-2, f"auxiliary loss {cfg.moe_aux_coeff:g}"),
        (cfg.moe_router_fp32, "fp32 router"),
        (cfg.grad_accum_fusion != "auto", f"gradient-accumulation fusion {cfg.grad_accum_fusion}"),
    ]
    text += "".join(f", {w}" for on, w in extras if on)
    if batch:
        text += f", micro-batch {cfg.mbs}, global batch {cfg.gbs}"
    return f"{cfg.name}, {text}" if model else text


def _modules(cfg) -> str:
    if cfg.recompute_modules == DEFAULT_MODULES:
        return ""
    return " (" + ", ".join(MODULES.get(m, m) for m in cfg.recompute_module_names) + ")"


# -- the In Megatron-LM box
# --------------------------------------------------------------------------- flag -> (Megatron Core
# argument, what it does); the parallel sizes come from AXES (AXIS_DOES)
FLAGS = {
    "--sequence-parallel": (
        "TransformerConfig.sequence_parallel",
        "splits norms and dropout over the TP ranks along the sequence",
    ),
    "--cp-comm-type": ("TransformerConfig.cp_comm_type", "how CP ranks exchange keys and values"),
    "--hierarchical-context-parallel-sizes": (
        "TransformerConfig.hierarchical_context_parallel_sizes",
        "the CP groups of a2a+p2p, inner first",
    ),
    "--use-distributed-optimizer": (
        "DistributedDataParallelConfig.use_distributed_optimizer",
        "shards the optimizer state over the DP ranks (ZeRO-1)",
    ),
    "--overlap-grad-reduce": (
        "DistributedDataParallelConfig.overlap_grad_reduce",
        "reduces gradients bucket by bucket during the backward pass",
    ),
    "--overlap-param-gather": (
        "DistributedDataParallelConfig.overlap_param_gather",
        "gathers the updated parameters during the next forward pass",
    ),
    "--recompute-granularity": (
        "TransformerConfig.recompute_granularity",
        "recomputes activations in the backward pass: whole layers or some modules",
    ),
    "--recompute-method": (
        "TransformerConfig.recompute_method",
        "uniform: checkpoint every group of layers; block: the first layers only",
    ),
    "--recompute-num-layers": (
        "TransformerConfig.recompute_num_layers",
        "layers per checkpoint (uniform), or layers recomputed per stage (block)",
    ),
    "--recompute-modules": (
        "TransformerConfig.recompute_modules",
        "the modules selective recomputation re-runs",
    ),
    "--micro-batch-size": (
        "get_forward_backward_func()(micro_batch_size=...)",
        "sequences per forward pass on each DP rank",
    ),
    "--global-batch-size": (
        "get_forward_backward_func()(num_microbatches=gbs / (mbs*dp))",
        "sequences per optimizer step, over all DP ranks",
    ),
    "--cuda-graph-impl": (
        "TransformerConfig.cuda_graph_impl",
        "captures each layer's kernels once and replays them: fewer launches from Python",
    ),
    "--cuda-graph-warmup-steps": (
        "TransformerConfig.cuda_graph_warmup_steps",
        "eager steps before the capture",
    ),
    "--cuda-graph-scope": (
        "TransformerConfig.cuda_graph_scope",
        "the parts of a layer that are captured",
    ),
    "--moe-router-dtype": (
        "TransformerConfig.moe_router_dtype",
        "routes in fp32: logits, softmax and auxiliary loss",
    ),
    "--moe-token-dispatcher-type": (
        "TransformerConfig.moe_token_dispatcher_type",
        "how tokens reach their experts' EP ranks",
    ),
}
AXIS_DOES = {
    "tp": "splits each layer's weight matrices over this many GPUs",
    "pp": "splits the layers into this many consecutive stages",
    "vpp": "layer chunks per pipeline stage (interleaved schedule): a smaller bubble",
    "cp": "splits each sequence over this many GPUs",
    "ep": "spreads the experts over this many GPUs",
    "etp": "splits each expert's matrices over this many GPUs",
}
ENV_DOES = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "one hardware queue, so communication issued before a GEMM "
    "overlaps it "
    "(Megatron-LM asserts it with TP or CP)",
    "NVTE_USE_CUTLASS_GROUPED_GEMM": "one CUTLASS grouped GEMM for all local experts instead of "
    "one cuBLAS call each",
}
SIZE_FLAGS = {a.flag: a for a in AXES if a.flag}
SHOWN = set(FLAGS) | set(SIZE_FLAGS)  # the layout, memory and batch flags; not the model's shape


def _pairs(argv: list[str]) -> list[tuple[str, list[str]]]:
    """pretrain_gpt.py's argv as (flag, its values)."""
    out: list[tuple[str, list[str]]] = []
    for a in argv:
        if a.startswith("--"):
            out.append((a, []))
        elif out:
            out[-1][1].append(a)
    return out


def box_flags(cfg) -> list[tuple[str, list[str]]]:
    """The layout, memory and batch flags of cfg, as the peer passes them (jobs.peer.args), in its
    order: parallel sizes of 1 (Megatron-LM's default) and the CP settings without CP left out."""
    from megalab.jobs import peer

    out = []
    for flag, values in _pairs(peer.args(peer.peer_config(cfg))):
        if flag not in SHOWN or (flag in SIZE_FLAGS and values == ["1"]):
            continue
        if flag == "--cp-comm-type" and cfg.cp == 1:
            continue
        out.append((flag, values))
    return out


# the command's lines: one group of flags each, in this order (a flag in no group goes to "run")
GROUPS = {
    "model": (
        "--num-layers",
        "--hidden-size",
        "--num-attention-heads",
        "--ffn-hidden-size",
        "--group-query-attention",
        "--num-query-groups",
        "--normalization",
        "--position-embedding-type",
        "--swiglu",
        "--disable-bias-linear",
        "--untie-embeddings-and-output-weights",
        "--vocab-size",
        "--make-vocab-size-divisible-by",
        "--init-method-std",
        "--hidden-dropout",
        "--attention-dropout",
        "--num-experts",
        "--moe-router-topk",
        "--moe-ffn-hidden-size",
        "--moe-router-load-balancing-type",
        "--moe-aux-loss-coeff",
        "--moe-router-force-load-balancing",
        "--moe-router-pre-softmax",
        "--moe-router-dtype",
    ),
    "sequence": ("--seq-length", "--max-position-embeddings"),
    "layout": tuple(
        f for f in SHOWN if not f.startswith(("--micro-batch", "--global-batch", "--cuda-graph"))
    ),
    "batch": ("--micro-batch-size", "--global-batch-size"),
    "precision": (
        "--bf16",
        "--fp8-",
        "--transformer-impl",
        "--no-gradient-accumulation-fusion",
        "--cross-entropy-",
        "--no-rope-fusion",
        "--moe-grouped-gemm",
        "--moe-permute-fusion",
        "--moe-router-fusion",
        "--cuda-graph-",
    ),
    "optimizer": ("--optimizer", "--lr", "--min-lr", "--weight-decay", "--adam-", "--clip-grad"),
    "run": ("--train-iters", "--seed", "--log-", "--eval-"),
    "data": ("--tokenizer-type", "--mock-data", "--data-path", "--split"),
}
WIDTH = 72  # characters of a command line: the box's code block at a 1000 px window


def _group(flag: str) -> str:
    for name, flags in GROUPS.items():
        if any(flag == f or (f.endswith("-") and flag.startswith(f)) for f in flags):
            return name
    return "run"


def _value(v: str) -> str:
    """A float argument in six significant digits: 3e-05, not the 17 digits of lr / 10."""
    try:
        return f"{float(v):.6g}" if len(v) > 8 and not v.lstrip("-").isdigit() else v
    except ValueError:
        return v


def _fill(parts: list[str], indent: str) -> list[str]:
    """Words on lines of at most WIDTH - 2 characters (room for the ' \\')."""
    lines, line = [], ""
    for p in parts:
        if line and len(indent) + len(line) + 1 + len(p) > WIDTH - 2:
            lines.append(line)
            line = p
        else:
            line = f"{line} {p}".strip()
    return [indent + l for l in lines + [line] if l]


def command(cfg) -> str:
    """The `torchrun ... pretrain_gpt.py` command of cfg with every flag the peer passes
    (jobs.peer.args), one group of flags a line (model shape, sequence, layout, batch, precision,
    optimizer, run, data), joined by backslashes, no line longer than WIDTH."""
    from megalab.jobs import peer

    env = [f"{k}={v}" for k, v in peer.environment(cfg).items()]
    # VAR=1 \ torchrun: one command
    head = [*env, f"torchrun --nproc-per-node {cfg.gpus} pretrain_gpt.py"]
    groups: dict[str, list[str]] = {g: [] for g in GROUPS}
    for flag, values in _pairs(peer.args(peer.peer_config(cfg))):
        groups[_group(flag)].append(" ".join([flag, *map(_value, values)]))
    lines = head + [line for parts in groups.values() for line in _fill(parts, "    ")]
    return " \\\n".join(lines)


def _rows(layouts) -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    from megalab.jobs import peer

    seen: dict[str, tuple[str, str, str]] = {}
    env: dict[str, str] = {}
    for cfg in layouts.values():
        for flag, _ in box_flags(cfg):
            if flag in SIZE_FLAGS:
                a = SIZE_FLAGS[flag]
                seen.setdefault(flag, (flag, f"ModelParallelConfig.{a.mcore}", AXIS_DOES[a.short]))
            else:
                seen.setdefault(flag, (flag, *FLAGS[flag]))
        for k, v in peer.environment(cfg).items():
            env.setdefault(f"{k}={v}", ENV_DOES.get(k, ""))
    order = [a.flag for a in AXES if a.flag] + list(FLAGS)
    return sorted(seen.values(), key=lambda r: order.index(r[0])), env


def box_text(layouts: dict) -> str:
    """The box's MyST source (megatron_box shows it): per layout its name, the model and GPUs, the
    full command; then the layout flags as a list (flag, Megatron Core argument, what it does),
    which wraps at any width, and the environment."""
    blocks = []
    for name, cfg in layouts.items():
        gpus = f"{cfg.gpus} GPU" + ("s" if cfg.gpus > 1 else "")
        blocks.append(
            f"**{name}**: {cfg.name} on {gpus}, sequences of {cfg.seq:,} tokens\n\n"
            f"```bash\n{command(cfg)}\n```"
        )
    rows, env = _rows(layouts)
    flags = ["The layout flags:", ""]
    flags += [f"- `{f}` (`{m}`): {d}" for f, m, d in rows]
    flags += [f"- `{k}` (environment): {d}" for k, d in env.items()]
    data = (
        "`--mock-data` trains on random tokens, as the measured runs did; for a real corpus "
        "replace it with "
        "`--data-path` and your tokenizer's flags."
    )
    body = "\n\n".join([*blocks, "\n".join(flags), data])
    return f":::{{admonition}} In Megatron-LM\n:class: tip\n\n{body}\n:::\n"


def megatron_box(layouts: dict):
    """The chapter's "In Megatron-LM" box: for each named layout ({"DP 4 + distributed optimizer":
    cfg}) the full `pretrain_gpt.py` command (every flag jobs.peer passes, which runs them), then
    each layout flag's Megatron Core argument and what it does, and the environment variables the
    run needs. Shown as a MyST admonition in the book (megalab.book.reproduce renders the Markdown
    as MyST, and _config.yml ranks Markdown before HTML) and as a plain HTML box in JupyterLab."""
    if not layouts:
        raise ValueError("megatron_box needs at least one layout: {'DP 4': cfg, ...}")
    return _box_display()(box_text(layouts))


def _box_display():
    from IPython.display import Markdown

    class MegatronBox(Markdown):
        """Markdown (MyST, for the book) with an HTML twin (for JupyterLab, which prefers HTML)."""

        def _repr_html_(self):
            from markdown_it import MarkdownIt

            body = self.data.split("\n", 2)[2].rsplit(":::", 1)[0]  # the admonition's content
            html = MarkdownIt("commonmark").enable("table").render(body)
            return (
                '<div style="border-left: 4px solid #2e933c; padding: 0.4em 1em; margin: 0.5em 0">'
                f"<p><strong>In Megatron-LM</strong></p>{html}</div>"
            )

    return MegatronBox


# -- tables
# ---------------------------------------------------------------------------------------------
def _digits(values) -> int:
    """Decimals for about three significant figures of a column's typical (median absolute)
    value."""
    finite = sorted(abs(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    if not finite:
        return 0
    typical = finite[len(finite) // 2]
    if typical == 0:
        return 0
    return max(0, min(4, 2 - math.floor(math.log10(typical))))


def table(df, columns: dict, digits: dict | None = None, missing: str = "–"):
    """df for display: only `columns`, in their order, headed by their words ({"step_time_s": "Step
    (s)"}, or with a scale: {"step_time_s": ("Step (ms)", 1e3), "mfu": ("MFU (%)", 100)}); floats
    rounded to about three significant figures unless `digits` says ({"Step (ms)": 1}, by header or
    column), missing values shown as `missing` ("–"; "not profiled" where that is why), the index
    hidden. Returns a pandas Styler."""
    import pandas as pd

    digits = digits or {}
    out, fmt = pd.DataFrame(index=df.index), {}
    for col, spec in columns.items():
        if col not in df.columns:
            raise KeyError(
                f"table: no column {col!r}; the frame has {', '.join(map(str, df.columns))}"
            )
        header, scale = (spec, None) if isinstance(spec, str) else spec
        values = df[col] * scale if scale is not None else df[col]
        out[header] = values
        if pd.api.types.is_float_dtype(values):
            n = digits.get(header, digits.get(col, _digits(values.tolist())))
            fmt[header] = f"{{:,.{n}f}}"
        elif pd.api.types.is_integer_dtype(values):
            fmt[header] = "{:,}"
    return out.style.format(fmt, na_rep=missing).hide(axis="index")


# Megatron-LM's names for the RunConfig fields a refused layout's message may name
_FLAGS = {"cp_comm": "--cp-comm-type"}


def refusal(error, width: int = 88) -> str:
    """A refused layout's message (megalab.InvalidLayout) with Megatron-LM's flag names for the
    library's field names, wrapped to `width` columns so that no line is cut on the page."""
    import re
    import textwrap

    text = re.sub(r"\b(\w+)\b", lambda m: _FLAGS.get(m.group(1), m.group(1)), str(error))
    return textwrap.fill(text, width, break_on_hyphens=False)
