"""Workarounds of upstream bugs (Megatron Core 0.16.1, Transformer Engine 2.11), in one place.

    workarounds.apply(cfg, dry_run)     # once, after the process groups, before the model is built

Each entry of WORKAROUNDS names the bug, the versions it was seen in and when to delete it. A patch
acts only where the run's config meets the bug, and patches a function once per process (a second
run or a test in the same process finds its mark). torch, Megatron and TE are imported inside the
patches.
"""

import importlib.util
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Workaround:
    patch: Callable  # patch(cfg): patches the process where this run meets the bug
    bug: str
    versions: str
    delete_when: str
    runs: str = "always"  # "always", "gpu" (not in a dry run) or "dry_run"

    @property
    def name(self) -> str:
        return self.patch.__name__


def _wrap_once(owner, name: str, marker: str, wrap) -> None:
    """Replace owner.<name> by wrap(original), marked with the attribute `marker`: a second call in
    the same process (another run, a test) finds the mark and leaves the first wrapper in place."""
    real = getattr(owner, name)
    if getattr(real, marker, False):
        return
    wrapped = wrap(real)
    setattr(wrapped, marker, True)
    setattr(owner, name, wrapped)


def patch_moe_router_without_te(cfg) -> None:
    """Define moe_utils.te_general_gemm as None, the value the code tests for when TE is absent."""
    if cfg.experts and importlib.util.find_spec("transformer_engine") is None:
        from megatron.core.transformer.moe import moe_utils

        if not hasattr(moe_utils, "te_general_gemm"):
            moe_utils.te_general_gemm = None


def copy_mlp_bias_under_recompute(cfg) -> None:
    """Return a copy of the MLP's bias, made inside the checkpoint: the same values, and its
    gradient reaches the parameter through the recomputed forward. Models without biases (the
    Llama-style presets) are not affected."""
    if cfg.recompute != "selective" or "mlp" not in cfg.recompute_module_names:
        return
    from megatron.core.transformer.mlp import MLP

    def wrap(forward):
        def mlp_forward(self, *args, **kwargs):
            out, bias = forward(self, *args, **kwargs)
            return out, None if bias is None else bias.clone()

        return mlp_forward

    _wrap_once(MLP, "forward", "copies_bias", wrap)


# transformer_engine_torch.te_general_grouped_gemm's leading positional parameters (TE 2.11)
GROUPED_GEMM_ARGS = (
    "A", "transa", "B", "transb", "D", "D_type", "m_splits", "bias", "bias_type", "single_output",
    "pre_gelu_out", "grad", "workspace", "workspace_size", "accumulate",
)  # fmt: skip


def guard_empty_grouped_gemm(cfg, tex=None) -> None:
    """A call with nothing to multiply does what TE does for each empty group (zero the outputs it
    does not accumulate into, the bias gradients, the GELU inputs) and skips the kernel."""
    from megalab.train.wiring import environment

    if not environment(cfg).get("NVTE_USE_CUTLASS_GROUPED_GEMM"):
        return
    if tex is None:
        import transformer_engine_torch as tex

    def wrap(real):
        def grouped_gemm(*args):
            a = dict(zip(GROUPED_GEMM_ARGS, args))  # TE 2.11's positional signature, then the rest
            if any(x.numel() and y.numel() for x, y in zip(a["A"], a["B"])):
                return real(*args)
            d, bias = a["D"], a["bias"]
            outputs = [] if a["single_output"] or d is None or a["accumulate"] else d
            for t in [*outputs, *(bias if a["grad"] else []), *a["pre_gelu_out"]]:
                if t.numel():
                    t.zero_()
            return bias

        return grouped_gemm

    _wrap_once(tex, "te_general_grouped_gemm", "skips_empty", wrap)


def guard_empty_permutation(cfg) -> None:
    """An unpermute of zero tokens answers restore_shape's zeros, still tied to the (empty) expert
    outputs so their backward runs as it does for a token; a permute to zero tokens goes through
    Megatron's unfused permute, whose empty index_select has an ordinary backward. A count still on
    the GPU is left alone (reading it would add a sync to every dispatch)."""
    if not (cfg.experts and cfg.impl == "te"):
        return
    import torch
    from megatron.core.transformer.moe import token_dispatcher

    def no_tokens(count) -> bool:
        return (
            isinstance(count, int)
            and count == 0
            or (torch.is_tensor(count) and not count.is_cuda and int(count) == 0)
        )

    def wrap_permute(real):
        def permute(tokens, routing_map, *args, num_out_tokens=None, fused=False, **kwargs):
            fused = fused and not no_tokens(num_out_tokens)
            return real(
                tokens, routing_map, *args, num_out_tokens=num_out_tokens, fused=fused, **kwargs
            )

        return permute

    def wrap_unpermute(real):
        def unpermute(permuted_tokens, sorted_indices, restore_shape, *args, fused=False, **kwargs):
            if fused and permuted_tokens.numel() == 0:
                return permuted_tokens.new_zeros(restore_shape) + permuted_tokens.sum()
            return real(
                permuted_tokens, sorted_indices, restore_shape, *args, fused=fused, **kwargs
            )

        return unpermute

    _wrap_once(token_dispatcher, "permute", "empty_ok", wrap_permute)
    _wrap_once(token_dispatcher, "unpermute", "empty_ok", wrap_unpermute)


