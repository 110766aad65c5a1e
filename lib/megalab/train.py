"""Train a GPT with Megatron Core 0.16.1: one file, read top to bottom.

    torchrun --nproc_per_node=4 -m megalab.train --preset gpt-1.2b --tp 2 --pp 2 --mbs 4 --gbs 64
    torchrun --nproc_per_node=4 -m megalab.train --preset gpt-1.2b --tp 2 --sp --dist-opt --overlap ...
    torchrun --nproc_per_node=2 -m megalab.train --layers 4 --hidden 128 --heads 4 --vocab 1024 \\
        --seq 64 --impl local --tp 2 --dry-run            # CPU: build the shards, count, exit

Flags: every RunConfig field (megalab.config.add_config_args), plus --run-dir DIR (where --profile
writes), --dry-run (gloo on CPU: build every model chunk, print parameter counts, exit 0; Megatron
cannot run a forward pass on CPU) and --profile (torch.profiler trace of steps 5-7 on rank 0, and a
kernel-time table by category; needs --iters >= 8). --gpus defaults to the torchrun world size.

Output is the metrics protocol of megalab.metrics, one JSON object per line: a budget line
(rank 0) before step 0, a step line every step and a summary line at the end (rank 0 too: the loss
of the last pipeline stage reaches it in the per-step max-reduction). Errors are one JSON line too:
{"kind": "error", "status": "invalid"|"oom", ...}, exit code 2 (invalid) or 1 (oom).

Layout-invariant init (--init layout_invariant, the default). Megatron draws each rank's weights
from a generator seeded per (pp, tp) rank, so two layouts start from different weights and their
loss curves are not comparable step by step. We re-draw every parameter from a generator seeded by
(seed, global parameter name) - layer number and expert number made global - generate the full
unsharded tensor and keep this rank's slice. Together with data that depends only on the global
sample number (megalab.data) and a vocabulary that is not padded per tp (cfg.vocab is used as
is; Megatron only needs it divisible by tp), every layout trains the same model on the same
batches, up to floating-point reduction order (megalab.weights). --init megatron keeps Megatron's own init.

CUDA_DEVICE_MAX_CONNECTIONS=1 is set (before CUDA starts) when tp > 1 or cp > 1: with one hardware
queue, kernels start in issue order, so the TP/SP communication Megatron issues before a GEMM runs
before it and overlaps with it (Megatron-LM asserts it on Hopper). It costs DP-overlap freedom.
"""

import argparse
import contextlib
import importlib.util
import json
import math
import os
import sys
import time
from functools import partial

from megalab import data, theory
from megalab.weights import init_layout_invariant
from megalab.config import InvalidLayout, hierarchical_cp
from megalab.flags import add_config_args, config_from_args

_T0 = time.time()  # start-up clock (torch and Megatron load later); $MEGALAB_LAUNCH_T wins if set
_LAUNCH = float(os.environ.get("MEGALAB_LAUNCH_T", _T0))
GIB = 2**30
MOE_AUX_LOSS_COEFF = 1e-2
PROFILE_STEPS = (5, 8)  # profile steps 5, 6, 7


def emit(obj: dict) -> None:
    """One metrics line, written in one call: ranks share the pipe and must not interleave."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# -- config ---------------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    p = add_config_args(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    p.add_argument("--run-dir", default=None, help="folder for --profile output (default: cwd)")
    p.add_argument("--dry-run", action="store_true", help="CPU + gloo: build the shards, count, exit")
    p.add_argument("--profile", action="store_true", help="torch.profiler trace of steps 5-7 (rank 0)")
    return p.parse_args(argv)


def checked_config(args):
    """RunConfig from the flags, gpus = world size; InvalidLayout says what to change."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cfg = config_from_args(args)
    if args.gpus is None:
        cfg = cfg.replace(gpus=world)
    problems = cfg.problems(te_available=importlib.util.find_spec("transformer_engine") is not None)
    if cfg.gpus != world:
        problems.append(f"gpus={cfg.gpus} but torchrun started {world} processes: pass --nproc_per_node={cfg.gpus}")
    if problems:
        raise InvalidLayout("\n".join(problems))
    return cfg


