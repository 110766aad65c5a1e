"""RunConfig -> Megatron Core objects: the trainer's wiring, kept out of its loop.

    os.environ.update(environment(cfg))                                   # before CUDA and TE start
    parallel, config, ddp_config, optim_config = megatron_configs(cfg)   # the one long-name mapping
    chunks = with_wgrad_fusion(config, build)                            # model chunks, fused wgrad
    model, optimizer, scheduler = build_training(cfg, chunks, config, ddp_config, optim_config)
    after_first_step = wire_schedule(config, model, optimizer, ddp_config)

What Megatron-LM's pretrain() does between parsing its arguments and its loop (arguments.py
defaults, setup_model_and_optimizer, the config hooks of train()), for the subset of features
megalab.train uses. torch and Megatron are imported inside the functions: the trainer imports this
module before it sets the environment variables that CUDA and torch._dynamo read when they load.
"""

import importlib.util

from megalab import theory
from megalab.runs.axes import AXES
from megalab.runs.config import hierarchical_cp

# eager steps before TE's capture: inside the steps a record drops (drop_first_3)
GRAPH_WARMUP_STEPS = 1


# -- RunConfig -> Megatron's config objects -------------------------------------------------------
def megatron_configs(cfg, dry_run: bool = False):
    """The one place Megatron's long names appear.

    RunConfig -> (initialize_model_parallel kwargs, TransformerConfig, DDP config, optimizer
    config).
    """
    import torch
    import torch.nn.functional as F
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    te, swiglu, moe = cfg.impl == "te", cfg.activation == "swiglu", cfg.experts > 0
    bias = theory.has_bias(cfg)  # theory counts parameters with the same rule
    have = lambda mod: importlib.util.find_spec(mod) is not None  # noqa: E731
    # initialize_model_parallel's arguments, and TransformerConfig's layout fields: the one mapping
    # (runs.axes)
    parallel = {a.mcore: getattr(cfg, a.short) for a in AXES if a.mcore}
    parallel.update(
        virtual_pipeline_model_parallel_size=cfg.vpp if cfg.vpp > 1 else None,
        hierarchical_context_parallel_sizes=_hierarchical(cfg),
    )
    recompute = {
        "none": {},
        "selective": dict(
            recompute_granularity="selective", recompute_modules=list(cfg.recompute_module_names)
        ),
        "full": dict(
            recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1
        ),
    }
    model = TransformerConfig(
        num_layers=cfg.layers,
        hidden_size=cfg.hidden,
        num_attention_heads=cfg.heads,
        num_query_groups=cfg.query_groups,
        ffn_hidden_size=cfg.ffn_size,
        normalization=cfg.norm,
        add_bias_linear=bias,
        gated_linear_unit=swiglu,
        activation_func=F.silu if swiglu else F.gelu,
        hidden_dropout=cfg.dropout,
        attention_dropout=cfg.dropout,
        init_method_std=0.02,
        # layout
        **parallel,
        cp_comm_type=cfg.cp_comm,
        sequence_parallel=cfg.sp,
        # precision
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        fp8="hybrid" if cfg.fp8 else None,
        fp8_recipe="delayed",
        fp8_margin=0,
        fp8_amax_history_len=1024,
        fp8_amax_compute_algo="max",
        # Megatron's init also tags TP weights (tensor_model_parallel, partition_dim) for the grad
        # norm and the optimizer, so it always runs on GPU; the dry run skips it (counts only)
        use_cpu_initialization=dry_run,
        perform_initialization=not dry_run,
        # pipeline schedule, as Megatron-LM's defaults (arguments.py): interleaving overlaps p2p
        deallocate_pipeline_outputs=True,
        overlap_p2p_comm=cfg.vpp > 1,
        batch_p2p_comm=cfg.vpp == 1,
        # fusions (Megatron-LM defaults where the kernels exist on this machine)
        # experts fuse swiglu only
        bias_activation_fusion=swiglu or (bias and not moe),
        bias_dropout_fusion=True,
        # local attention only
        masked_softmax_fusion=have("scaled_upper_triang_masked_softmax_cuda"),
        apply_rope_fusion=te and cfg.position == "rope",
        persist_layer_norm=te,
        # wgrad GEMMs accumulate straight into the fp32 main_grad: TE's linears do it themselves,
        # Megatron's own linears (the output layer, the local spec) need Apex's kernel (see
        # with_wgrad_fusion); grad_accum_fusion off matches Megatron-LM without Apex
        gradient_accumulation_fusion=cfg.grad_accum_fusion != "off"
        and (te or have("fused_weight_gradient_mlp_cuda")),
        cross_entropy_loss_fusion=te,
        cross_entropy_fusion_impl="te" if te else "native",
        transformer_impl="transformer_engine" if te else "local",
        # mixture of experts
        num_moe_experts=cfg.experts or None,
        moe_router_topk=cfg.topk,
        moe_ffn_hidden_size=cfg.moe_ffn_size if moe else None,
        moe_aux_loss_coeff=cfg.moe_aux_coeff if moe and cfg.moe_balance != "none" else 0.0,
        moe_router_dtype="fp32" if cfg.moe_router_fp32 else None,
        moe_router_load_balancing_type="none" if cfg.moe_balance == "none" else "aux_loss",
        moe_router_force_load_balancing=cfg.moe_balance == "force",
        moe_grouped_gemm=te and moe,
        moe_router_pre_softmax=cfg.topk == 1,
        # TE's fused token sort and top-k/aux loss
        moe_permute_fusion=te and moe,
        moe_router_fusion=te and moe,
        # alltoall makes a CUDA stream when built; dispatchers hold no parameters, so counts agree
        moe_token_dispatcher_type="allgather" if dry_run else cfg.moe_dispatcher,
        **recompute[cfg.recompute],
        # CUDA graphs (Megatron-LM's --cuda-graph-impl): TE's RNG tracker keeps dropout graph-safe;
        # MoE layers capture attention and the router only (their expert compute has data-dependent
        # shapes)
        cuda_graph_impl={"none": "none", "local": "local", "te": "transformer_engine"}[
            cfg.cuda_graphs
        ],
        cuda_graph_scope=["attn", "moe_router", "moe_preprocess"]
        if moe and cfg.cuda_graphs != "none"
        else [],
        cuda_graph_warmup_steps=GRAPH_WARMUP_STEPS,
        use_te_rng_tracker=cfg.cuda_graphs != "none",
    )
    ddp = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=cfg.overlap,
        overlap_param_gather=cfg.overlap and cfg.dist_opt,
        use_distributed_optimizer=cfg.dist_opt,
        align_param_gather=cfg.overlap and cfg.dist_opt and cfg.vpp > 1,
        bucket_size=None,
    )
    optim = OptimizerConfig(
        optimizer="adam",
        lr=cfg.lr,
        min_lr=cfg.lr / 10,
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_eps=1e-8,
        clip_grad=1.0,
        bf16=True,
        params_dtype=torch.bfloat16,
        use_distributed_optimizer=cfg.dist_opt,
        overlap_param_gather=cfg.overlap and cfg.dist_opt,
    )
    return parallel, model, ddp, optim