def fork_rng_for_local_capture(cfg) -> None:
    """Run Megatron's local capture inside the TP RNG fork, as TE's capture does
    (TECudaGraphHelper.create_cudagraphs)."""
    if cfg.cuda_graphs != "local" or not cfg.sp:
        return
    from megatron.core.pipeline_parallel import schedules

    def wrap(real):
        def create_cudagraphs(*args, **kwargs):
            from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

            with get_cuda_rng_tracker().fork():
                return real(*args, **kwargs)

        return create_cudagraphs

    _wrap_once(schedules, "create_cudagraphs", "rng_forked", wrap)


def cuda_stays_on_cpu(cfg) -> None:
    """Tensor.cuda() returns the tensor itself, for the rest of the dry run's process."""
    import torch

    torch.Tensor.cuda = lambda self, *a, **k: self


WORKAROUNDS = (
    Workaround(
        patch_moe_router_without_te,
        bug="Without Transformer Engine the MoE router's gating GEMM reads "
        "moe_utils.te_general_gemm, a name "
        "never defined then: NameError at the first forward (local spec with experts).",
        versions="megatron-core 0.16.1",
        delete_when="moe_utils defines te_general_gemm without TE (import "
        "megatron.core.transformer.moe.moe_utils "
        "in a venv without TE and read it).",
    ),
    Workaround(
        copy_mlp_bias_under_recompute,
        bug="MLP returns its fc2 bias *parameter*; under recompute_modules=mlp it leaves the "
        "CheckpointFunction "
        "as an output, autograd routes its gradient back into the checkpoint node, and each "
        "backward "
        "re-runs the node inside itself: nested recomputes until memory is gone (131 GiB at the "
        "first "
        "step of a 4-layer gpt-1.2b).",
        versions="megatron-core 0.16.1",
        delete_when="tests/test_train_cpu.py's MLP-recompute test passes with this entry removed.",
    ),
    Workaround(
        guard_empty_grouped_gemm,
        bug="With NVTE_USE_CUTLASS_GROUPED_GEMM=1 a grouped GEMM whose groups are all empty "
        "reaches CUTLASS "
        "with zero GEMMs and kills the process (SIGSEGV): a micro-batch that routes no token to "
        "any of "
        "this rank's experts (chapter 06's top-2 EP 2 runs).",
        versions="transformer-engine 2.11 (TE pull request 3037)",
        delete_when="the pinned TE contains pull request 3037.",
        runs="gpu",
    ),
    Workaround(
        guard_empty_permutation,
        bug="TE's fused permutation (moe_permute_fusion) on a rank whose experts receive no "
        "token: its "
        "unpermute returns an empty tensor where Megatron's unfused path returns restore_shape's "
        "zeros "
        "(the allgather dispatcher's reduce-scatter then fails), and its permute to zero tokens "
        "has a "
        "backward that reads a ctx.probs its forward never set.",
        versions="transformer-engine 2.11 with megatron-core 0.16.1",
        delete_when="chapter 06's top-2 EP 2 allgather run trains on a GPU with this entry "
        "removed.",
        runs="gpu",
    ),
    Workaround(
        fork_rng_for_local_capture,
        bug="Megatron's local capture (create_cudagraphs, called by forward_backward_func at the "
        "end of a "
        "step) runs outside the TP RNG fork that TransformerBlock puts around its layers under "
        "sequence "
        "parallelism: the graphed dropout of the sequence-parallel region draws the same numbers "
        "on every "
        "TP rank.",
        versions="megatron-core 0.16.1",
        delete_when="schedules.create_cudagraphs forks the TP RNG tracker itself under "
        "sequence_parallel.",
    ),
    Workaround(
        cuda_stays_on_cpu,
        bug="LanguageModule.setup_embeddings_and_output_layer moves the shared embedding weight "
        "with .cuda() "
        "before its all-reduce over the embedding group, even with use_cpu_initialization: the "
        "dry run "
        "(gloo on CPU) cannot build a model whose embeddings are tied.",
        versions="megatron-core 0.16.1",
        delete_when="a dry run with tied embeddings builds on a machine without CUDA with this "
        "entry removed.",
        runs="dry_run",
    ),
)


def apply(cfg, dry_run: bool = False) -> list[str]:
    """Patch what this run needs, once, before the model is built; returns the entries' names
    considered."""
    wanted = {"always", "dry_run" if dry_run else "gpu"}
    done = []
    for w in WORKAROUNDS:
        if w.runs in wanted:
            w.patch(cfg)
            done.append(w.name)
    return done