def megatron_configs(cfg, dry_run: bool = False):
    """The one place Megatron's long names appear.

    RunConfig -> (initialize_model_parallel kwargs, TransformerConfig, DDP config, optimizer config).
    """
    import torch
    import torch.nn.functional as F
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    te, swiglu, moe = cfg.impl == "te", cfg.activation == "swiglu", cfg.experts > 0
    bias = theory.has_bias(cfg)  # theory counts parameters with the same rule
    have = lambda mod: importlib.util.find_spec(mod) is not None  # noqa: E731
    recompute = {"none": {}, "selective": dict(recompute_granularity="selective"),
                 "full": dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)}
    model = TransformerConfig(
        num_layers=cfg.layers, hidden_size=cfg.hidden, num_attention_heads=cfg.heads,
        num_query_groups=cfg.query_groups, ffn_hidden_size=cfg.ffn_size,
        normalization=cfg.norm, add_bias_linear=bias, gated_linear_unit=swiglu,
        activation_func=F.silu if swiglu else F.gelu,
        hidden_dropout=cfg.dropout, attention_dropout=cfg.dropout, init_method_std=0.02,
        # layout
        tensor_model_parallel_size=cfg.tp, pipeline_model_parallel_size=cfg.pp,
        virtual_pipeline_model_parallel_size=cfg.vpp if cfg.vpp > 1 else None,
        context_parallel_size=cfg.cp, cp_comm_type=cfg.cp_comm, hierarchical_context_parallel_sizes=_hierarchical(cfg),
        expert_model_parallel_size=cfg.ep, expert_tensor_parallel_size=cfg.etp, sequence_parallel=cfg.sp,
        # precision
        bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        fp8="hybrid" if cfg.fp8 else None, fp8_recipe="delayed", fp8_margin=0,
        fp8_amax_history_len=1024, fp8_amax_compute_algo="max",
        # Megatron's init also tags TP weights (tensor_model_parallel, partition_dim) for the grad
        # norm and the optimizer, so it always runs on GPU; the dry run skips it (counts only)
        use_cpu_initialization=dry_run, perform_initialization=not dry_run,
        # pipeline schedule, as Megatron-LM's defaults (arguments.py): interleaving overlaps p2p
        deallocate_pipeline_outputs=True, overlap_p2p_comm=cfg.vpp > 1, batch_p2p_comm=cfg.vpp == 1,
        # fusions (Megatron-LM defaults where the kernels exist on this machine)
        bias_activation_fusion=swiglu or (bias and not moe), bias_dropout_fusion=True,  # experts fuse swiglu only
        masked_softmax_fusion=have("scaled_upper_triang_masked_softmax_cuda"),  # local attention only
        apply_rope_fusion=te and cfg.position == "rope", persist_layer_norm=te,
        # fused wgrad accumulation into fp32 main_grad: the output layer needs Apex's extension
        gradient_accumulation_fusion=have("fused_weight_gradient_mlp_cuda"),
        cross_entropy_loss_fusion=te, cross_entropy_fusion_impl="te" if te else "native",
        transformer_impl="transformer_engine" if te else "local",
        # mixture of experts
        num_moe_experts=cfg.experts or None, moe_router_topk=cfg.topk,
        moe_ffn_hidden_size=cfg.moe_ffn_size if moe else None, moe_aux_loss_coeff=MOE_AUX_LOSS_COEFF if moe else 0.0,
        moe_router_load_balancing_type="aux_loss", moe_grouped_gemm=te and moe, moe_router_pre_softmax=cfg.topk == 1,
        # alltoall makes a CUDA stream when built; dispatchers hold no parameters, so counts agree
        moe_token_dispatcher_type="allgather" if dry_run else cfg.moe_dispatcher,
        **recompute[cfg.recompute],
    )
    parallel = dict(
        tensor_model_parallel_size=cfg.tp, pipeline_model_parallel_size=cfg.pp,
        virtual_pipeline_model_parallel_size=cfg.vpp if cfg.vpp > 1 else None, context_parallel_size=cfg.cp,
        hierarchical_context_parallel_sizes=_hierarchical(cfg),
        expert_model_parallel_size=cfg.ep, expert_tensor_parallel_size=cfg.etp)
    ddp = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=cfg.overlap,
        overlap_param_gather=cfg.overlap and cfg.dist_opt, use_distributed_optimizer=cfg.dist_opt,
        align_param_gather=cfg.overlap and cfg.dist_opt and cfg.vpp > 1, bucket_size=None)
    optim = OptimizerConfig(
        optimizer="adam", lr=cfg.lr, min_lr=cfg.lr / 10, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95,
        adam_eps=1e-8, clip_grad=1.0, bf16=True, params_dtype=torch.bfloat16,
        use_distributed_optimizer=cfg.dist_opt, overlap_param_gather=cfg.overlap and cfg.dist_opt)
    return parallel, model, ddp, optim


