"""One run, described by one frozen dataclass: model, parallel layout, memory, batch, precision.

`RunConfig` is what the CLI parses, the launcher passes to `torchrun -m megalab.train`, the trainer
maps onto Megatron Core 0.16.1, and the results store keys records by. `problems(cfg)` lists every
reason Megatron would refuse the layout at start-up, one line each, saying what to change.

Validation rules (one per Megatron refusal) live in layout_rules.py; `problems` is re-exported here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

from megalab.runs.axes import model_parallel
from megalab.runs.layout_rules import hierarchical_cp, problems  # noqa: F401  (re-exported)
from megalab.runs.shapes import PRESETS


class InvalidLayout(ValueError):
    """The parallel layout or settings cannot run; the message says what to change."""


def _f(default, doc: str, choices: tuple | None = None):
    return field(default=default, metadata={"doc": doc, "choices": choices})


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a training run. Short names: tp, pp, vpp, cp, ep, etp, dp, mbs, gbs,
    seq."""

    # -- model ------------------------------------------------------------------------------------
    name: str = _f("custom", "model name, used in the label (a preset name such as 'gpt-1.2b')")
    layers: int = _f(2, "number of transformer layers")
    hidden: int = _f(256, "hidden size h")
    heads: int = _f(4, "attention heads")
    query_groups: int | None = _f(
        None, "key/value heads for GQA; None = heads (multi-head attention)"
    )
    ffn: int | None = _f(None, "MLP inner size; None = 4*hidden")
    vocab: int = _f(
        50304,
        "vocabulary size, used as is: it must split evenly over tp (a multiple of 128*tp always "
        "does)",
    )
    seq: int = _f(1024, "sequence length in tokens")
    norm: str = _f("LayerNorm", "normalization layer", ("LayerNorm", "RMSNorm"))
    activation: str = _f(
        "gelu", "MLP activation; swiglu = gated linear unit with SiLU", ("gelu", "swiglu")
    )
    position: str = _f("learned", "position embedding", ("learned", "rope"))
    tied_embeddings: bool = _f(True, "share the input embedding with the output layer")
    experts: int = _f(0, "MoE experts per layer; 0 = dense MLP")
    topk: int = _f(2, "experts each token is routed to (MoE only)")
    moe_ffn: int | None = _f(None, "inner size of each expert's MLP; None = ffn")
    moe_dispatcher: str = _f("alltoall", "MoE token dispatcher", ("alltoall", "allgather"))
    moe_balance: str = _f(
        "aux_loss",
        "MoE load balancing: the auxiliary loss (Switch), forced (random router logits, "
        "Megatron's benchmark setting: the loss does not train the router), or none",
        ("aux_loss", "force", "none"),
    )
    moe_aux_coeff: float = _f(
        1e-2,
        "weight of the MoE auxiliary load-balancing loss (Megatron's moe_aux_loss_coeff; unused "
        "with moe_balance none)",
    )
    moe_router_fp32: bool = _f(
        False,
        "route in fp32: the router's logits, softmax and auxiliary loss (Megatron's "
        "moe_router_dtype='fp32'); off = in the model's bf16",
    )
    dropout: float = _f(0.0, "hidden and attention dropout probability")
    # -- layout -----------------------------------------------------------------------------------
    gpus: int = _f(1, "world size = tp*pp*cp*dp")
    tp: int = _f(1, "tensor-parallel size")
    pp: int = _f(1, "pipeline-parallel size")
    vpp: int = _f(1, "virtual pipeline chunks per pp rank; 1 = no interleaving")
    cp: int = _f(1, "context-parallel size (splits the sequence)")
    cp_comm: str = _f(
        "p2p", "context-parallel communication", ("p2p", "all_gather", "a2a", "a2a+p2p")
    )
    ep: int = _f(1, "expert-parallel size (carved out of dp*cp*tp, Megatron-style)")
    etp: int = _f(1, "tensor-parallel size inside each expert")
    sp: bool = _f(False, "sequence parallelism (needs tp > 1 and impl te)")
    # -- memory -----------------------------------------------------------------------------------
    dist_opt: bool = _f(False, "distributed optimizer: shard optimizer state over dp (ZeRO-1)")
    recompute: str = _f("none", "activation recomputation", ("none", "selective", "full"))
    recompute_modules: str = _f(
        "core_attn",
        "what selective recompute re-runs, comma-separated (Megatron's "
        "recompute_modules): core_attn, mlp, layernorm, moe_act, moe",
    )
    overlap: bool = _f(False, "overlap grad reduce (and, with dist_opt, param gather) with compute")
    grad_accum_fusion: str = _f(
        "auto",
        "accumulate weight gradients straight into the fp32 main_grad inside the wgrad GEMM "
        "(Megatron's gradient_accumulation_fusion): auto = each runner's own (megalab's trainer "
        "fuses through Transformer Engine; Megatron-LM's pretrain_gpt.py runs "
        "--no-gradient-accumulation-fusion, its output layer needs Apex for it); on or off = the "
        "same on both runners, a fair peer pair",
        ("auto", "on", "off"),
    )
    # -- batch ------------------------------------------------------------------------------------
    mbs: int = _f(1, "micro-batch size (sequences per forward pass per dp rank)")
    gbs: int = _f(1, "global batch size (sequences per optimizer step)")
    # -- precision / implementation ---------------------------------------------------------------
    fp8: bool = _f(False, "FP8 GEMMs with Transformer Engine's hybrid recipe")
    impl: str = _f(
        "te", "layer implementation: Transformer Engine or Megatron's local spec", ("te", "local")
    )
    compile: bool = _f(
        True,
        "torch.compile Megatron's and TE's fused elementwise ops (bias-GeLU, bias-dropout-add, "
        "...); "
        "False runs them eagerly: no compile in the first step, unfused kernels after",
    )
    cuda_graphs: str = _f(
        "none",
        "capture each transformer layer's forward and backward once as CUDA graphs and "
        "replay them: one launch instead of hundreds of kernels from Python per layer (Megatron's "
        "own capture, local, or TE's make_graphed_callables, te; both measured on four H200s, on a "
        "host-bound TP 4 + SP step: see the performance page)",
        ("none", "local", "te"),
    )
    # -- run --------------------------------------------------------------------------------------
    iters: int = _f(30, "training iterations")
    stop_when_tight: bool = _f(
        False,
        "stop the timed steps once the median step's 95% interval is within ±2% "
        "(megalab.records.timings.tight), after at least 10 timed steps; iters is then the most",
    )
    seed: int = _f(1234, "random seed")
    lr: float = _f(3e-4, "peak learning rate")
    lr_warmup: int | None = _f(
        None, "steps of linear learning-rate warm-up from 0; None = min(10, iters // 10)"
    )
    data: str | None = _f(None, "Megatron indexed dataset prefix; None = synthetic tokens")
    init: str = _f(
        "layout_invariant",
        "weight init: identical across layouts, or Megatron's own",
        ("layout_invariant", "megatron"),
    )
    runner: str = _f(
        "megalab",
        "who trains: megalab's trainer, or Megatron-LM's own pretrain_gpt.py (the peer, "
        "megalab peer)",
        ("megalab", "megatron-lm"),
    )

    def __post_init__(self):
        for f in dataclasses.fields(self):  # 1 and 1.0 must give the same key
            if f.type == "float" and isinstance(getattr(self, f.name), int):
                object.__setattr__(self, f.name, float(getattr(self, f.name)))

    # -- derived (groups, ffn_size, moe_ffn_size resolve the None defaults)
    # --------------------------
    @property
    def dp(self) -> int:
        """Data-parallel size: gpus // (tp*pp*cp)."""
        return self.gpus // model_parallel(self)

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per step per dp rank: gbs // (mbs*dp)."""
        return self.gbs // max(1, self.mbs * self.dp)

    @property
    def recompute_module_names(self) -> tuple[str, ...]:
        """The modules selective recomputation re-runs: recompute_modules, split at its commas."""
        return tuple(m for m in self.recompute_modules.split(",") if m)

    @property
    def lr_warmup_steps(self) -> int:
        """Effective learning-rate warm-up (default min(10, iters // 10)), the same for both
        runners."""
        return min(10, self.iters // 10) if self.lr_warmup is None else self.lr_warmup

    @property
    def groups(self) -> int:
        """Effective query groups (key/value heads)."""
        return self.query_groups or self.heads

    @property
    def ffn_size(self) -> int:
        """Effective MLP inner size (Megatron default 4*hidden)."""
        return self.ffn or 4 * self.hidden

    @property
    def moe_ffn_size(self) -> int:
        """Effective expert MLP inner size (Megatron default: ffn)."""
        return self.moe_ffn or self.ffn_size

    @property
    def padded_vocab(self) -> int:
        """The vocabulary rounded up to a multiple of 128*tp (Megatron-LM's padding rule). megalab's
        trainer uses `vocab` as is, so that every layout trains the same model; this is the value to
        suggest when it does not split."""
        m = 128 * self.tp
        return -(-self.vocab // m) * m

    @property
    def label(self) -> str:
        """Human-readable run name; suffixes only for non-default settings."""
        s = (
            f"{self.name}{self._reshaped()}_tp{self.tp}_pp{self.pp}_cp{self.cp}_ep{self.ep}_dp{self.dp}"
            f"_mbs{self.mbs}_gbs{self.gbs}_seq{self.seq}"
        )
        extras = [
            (self.vpp > 1, f"_vpp{self.vpp}"),
            (self.etp > 1, f"_etp{self.etp}"),
            (self.cp > 1 and self.cp_comm != "p2p", f"_cp-{self.cp_comm}"),
            (self.sp, "_sp"),
            (self.dist_opt, "_distopt"),
            (self.overlap, "_overlap"),
            (self.recompute != "none", f"_rc-{self.recompute}"),
            (self.recompute_modules != "core_attn", f"-{self.recompute_modules.replace(',', '+')}"),
            (self.fp8, "_fp8"),
            (self.impl != "te", f"_{self.impl}"),
            (self.moe_dispatcher != "alltoall", f"_{self.moe_dispatcher}"),
            (self.moe_balance != "aux_loss", f"_balance-{self.moe_balance}"),
            (self.moe_aux_coeff != 1e-2, f"_aux{self.moe_aux_coeff:g}"),
            (self.moe_router_fp32, "_router-fp32"),
            (self.grad_accum_fusion != "auto", f"_wgradfusion-{self.grad_accum_fusion}"),
            (self.lr_warmup is not None, f"_warmup{self.lr_warmup}"),
            (self.init != "layout_invariant" and self.runner == "megalab", f"_init-{self.init}"),
            (self.dropout > 0, f"_drop{self.dropout:g}"),
            (not self.compile, "_nocompile"),
            (self.cuda_graphs != "none", f"_cg-{self.cuda_graphs}"),
            (self.runner == "megatron-lm", "_peer"),
        ]
        return s + "".join(text for on, text in extras if on)

    @property
    def preset_changes(self) -> str:
        """How the model differs from its preset, as the label marks it:
        "untied-rope-RMSNorm-swiglu", "L224"; ""."""
        return self._reshaped().lstrip("-")

    def _reshaped(self) -> str:
        """How the model differs from its preset: "-L224" for another layer count (a `fit --vary
        layers` probe), "-untied", "-rope", "-RMSNorm", "-swiglu" (or back to the defaults); "" when
        it does not."""
        preset = PRESETS.get(self.name)
        if not preset:
            return ""
        out = f"-L{self.layers}" if preset.get("layers") not in (None, self.layers) else ""
        if preset.get("tied_embeddings", _DEFAULTS["tied_embeddings"]) != self.tied_embeddings:
            out += "-untied" if not self.tied_embeddings else "-tied"
        for name in ("position", "norm", "activation"):
            if preset.get(name, _DEFAULTS[name]) != getattr(self, name):
                out += f"-{getattr(self, name)}"
        return out

    @property
    def key(self) -> str:
        """Stable id: first 16 hex of sha256 over the canonical (sorted, compact) JSON of all fields
        (a field added after records existed, ADDED_FIELD_DEFAULTS, only when it differs from its
        default: old keys stand)."""
        d = {
            k: v
            for k, v in self.to_dict().items()
            if k not in ADDED_FIELD_DEFAULTS or v != ADDED_FIELD_DEFAULTS[k]
        }
        canon = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    # -- conversions ------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """All fields, JSON-ready, in declaration order (every field is a scalar, so no deep copy is
        needed: dataclasses.asdict's was most of chapter 07's run, through replace)."""
        return {f.name: getattr(self, f.name) for f in _FIELDS}

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        """Inverse of to_dict; unknown keys raise ValueError, missing ones take their defaults."""
        unknown = sorted(set(d) - _FIELD_NAMES)
        if unknown:
            raise ValueError(
                f"unknown RunConfig field(s) {', '.join(unknown)}: "
                f"valid fields are {', '.join(sorted(_FIELD_NAMES))}"
            )
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls.from_dict(json.loads(text))

    def replace(self, **kw) -> RunConfig:
        """A copy with some fields changed (unknown names raise ValueError)."""
        return RunConfig.from_dict({**self.to_dict(), **kw})

    def problems(self, gpus_available=None, te_available=None, gpu_name=None) -> list[str]:
        """Every reason this run cannot start (see layout_rules.problems); [] when it can."""
        return problems(self, gpus_available, te_available, gpu_name)

    def validate(self, gpus_available=None, te_available=None, gpu_name=None) -> RunConfig:
        """Return self, or raise InvalidLayout listing every problem, one line each."""
        found = problems(self, gpus_available, te_available, gpu_name)
        if found:
            raise InvalidLayout("\n".join(found))
        return self


_FIELDS = dataclasses.fields(RunConfig)
# a field with a default_factory reads MISSING here
_DEFAULTS = {f.name: f.default for f in _FIELDS}
# fields added after the first records were made
_ADDED_AFTER_RECORDS = (
    "compile",
    "runner",
    "cuda_graphs",
    "recompute_modules",
    "moe_balance",
    "stop_when_tight",
    "moe_aux_coeff",
    "moe_router_fp32",
    "grad_accum_fusion",
    "lr_warmup",
)
# their defaults: what a record made before the field existed ran with (records.to_frame fills them
# in)
ADDED_FIELD_DEFAULTS = {name: _DEFAULTS[name] for name in _ADDED_AFTER_RECORDS}
_FIELD_NAMES = {f.name for f in _FIELDS}


def trainer_config(cfg: RunConfig) -> RunConfig:
    """The trainer's twin of a peer config (runner megatron-lm): layout-invariant init, the
    trainer's default; megalab.jobs.peer hands it on."""
    return cfg.replace(runner="megalab", init="layout_invariant")