def _hierarchical(cfg):
    """Hierarchical CP sizes as a list, as Megatron takes them; None for flat CP (or no CP)."""
    sizes = hierarchical_cp(cfg) if cfg.cp > 1 else None
    return list(sizes) if sizes else None


def environment(cfg) -> dict:
    """Variables the run needs before CUDA and Transformer Engine start (the trainer sets them; the
    peer gets the same, megalab.peer): one hardware queue with TP or CP, so communication issued
    before a GEMM overlaps it (Megatron-LM asserts it on Hopper); CUTLASS's grouped GEMM for TE's
    experts (one kernel for all experts instead of one cuBLAS call each)."""
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if cfg.tp > 1 or cfg.cp > 1 else {}
    if cfg.experts and cfg.impl == "te":
        env["NVTE_USE_CUTLASS_GROUPED_GEMM"] = "1"
    return env


def with_wgrad_fusion(config, build):
    """build() the model chunks with the wgrad GEMMs accumulating into main_grad wherever a kernel
    exists.

    Transformer Engine's linears fuse it themselves (fuse_wgrad_accumulation); Megatron's
    ColumnParallelLinear and RowParallelLinear (the output layer) need Apex's
    fused_weight_gradient_mlp_cuda and refuse to build without it. Without Apex they are built with
    the check passed, then set back to the unfused path. On the one-GPU MoE model this removes 8,500
    grad additions and halves the kernels per step."""
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


# -- training state: Megatron-LM's setup_model_and_optimizer and train() wiring -------------------
def build_training(cfg, chunks, config, ddp_config, optim_config):
    """Float16Module -> DistributedDataParallel per chunk, get_megatron_optimizer, warm-up + cosine
    LR."""
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.optimizer import get_megatron_optimizer, get_standard_config_overrides
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.transformer.module import Float16Module

    # bf16 weights; the fp32 main copy lives in the optimizer
    model = [Float16Module(config, c) for c in chunks]
    model = on_capture_stream(
        cfg,
        lambda: [
            DistributedDataParallel(config, ddp_config, m, disable_bucketing=i > 0)
            # later chunks overlap anyway
            for i, m in enumerate(model)
        ],
    )
    if cfg.dp * cfg.cp > 1:
        for m in model:
            m.broadcast_params()  # replicas already agree (same seeds): cheap insurance, once
    optimizer = get_megatron_optimizer(
        optim_config, model, config_overrides=get_standard_config_overrides(optim_config)
    )
    # linear warm-up from 0, then cosine to lr/10 at the last step
    warmup = cfg.lr_warmup_steps
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=0.0,
        max_lr=cfg.lr,
        min_lr=cfg.lr / 10,
        lr_warmup_steps=warmup,
        lr_decay_steps=cfg.iters,
        lr_decay_style="cosine",
        start_wd=0.1,
        end_wd=0.1,
        wd_incr_steps=cfg.iters,
        wd_incr_style="constant",
    )
    return model, optimizer, scheduler


def on_capture_stream(cfg, build):
    """build() (Megatron's DDP wrappers) on the stream that torch.cuda.graph captures on, when CUDA
    graphs are on. DDP keeps each parameter's AccumulateGrad node, and a kept node stays tied to the
    stream current when it was made: built on the default stream, the first captured backward syncs
    with it and the capture is invalidated (cudaErrorStreamCaptureInvalidated, PyTorch warning that
    an AccumulateGrad node's stream differs from its producer's). Megatron-LM builds DDP on the
    capture stream for this reason (training.py; pull requests 2852 and 6021); TE's
    make_graphed_callables and Megatron's local capture both capture on torch.cuda.graph's default
    capture stream. Where torch offers it, a stale stream is overridden."""
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


def wire_schedule(config, model, optimizer, ddp_config):
    """What Megatron-LM's train() wires into the config (training.py): loss scale, overlap hooks,
    and the grad finalisation that forward_backward_func calls at its end. Returns the function to
    call after the first step (Megatron-LM runs it without the param all-gather pre-hooks, then
    turns them on)."""
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