def _hierarchical(cfg):
    sizes = hierarchical_cp(cfg) if cfg.cp > 1 else None
    return list(sizes) if sizes else None


# -- initialize_distributed -----------------------------------------------------------------------
def initialize_distributed(cfg, parallel: dict, dry_run: bool):
    """torch.distributed (NCCL on GPU, gloo on CPU) and Megatron's parallel groups; returns the device."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    if dry_run:
        torch.distributed.init_process_group("gloo")
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        torch.distributed.init_process_group("nccl")  # lazy: each group's NCCL starts at its first collective
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 leftovers (router, loss) on tensor cores
    ps.initialize_model_parallel(**parallel)  # groups in Megatron's default order tp-cp-ep-dp-pp
    # Megatron-LM's _set_random_seed: a seed per pipeline stage; the tracker forks tp/ep streams
    seed = cfg.seed + 100 * ps.get_pipeline_model_parallel_rank()
    torch.manual_seed(seed)
    if not dry_run:
        model_parallel_cuda_manual_seed(seed)
    return device


# -- model_provider -------------------------------------------------------------------------------
def model_provider(cfg, config, pre_process: bool, post_process: bool, vp_stage):
    """One GPTModel chunk: Transformer Engine layers (impl te) or Megatron's local ones."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_layer_local_spec, get_gpt_layer_with_transformer_engine_spec)

    experts = cfg.experts or None
    if cfg.impl == "te":  # TE reads the norm type from config.normalization; fuses it into the next GEMM
        spec = get_gpt_layer_with_transformer_engine_spec(experts, moe_grouped_gemm=bool(experts), qk_layernorm=False)
    else:
        spec = get_gpt_layer_local_spec(experts, moe_grouped_gemm=False, qk_layernorm=False, normalization=cfg.norm)
    return GPTModel(
        config, spec, vocab_size=cfg.vocab, max_sequence_length=cfg.seq,
        pre_process=pre_process, post_process=post_process, parallel_output=True,
        share_embeddings_and_output_weights=cfg.tied_embeddings,
        position_embedding_type="rope" if cfg.position == "rope" else "learned_absolute",
        vp_stage=vp_stage)


@contextlib.contextmanager
def _cuda_stays_on_cpu():
    """Dry run only: Megatron moves the tied output-layer copy with .cuda() (language_module.py)."""
    import torch
    cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *a, **k: self
    try:
        yield
    finally:
        torch.Tensor.cuda = cuda


