"""The parallel axes, in one table: what each is called in megalab, Megatron Core and Megatron-LM,
where Megatron places its process group, and what it must divide.

    >>> from megalab.runs.axes import AXES, axis
    >>> axis("cp").flag                      # '--context-parallel-size'
    >>> [a.short for a in AXES]              # ['tp', 'pp', 'vpp', 'cp', 'ep', 'etp', 'dp']

Megatron Core builds its groups from one rank order, `parallel_state.initialize_model_parallel(...,
order="tp-cp-ep-dp-pp")`: neighbouring ranks share the first axis (TP, the chattiest, stays inside a
node), PP is the outermost. The expert groups reuse that order with ETP in TP's place
(`tp-ep-dp-pp`). `group` is an axis's place in that order; vpp has none (it splits a pipeline rank's
layers, it makes no group of its own).

Who reads the table: `RunConfig` (dp, the layout's product), `layout_rules` (the positive sizes),
the trainer (`train.wiring.megatron_configs`: the Megatron Core arguments), `peer` (Megatron-LM's
flags), `records.schema` (the table's columns), `predict.search` (the axes it varies) and
`book.widgets` (the planner's drop-downs); tests/test_axes.py holds the trainer and the peer to this
table.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP_ORDER = ("tp", "cp", "ep", "dp", "pp")  # Megatron Core's default `order`, innermost first


@dataclass(frozen=True)
class Axis:
    """One parallel axis. `flag` is None where Megatron-LM derives it (dp = world / (tp*pp*cp))."""

    short: str  # RunConfig's field (dp: a property)
    name: str  # in words, as the book says it
    mcore: str | None  # the ModelParallelConfig argument (Megatron Core 0.16.1)
    flag: str | None  # pretrain_gpt.py's flag (Megatron-LM)
    divides: str  # what its size must divide, as layout_rules checks it
    # the flag is passed even at size 1 (vpp's only above 1: Megatron wants None)
    always: bool = True
    moe: bool = False  # only a mixture-of-experts model uses it

    @property
    def group(self) -> int | None:
        """Place in Megatron's group order (0 = innermost ranks); None for an axis with no group."""
        return GROUP_ORDER.index(self.short) if self.short in GROUP_ORDER else None


AXES = (
    Axis(
        "tp",
        "tensor parallelism",
        "tensor_model_parallel_size",
        "--tensor-model-parallel-size",
        "heads, query groups (or a multiple of them), ffn and vocab",
    ),
    Axis(
        "pp",
        "pipeline parallelism",
        "pipeline_model_parallel_size",
        "--pipeline-model-parallel-size",
        "layers (with vpp: layers / vpp)",
    ),
    Axis(
        "vpp",
        "virtual pipeline (interleaved) chunks",
        "virtual_pipeline_model_parallel_size",
        "--num-virtual-stages-per-pipeline-rank",
        "layers / pp; the micro-batches are a multiple of pp",
        always=False,
    ),
    Axis(
        "cp",
        "context parallelism",
        "context_parallel_size",
        "--context-parallel-size",
        "seq / 2 (the sequence is cut into 2*cp chunks)",
    ),
    Axis(
        "ep",
        "expert parallelism",
        "expert_model_parallel_size",
        "--expert-model-parallel-size",
        "experts; gpus / (etp*pp)",
        moe=True,
    ),
    Axis(
        "etp",
        "tensor parallelism inside each expert",
        "expert_tensor_parallel_size",
        "--expert-tensor-parallel-size",
        "moe_ffn; gpus / (ep*pp)",
        moe=True,
    ),
    Axis("dp", "data parallelism", None, None, "gbs / mbs (what is left of gpus / (tp*pp*cp))"),
)
SHORT = tuple(a.short for a in AXES)  # the order of the label, tables and columns
SIZES = tuple(a.short for a in AXES if a.mcore)  # the sizes a RunConfig sets (dp is derived)
MODEL_PARALLEL = ("tp", "pp", "cp")  # gpus = tp*pp*cp*dp


def axis(short: str) -> Axis:
    """The row of one axis, by its short name; KeyError names the known ones."""
    for a in AXES:
        if a.short == short:
            return a
    raise KeyError(f"no parallel axis {short!r}: the axes are {', '.join(SHORT)}")


def model_parallel(cfg) -> int:
    """tp*pp*cp: the GPUs one data-parallel replica spans."""
    n = 1
    for s in MODEL_PARALLEL:
        n *= getattr(cfg, s)
    return n


def lm_flags(cfg, after: dict | None = None) -> list:
    """The layout's pretrain_gpt.py flags with their values, in the table's order; `after` puts an
    axis's companion flags right behind it ({"cp": ["--cp-comm-type", "p2p"]})."""
    out = []
    for a in AXES:
        if a.flag and (a.always or getattr(cfg, a.short) > 1):
            out += [a.flag, getattr(cfg, a.short), *(after or {}).get(a.short, ())]
    return out
