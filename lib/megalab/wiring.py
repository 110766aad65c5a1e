"""RunConfig -> Megatron Core objects: the trainer's wiring, kept out of its loop.

    parallel, config, ddp_config, optim_config = megatron_configs(cfg)   # the one long-name mapping
    model, optimizer, scheduler = build_training(cfg, chunks, config, ddp_config, optim_config, device)
    after_first_step = wire_schedule(config, model, optimizer, ddp_config)
    before_step = graph_capture(cfg, config, model, optimizer, ddp_config)   # --cuda-graphs te

What Megatron-LM's pretrain() does between parsing its arguments and its loop (arguments.py defaults,
setup_model_and_optimizer, the config hooks of train()), for the subset of features megalab.train
uses. torch and Megatron are imported inside the functions: megalab.train imports this module before
it sets the environment variables that CUDA and torch._dynamo read when they load.
"""

import importlib.util

from megalab import theory
from megalab.runs.config import hierarchical_cp
from megalab.weights import init_layout_invariant

MOE_AUX_LOSS_COEFF = 1e-2
GRAPH_WARMUP_STEPS = 1  # eager steps before TE's capture: inside the steps a record drops (drop_first_3)


# -- RunConfig -> Megatron's config objects -------------------------------------------------------
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
    recompute = {"none": {}, "selective": dict(recompute_granularity="selective",
                                               recompute_modules=list(cfg.recompute_module_names)),
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
        # wgrad GEMMs accumulate straight into the fp32 main_grad: TE's linears do it themselves, Megatron's
        # own linears (the output layer, the local spec) need Apex's kernel (see with_wgrad_fusion)
        gradient_accumulation_fusion=te or have("fused_weight_gradient_mlp_cuda"),
        cross_entropy_loss_fusion=te, cross_entropy_fusion_impl="te" if te else "native",
        transformer_impl="transformer_engine" if te else "local",
        # mixture of experts
        num_moe_experts=cfg.experts or None, moe_router_topk=cfg.topk,
        moe_ffn_hidden_size=cfg.moe_ffn_size if moe else None, moe_aux_loss_coeff=MOE_AUX_LOSS_COEFF if moe and cfg.moe_balance != "none" else 0.0,
        moe_router_load_balancing_type="none" if cfg.moe_balance == "none" else "aux_loss",
        moe_router_force_load_balancing=cfg.moe_balance == "force",
        moe_grouped_gemm=te and moe, moe_router_pre_softmax=cfg.topk == 1,
        moe_permute_fusion=te and moe, moe_router_fusion=te and moe,  # TE's fused token sort and top-k/aux loss
        # alltoall makes a CUDA stream when built; dispatchers hold no parameters, so counts agree
        moe_token_dispatcher_type="allgather" if dry_run else cfg.moe_dispatcher,
        **recompute[cfg.recompute],
        # CUDA graphs (Megatron-LM's --cuda-graph-impl): TE's RNG tracker keeps dropout graph-safe; MoE layers
        # capture attention and the router only (their expert compute has data-dependent shapes)
        cuda_graph_impl={"none": "none", "local": "local", "te": "transformer_engine"}[cfg.cuda_graphs],
        cuda_graph_scope=["attn", "moe_router", "moe_preprocess"] if moe and cfg.cuda_graphs != "none" else [],
        cuda_graph_warmup_steps=GRAPH_WARMUP_STEPS, use_te_rng_tracker=cfg.cuda_graphs != "none",
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
    """Hierarchical CP sizes as a list, as Megatron takes them; None for flat CP (or no CP)."""
    sizes = hierarchical_cp(cfg) if cfg.cp > 1 else None
    return list(sizes) if sizes else None


def environment(cfg) -> dict:
    """Variables the run needs before CUDA and Transformer Engine start (the trainer sets them; the peer
    gets the same, megalab.peer): one hardware queue with TP or CP, so communication issued before a GEMM
    overlaps it (Megatron-LM asserts it on Hopper); CUTLASS's grouped GEMM for TE's experts (one kernel for
    all experts instead of one cuBLAS call each)."""
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if cfg.tp > 1 or cfg.cp > 1 else {}
    if cfg.experts and cfg.impl == "te":
        env["NVTE_USE_CUTLASS_GROUPED_GEMM"] = "1"
    return env


def with_wgrad_fusion(config, build):
    """build() the model chunks with the wgrad GEMMs accumulating into main_grad wherever a kernel exists.

    Transformer Engine's linears fuse it themselves (fuse_wgrad_accumulation); Megatron's ColumnParallelLinear
    and RowParallelLinear (the output layer) need Apex's fused_weight_gradient_mlp_cuda and refuse to build
    without it. Without Apex they are built with the check passed, then set back to the unfused path. On the
    one-GPU MoE model this removes 8,500 grad additions and halves the kernels per step (session 10 probes)."""
    from megatron.core.tensor_parallel import layers

    if not config.gradient_accumulation_fusion or layers._grad_accum_fusion_available:
        return build()
    layers._grad_accum_fusion_available = True
    try:
        chunks = build()
    finally:
        layers._grad_accum_fusion_available = False
    for chunk in chunks:
        for m in chunk.modules():
            if isinstance(m, (layers.ColumnParallelLinear, layers.RowParallelLinear)):
                m.gradient_accumulation_fusion = False
    return chunks


def patch_moe_router_without_te(cfg) -> None:
    """megatron-core 0.16.1 bug: without Transformer Engine the MoE router's gating GEMM reads a name that
    was never defined (moe_utils.te_general_gemm -> NameError at the first forward). Define it as None,
    the value the code tests for when TE is absent (seen on the GPU host: local spec, EP=4)."""
    if cfg.experts and importlib.util.find_spec("transformer_engine") is None:
        from megatron.core.transformer.moe import moe_utils
        if not hasattr(moe_utils, "te_general_gemm"):
            moe_utils.te_general_gemm = None


def _wrap_once(owner, name: str, marker: str, wrap) -> None:
    """Replace owner.<name> by wrap(original), marked with the attribute `marker`: a second call in the same
    process (another run, a test) finds the mark and leaves the first wrapper in place."""
    real = getattr(owner, name)
    if getattr(real, marker, False):
        return
    wrapped = wrap(real)
    setattr(wrapped, marker, True)
    setattr(owner, name, wrapped)


def copy_mlp_bias_under_recompute(cfg) -> None:
    """megatron-core 0.16.1 bug: Megatron's MLP returns its fc2 bias *parameter* (added later, fused with
    dropout). Under recompute_modules=mlp that parameter leaves the CheckpointFunction as one of its outputs,
    autograd routes the parameter's gradient back into the checkpoint node, and each backward re-runs the
    node inside itself without end: nested recomputes until memory is gone (131 GiB at the first step of a
    4-layer gpt-1.2b, session 12; a 2-layer CPU run nests deeper every second). Models without biases (the
    Llama-style presets) are not affected. Return a copy of the bias, made inside the checkpoint: the same
    values, and its gradient reaches the parameter through the recomputed forward."""
    if cfg.recompute != "selective" or "mlp" not in cfg.recompute_module_names:
        return
    from megatron.core.transformer.mlp import MLP

    def wrap(forward):
        def mlp_forward(self, *args, **kwargs):
            out, bias = forward(self, *args, **kwargs)
            return out, None if bias is None else bias.clone()
        return mlp_forward

    _wrap_once(MLP, "forward", "copies_bias", wrap)


def guard_empty_grouped_gemm(cfg, tex=None) -> None:
    """Transformer Engine 2.11 bug (TE pull request 3037): with NVTE_USE_CUTLASS_GROUPED_GEMM=1 a grouped GEMM
    whose groups are all empty reaches CUTLASS with zero GEMMs and kills the process (SIGSEGV). MoE routing
    makes such calls: a micro-batch that sends no token to any of this rank's experts (both top-2 EP 2 runs
    of chapter 06, session 12, at step 7). The call has nothing to multiply: do what TE does for each empty
    group (zero the outputs it does not accumulate into, the bias gradients, the GELU inputs) and skip it."""
    if not environment(cfg).get("NVTE_USE_CUTLASS_GROUPED_GEMM"):
        return
    if tex is None:
        import transformer_engine_torch as tex

    def wrap(real):
        def grouped_gemm(A, transa, B, transb, D, D_type, m_splits, bias, bias_type, single_output, pre_gelu_out,
                         grad, workspace, workspace_size, accumulate, *rest):
            if any(a.numel() and b.numel() for a, b in zip(A, B)):
                return real(A, transa, B, transb, D, D_type, m_splits, bias, bias_type, single_output,
                            pre_gelu_out, grad, workspace, workspace_size, accumulate, *rest)
            outputs = [] if single_output or D is None or accumulate else D
            for t in [*outputs, *(bias if grad else []), *pre_gelu_out]:
                if t.numel():
                    t.zero_()
            return bias
        return grouped_gemm

    _wrap_once(tex, "te_general_grouped_gemm", "skips_empty", wrap)


def guard_empty_permutation(cfg) -> None:
    """Transformer Engine 2.11's fused permutation (Megatron's moe_permute_fusion) mishandles a rank whose
    experts receive no token, which the allgather dispatcher meets at top-2 on EP 2:
    - its unpermute answers zero permuted tokens with an empty tensor, where Megatron's unfused path returns
      restore_shape's zeros, and the dispatcher's reduce-scatter then fails ("shape '[4096, 1, 1024]' is
      invalid for input of size 0", session 13). Answer with the zeros, still tied to the (empty) expert
      outputs so their backward runs as it does for a token;
    - its permute to zero output tokens has a backward that reads a ctx.probs its forward never set
      ("'_moe_permute_mask_mapBackward' object has no attribute 'probs'", session 15). Send those calls
      through Megatron's unfused permute, whose empty index_select has an ordinary backward.
    A count still on the GPU is left alone (reading it would add a sync to every dispatch)."""
    if not (cfg.experts and cfg.impl == "te"):
        return
    import torch
    from megatron.core.transformer.moe import token_dispatcher

    def no_tokens(count) -> bool:
        return isinstance(count, int) and count == 0 or (
            torch.is_tensor(count) and not count.is_cuda and int(count) == 0)

    def wrap_permute(real):
        def permute(tokens, routing_map, *args, num_out_tokens=None, fused=False, **kwargs):
            fused = fused and not no_tokens(num_out_tokens)
            return real(tokens, routing_map, *args, num_out_tokens=num_out_tokens, fused=fused, **kwargs)
        return permute

    def wrap_unpermute(real):
        def unpermute(permuted_tokens, sorted_indices, restore_shape, *args, fused=False, **kwargs):
            if fused and permuted_tokens.numel() == 0:
                return permuted_tokens.new_zeros(restore_shape) + permuted_tokens.sum()
            return real(permuted_tokens, sorted_indices, restore_shape, *args, fused=fused, **kwargs)
        return unpermute

    _wrap_once(token_dispatcher, "permute", "empty_ok", wrap_permute)
    _wrap_once(token_dispatcher, "unpermute", "empty_ok", wrap_unpermute)


# -- training state: Megatron-LM's setup_model_and_optimizer and train() wiring -------------------
def build_training(cfg, chunks, config, ddp_config, optim_config, device):
    """Float16Module -> DistributedDataParallel per chunk, get_megatron_optimizer, warm-up + cosine LR."""
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.optimizer import get_megatron_optimizer, get_standard_config_overrides
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.transformer.module import Float16Module

    if cfg.init == "layout_invariant":
        init_layout_invariant(chunks, cfg, device)
    model = [Float16Module(config, c) for c in chunks]  # bf16 weights; the fp32 main copy lives in the optimizer
    model = on_capture_stream(cfg, lambda: [DistributedDataParallel(config, ddp_config, m, disable_bucketing=i > 0)
                                            for i, m in enumerate(model)])  # later chunks overlap anyway
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


def on_capture_stream(cfg, build):
    """build() (Megatron's DDP wrappers) on the stream that torch.cuda.graph captures on, when CUDA graphs are on.
    DDP keeps each parameter's AccumulateGrad node, and a kept node stays tied to the stream current when it was
    made: built on the default stream, the first captured backward syncs with it and the capture is invalidated
    (session 11's --cuda-graphs te run: cudaErrorStreamCaptureInvalidated, PyTorch warning that an AccumulateGrad
    node's stream differs from its producer's). Megatron-LM builds DDP on the capture stream for this reason
    (training.py; pull requests 2852 and 6021); TE's make_graphed_callables and Megatron's local capture both
    capture on torch.cuda.graph's default capture stream. Where torch offers it, a stale stream is overridden."""
    import torch
    if cfg.cuda_graphs == "none" or not torch.cuda.is_available():
        return build()
    if hasattr(torch.autograd.graph, "set_override_stale_capture_stream"):
        torch.autograd.graph.set_override_stale_capture_stream(True)
    if torch.cuda.graph.default_capture_stream is None:
        torch.cuda.graph.default_capture_stream = torch.cuda.Stream()
    stream, current = torch.cuda.graph.default_capture_stream, torch.cuda.current_stream()
    stream.wait_stream(current)
    with torch.cuda.stream(stream):
        built = build()
    current.wait_stream(stream)
    return built


def fork_rng_for_local_capture(cfg) -> None:
    """Megatron's local capture (create_cudagraphs, called by forward_backward_func at the end of a step) runs
    outside the TP RNG fork that TransformerBlock puts around its layers under sequence parallelism, so the
    graphed dropout of the sequence-parallel region would draw from the default generator, the same on every TP
    rank. TE's capture forks there (TECudaGraphHelper.create_cudagraphs); this gives the local one the same."""
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


def graph_capture(cfg, config, model, optimizer, ddp_config):
    """Megatron-LM's train() for --cuda-graph-impl transformer_engine: after GRAPH_WARMUP_STEPS eager steps,
    capture every layer's forward and backward per micro-batch in flight (TECudaGraphHelper, which reads
    Megatron's micro-batch calculator); later steps replay them. Returns the function to call before each
    step; its `release()` deletes the graphs after the loop, as Megatron-LM's train() does before it ends
    (session 18: both captures trained all 20 steps, then every rank hung at exit until the time limit).
    The local implementation needs no call before a step: forward_backward_func records on the first step
    and captures at its end (create_cudagraphs in pipeline_parallel/schedules.py)."""
    if cfg.cuda_graphs != "te":
        before_step = lambda step: None  # noqa: E731
        before_step.release = lambda: None
        if cfg.cuda_graphs == "local":
            from megatron.core.transformer import cuda_graphs
            before_step.release = cuda_graphs.delete_cuda_graphs
        return before_step
    import torch
    from megatron.core.num_microbatches_calculator import init_num_microbatches_calculator
    from megatron.core.transformer.cuda_graphs import TECudaGraphHelper

    init_num_microbatches_calculator(torch.distributed.get_rank(), None, cfg.gbs, cfg.mbs, cfg.dp)
    helper = TECudaGraphHelper(model, config, cfg.seq, cfg.mbs, optimizers=[optimizer])
    hooks_off = ddp_config.overlap_param_gather  # the param all-gather pre-hooks run outside the graphs

    def before_step(step):
        if step != config.cuda_graph_warmup_steps or helper.graphs_created():
            return
        for m in model if hooks_off else ():
            m.disable_forward_pre_hook(param_sync=False)
        helper.create_cudagraphs()
        if hooks_off:
            for m in model:
                m.enable_forward_pre_hook()
            helper.cuda_graph_set_manual_hooks()

    def release():
        if helper.graphs_created():
            helper.delete_cuda_graphs()
    before_step.release = release
    return before_step


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