def build_chunks(cfg, config, dry_run: bool) -> list:
    """One model chunk per virtual stage, as Megatron-LM's get_model (vp_stage tells each its layers)."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    chunks = []
    for i in range(cfg.vpp):
        vp = i if cfg.vpp > 1 else None
        pre = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp)
        post = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp)
        with _cuda_stays_on_cpu() if dry_run else contextlib.nullcontext():
            chunk = model_provider(cfg, config, pre, post, vp)
        for p in chunk.parameters():
            tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(p)
        if not dry_run:
            chunk.cuda(torch.cuda.current_device())  # norms and position embeddings start on CPU
        chunks.append(chunk)
    return chunks


# -- get_data_iterator ----------------------------------------------------------------------------
def get_data_iterator(cfg, device, n_chunks: int):
    """Per model chunk: this dp rank's micro-batches if the chunk embeds tokens or computes the loss, else None."""
    from megatron.core import parallel_state as ps

    vps = [i if cfg.vpp > 1 else None for i in range(n_chunks)]
    needs = [ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=v)
             or ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=v) for v in vps]
    if cfg.data:
        source = data.Indexed(cfg.data, cfg, cfg.iters * cfg.gbs, is_built_on_rank=lambda: any(needs))
    else:
        source = data.Synthetic(cfg.seed, cfg.vocab, cfg.seq)
    dp_rank = ps.get_data_parallel_rank()  # replica index among dp (cp ranks of a replica read alike)
    its = [data.microbatches(cfg, dp_rank, source, device) if n else None for n in needs]
    return its if cfg.vpp > 1 else its[0]


# -- forward_step_func ----------------------------------------------------------------------------
def loss_func(loss_mask, output_tensor):
    """Summed token loss, token count, and the pair for logging (pretrain_gpt.py's 3-tuple form).

    Megatron's schedule divides the sum by the token count and by num_microbatches
    (calculate_per_token_loss=False); DDP averages gradients over dp*cp.
    """
    import torch
    losses = output_tensor.view(-1).float()
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    return loss, num_tokens, {"lm loss": torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])}


def forward_step_func(data_iterator, model):
    """Next micro-batch (first/last stage) through the chunk; middle stages take the p2p input."""
    from megatron.core.utils import get_batch_on_this_cp_rank
    if data_iterator is None:
        return model(None, None, None), None  # not the last stage: the loss function is never called
    batch = get_batch_on_this_cp_rank(next(data_iterator))  # (b, s/cp): 2 of 2*cp sequence chunks
    out = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"], loss_mask=batch["loss_mask"])
    return out, partial(loss_func, batch["loss_mask"])


# -- outputs --------------------------------------------------------------------------------------
def budget(cfg, params_per_rank: list[int]) -> dict:
    return {"kind": "budget", "layout": theory.layout(cfg), "world_size": cfg.gpus,
            "params_total": theory.params(cfg)["total"], "params_per_rank": params_per_rank,
            "tokens_per_step": cfg.gbs * cfg.seq, "predicted_mem_gib": theory.memory(cfg)["total"],
            "num_microbatches": cfg.num_microbatches, "config": cfg.to_dict()}


def all_gather(value: float, device, dtype="float64") -> list:
    """value from every rank, in rank order (a CPU-GPU sync point)."""
    import torch
    dtype = getattr(torch, dtype)
    out = [torch.zeros(1, dtype=dtype, device=device) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(out, torch.tensor([value], dtype=dtype, device=device))
    return [t.item() for t in out]


def reduced_loss(losses: list) -> float | None:
    """Mean lm loss per token over the global batch, as Megatron-LM's train_step: sums over dp*cp."""
    import torch
    from megatron.core import parallel_state as ps
    if not ps.is_pipeline_last_stage(ignore_virtual=True):
        return None
    val = torch.vstack([x["lm loss"].view(-1) for x in losses]).sum(dim=0).float()
    torch.distributed.all_reduce(val, group=ps.get_data_parallel_group(with_context_parallel=True))
    return float(val[0] / val[1])


def max_over_ranks(device, loss: float | None) -> list[float]:
    """[loss, peak allocated GiB, peak reserved GiB], each the max over all ranks: one all-reduce (a
    CPU-GPU sync point) brings the last stage's loss to rank 0, whichever node holds that stage."""
    import torch
    t = torch.tensor([-math.inf if loss is None else loss, torch.cuda.max_memory_allocated() / GIB,
                      torch.cuda.max_memory_reserved() / GIB], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return t.tolist()


def profiler(run_dir: str):
    """torch.profiler over steps 5-7 (rank 0): trace_rank0.json, and profile.json with the kernel seconds
    per step by category (nccl, gemm, attention, other) and the kernel timeline of the last profiled step
    (megalab.metrics.kernel_timeline), which the record keeps: the book draws its figures from it."""
    import torch
    from megalab.metrics import kernel_seconds, kernel_timeline

    def write(prof):
        os.makedirs(run_dir, exist_ok=True)
        trace_path = os.path.join(run_dir, "trace_rank0.json")
        prof.export_chrome_trace(trace_path)
        with open(trace_path) as f:
            trace = json.load(f)
        steps = list(range(*PROFILE_STEPS))
        with open(os.path.join(run_dir, "profile.json"), "w") as f:
            json.dump({"steps": steps, "kernel_s_per_step": kernel_seconds(trace, steps),
                       "timeline": kernel_timeline(trace, steps[-1])}, f)

    first, end = PROFILE_STEPS
    return torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(wait=first - 1, warmup=1, active=end - first, repeat=1),
        on_trace_ready=write)


def peak_tflops() -> float | None:
    """Dense bf16 peak of this GPU (megalab.hardware), None if the table does not know it."""
    import torch
    from megalab import hardware
    try:
        return hardware.gpu_spec(torch.cuda.get_device_name()).peak_bf16_tflops
    except hardware.UnknownGPU:
        return None


def _patch_moe_router_without_te(cfg) -> None:
    """megatron-core 0.16.1 bug: without Transformer Engine the MoE router's gating GEMM reads a name that
    was never defined (moe_utils.te_general_gemm -> NameError at the first forward). Define it as None,
    the value the code tests for when TE is absent (seen on the GPU host: local spec, EP=4)."""
    if cfg.experts and importlib.util.find_spec("transformer_engine") is None:
        from megatron.core.transformer.moe import moe_utils
        if not hasattr(moe_utils, "te_general_gemm"):
            moe_utils.te_general_gemm = None


def is_oom(e: BaseException) -> bool:
    import torch
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e) or "CUBLAS_STATUS_ALLOC_FAILED" in str(e)


# -- training state: Megatron-LM's setup_model_and_optimizer and train() wiring ----------------------
def build_training(cfg, chunks, config, ddp_config, optim_config, device):
    """Float16Module -> DistributedDataParallel per chunk, get_megatron_optimizer, warm-up + cosine LR."""
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.optimizer import get_megatron_optimizer, get_standard_config_overrides
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.transformer.module import Float16Module

    if cfg.init == "layout_invariant":
        init_layout_invariant(chunks, cfg, device)
    model = [Float16Module(config, c) for c in chunks]  # bf16 weights; the fp32 main copy lives in the optimizer
    model = [DistributedDataParallel(config, ddp_config, m, disable_bucketing=i > 0)  # later chunks overlap anyway
             for i, m in enumerate(model)]
    if cfg.dp * cfg.cp > 1:
        for m in model:
            m.broadcast_params()  # replicas already agree (same seeds): cheap insurance, once
    optimizer = get_megatron_optimizer(optim_config, model, config_overrides=get_standard_config_overrides(optim_config))
    warmup = min(10, cfg.iters // 10)  # linear warm-up from 0, then cosine to lr/10 at the last step
    scheduler = OptimizerParamScheduler(
        optimizer, init_lr=0.0, max_lr=cfg.lr, min_lr=cfg.lr / 10, lr_warmup_steps=warmup,
        lr_decay_steps=cfg.iters, lr_decay_style="cosine", start_wd=0.1, end_wd=0.1,
        wd_incr_steps=cfg.iters, wd_incr_style="constant")
    return model, optimizer, scheduler


def wire_schedule(config, model, optimizer, ddp_config):
    """What Megatron-LM's train() wires into the config (training.py): loss scale, overlap hooks, and the
    grad finalisation that forward_backward_func calls at its end. Returns the function to call after the
    first step (Megatron-LM runs it without the param all-gather pre-hooks, then turns them on)."""
    from megatron.core.distributed import finalize_model_grads

    config.grad_scale_func = optimizer.scale_loss
    one = lambda fns: fns[0] if len(fns) == 1 else fns  # noqa: E731
    if ddp_config.overlap_grad_reduce:
        config.no_sync_func = one([m.no_sync for m in model])
        config.grad_sync_func = one([m.start_grad_sync for m in model])
    if ddp_config.align_param_gather:
        config.param_sync_func = one([m.start_param_sync for m in model])
    config.finalize_model_grads_func = finalize_model_grads  # dp reduce, sp norms, tied embeddings
    param_sync_func, hooks_off = config.param_sync_func, ddp_config.overlap_param_gather
    if hooks_off:
        for m in model:
            m.disable_forward_pre_hook(param_sync=False)
        config.param_sync_func = None

    def after_first_step():
        if hooks_off:
            for m in model:
                m.enable_forward_pre_hook()
            config.param_sync_func = param_sync_func
    return after_first_step


def step_line(cfg, step: int, loss, grad_norm, lr, step_time: float, mem: list, peak: float | None) -> dict:
    """The metrics protocol's step record (megalab.metrics parses it)."""
    tflops = theory.flops_per_step(cfg) / step_time / cfg.gpus / 1e12  # model FLOPs: recomputation not counted
    return {"kind": "step", "step": step, "loss": loss, "grad_norm": grad_norm, "lr": lr,
            "step_time_s": step_time, "tokens_per_s": cfg.gbs * cfg.seq / step_time,
            "tflops_per_gpu": tflops, "mfu": tflops / peak if peak else None,
            "mem_allocated_peak_gib": mem[0], "mem_reserved_peak_gib": mem[1]}


# -- main -----------------------------------------------------------------------------------------
def main(argv=None) -> None:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        cfg = checked_config(args)
    except InvalidLayout as e:  # before anything starts: no process group, no CUDA
        if rank == 0:
            emit({"kind": "error", "status": "invalid", "rank": rank, "message": str(e)})
            print(f"InvalidLayout: {str(e).splitlines()[0]}", file=sys.stderr, flush=True)
        sys.exit(2)
    if (cfg.tp > 1 or cfg.cp > 1) and not args.dry_run:
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # read when the CUDA context is created
    if not cfg.compile:  # read when Megatron's import loads torch._dynamo: its jit_fuser ops then run eagerly
        os.environ["TORCH_COMPILE_DISABLE"] = "1"
    try:
        train(cfg, args, rank)
    except Exception as e:
        if not is_oom(e):
            raise
        # one line per rank, then die at once: peers may hang in NCCL until torchrun kills them
        emit({"kind": "error", "status": "oom", "rank": rank, "error_type": "OutOfMemoryError",
              "message": str(e)[:500]})
        sys.stderr.flush()
        os._exit(1)


def train(cfg, args, rank: int) -> None:
    since_launch = lambda: round(time.time() - _LAUNCH, 2)  # noqa: E731
    startup = {"python": round(_T0 - _LAUNCH, 2)}  # where launch-to-first-step goes (seconds since launch)
    # Transformer Engine imports JAX, when it is installed, only to look for TE's JAX extension: 0.9 s of
    # one process's imports on the reference host (results/probes/importtime-*). This trainer is PyTorch only.
    sys.modules.setdefault("jax", None)
    import torch
    from megatron.core import parallel_state as ps

    parallel, config, ddp_config, optim_config = megatron_configs(cfg, args.dry_run)
    startup["imports"] = since_launch()
    device = initialize_distributed(cfg, parallel, args.dry_run)
    startup["process_groups"] = since_launch()
    _patch_moe_router_without_te(cfg)
    chunks = build_chunks(cfg, config, args.dry_run)
    n_params = sum(p.numel() for c in chunks for p in c.parameters())
    per_rank = [int(n) for n in all_gather(n_params, device, "int64")]

    if args.dry_run:  # count (and, for small models, run the layout-invariant init on CPU), then stop
        small = theory.params(cfg)["total"] <= 50_000_000
        checksum = init_layout_invariant(chunks, cfg, device) if cfg.init == "layout_invariant" and small else None
        emit({"kind": "params", "rank": rank, "tp_rank": ps.get_tensor_model_parallel_rank(),
              "pp_rank": ps.get_pipeline_model_parallel_rank(), "ep_rank": ps.get_expert_model_parallel_rank(),
              "params": n_params, "init_checksum": checksum})
        if rank == 0:
            emit(budget(cfg, per_rank))
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
        return

    startup["model"] = since_launch()
    model, optimizer, scheduler = build_training(cfg, chunks, config, ddp_config, optim_config, device)
    startup["training_state"] = since_launch()
    after_first_step = wire_schedule(config, model, optimizer, ddp_config)
    data_iterator = get_data_iterator(cfg, device, len(model))
    from megatron.core.optimizer_param_scheduler import get_canonical_lr_for_logging
    from megatron.core.pipeline_parallel import get_forward_backward_func
    forward_backward_func = get_forward_backward_func()  # no pipelining, 1F1B, or interleaved 1F1B

    prof = profiler(args.run_dir or ".") if args.profile and rank == 0 else None
    if rank == 0:
        emit(budget(cfg, per_rank))
    if prof is not None:
        prof.start()
    for m in model:
        m.train()
    startup_s, peak = None, peak_tflops()
    startup["loop"] = since_launch()
    # -- the loop: zero_grad -> forward_backward_func (ends with finalize_model_grads) -> step -> log ----
    for step in range(cfg.iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for m in model:
            m.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward_func(
            forward_step_func=forward_step_func, data_iterator=data_iterator, model=model,
            num_microbatches=cfg.num_microbatches, seq_length=cfg.seq, micro_batch_size=cfg.mbs,
            decoder_seq_length=cfg.seq, forward_only=False)
        lr = get_canonical_lr_for_logging(optimizer.param_groups)
        _, grad_norm, _ = optimizer.step()  # CPU-GPU sync point inside Megatron: the clip norm's .item()
        scheduler.step(increment=1)
        torch.cuda.synchronize()
        step_time = time.perf_counter() - t0
        if step == 0:
            startup_s = time.time() - _LAUNCH
            startup["first_step"] = round(startup_s, 2)
            after_first_step()
        loss, *mem = max_over_ranks(device, reduced_loss(losses))  # reduced_loss: on the last stage only
        if rank == 0:
            emit(step_line(cfg, step, loss, grad_norm, lr, step_time, mem, peak))
        if prof is not None:
            prof.step()

    if prof is not None:
        prof.stop()
    alloc = all_gather(torch.cuda.max_memory_allocated() / GIB, device)
    reserved = all_gather(torch.cuda.max_memory_reserved() / GIB, device)
    if rank == 0:
        from megalab import env
        emit({"kind": "summary", "steps": cfg.iters, "startup_s": startup_s, "startup_marks_s": startup,
              "mem_allocated_peak_gib_per_rank": alloc, "mem_reserved_peak_gib_per_rank": reserved,
              "env": env.fingerprint()})
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()

if __name__ == "__main__":
    main()
