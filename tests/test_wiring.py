"""megalab.train.wiring without a process group: the objects and hooks it sets up for Megatron."""

from types import SimpleNamespace

from megalab.train.wiring import wire_schedule


def test_wire_schedule_sets_megatron_hooks_and_restores_param_sync_after_step_0():
    """The config wiring of Megatron-LM's train(): overlap hooks, loss scale, grad finalisation, and
    the first step without param all-gather pre-hooks (then on again)."""
    calls = []

    class Chunk:
        no_sync = start_grad_sync = start_param_sync = object()

        def disable_forward_pre_hook(self, param_sync):
            calls.append(("off", param_sync))

        def enable_forward_pre_hook(self):
            calls.append("on")

    model = [Chunk()]
    config = SimpleNamespace(param_sync_func=None)
    ddp = SimpleNamespace(
        overlap_grad_reduce=True, align_param_gather=True, overlap_param_gather=True
    )
    after = wire_schedule(config, model, SimpleNamespace(scale_loss="scale"), ddp)
    assert config.grad_scale_func == "scale" and config.grad_sync_func is Chunk.start_grad_sync
    assert config.param_sync_func is None and calls == [("off", False)]
    after()
    assert config.param_sync_func is Chunk.start_param_sync and calls[-1] == "on"


def test_ddp_is_built_once_and_in_place_without_cuda():
    """on_capture_stream builds DDP on torch.cuda.graph's capture stream when graphs are on and CUDA
    is there; on this CPU machine (and at cuda_graphs none) it just builds."""
    from megalab import presets
    from megalab.train.wiring import on_capture_stream

    built = []
    for graphs in ("none", "te"):
        assert (
            on_capture_stream(
                presets.get("gpt-350m").replace(cuda_graphs=graphs),
                lambda: built.append(1) or "ddp",
            )
            == "ddp"
        )
    assert built == [1, 1]


def test_cuda_graphs_map_onto_megatron_as_megatron_lm_does():
    """cuda_graphs reaches TransformerConfig as Megatron-LM's --cuda-graph-impl does (with TE's
    graph-safe RNG); at 'none' nothing changes."""
    from megalab import presets
    from megalab.train.wiring import megatron_configs

    c = presets.get("gpt-350m").replace(impl="local")
    _, none, _, _ = megatron_configs(c, dry_run=True)
    assert (none.cuda_graph_impl, none.use_te_rng_tracker) == ("none", False)
    _, local, _, _ = megatron_configs(c.replace(cuda_graphs="local"), dry_run=True)
    assert (local.cuda_graph_impl, local.cuda_graph_scope, local.use_te_rng_tracker) == (
        "local",
        [],
        True,
    )


def test_the_layout_is_one_mapping_shared_by_the_process_groups_and_the_model_config():
    """initialize_model_parallel's arguments and TransformerConfig's layout fields come from one
    dict."""
    from megalab import presets
    from megalab.train.wiring import megatron_configs

    c = presets.get("olmoe-like").replace(
        impl="local", gpus=16, tp=2, pp=2, vpp=2, cp=2, ep=2, etp=1
    )
    parallel, config, _, _ = megatron_configs(c, dry_run=True)
    assert (
        parallel["tensor_model_parallel_size"] == 2
        and parallel["virtual_pipeline_model_parallel_size"] == 2
    )
    assert {k: getattr(config, k) for k in parallel} == parallel


def test_aux_coefficient_router_dtype_and_wgrad_fusion_reach_the_transformer_config():
    """moe_aux_coeff, moe_router_fp32 and grad_accum_fusion are honoured by the trainer's config,
    as jobs.peer passes them to Megatron-LM: off unfuses the wgrad accumulation, auto keeps TE's.
    (Local layers for the MoE model: TE's rope fusion is not installed on CPU.)"""
    from megalab.runs import presets
    from megalab.train.wiring import megatron_configs

    moe = presets.get("olmoe-like").replace(gpus=1, mbs=1, gbs=1, impl="local")
    _, c, _, _ = megatron_configs(moe, dry_run=True)
    assert (c.moe_aux_loss_coeff, c.moe_router_dtype) == (0.01, None)
    _, c, _, _ = megatron_configs(moe.replace(moe_aux_coeff=0.1, moe_router_fp32=True), True)
    assert (c.moe_aux_loss_coeff, c.moe_router_dtype) == (0.1, "fp32")
    _, c, _, _ = megatron_configs(moe.replace(moe_balance="none"), dry_run=True)
    assert c.moe_aux_loss_coeff == 0.0
    dense = presets.get("gpt-350m")
    fused = {
        f: megatron_configs(dense.replace(grad_accum_fusion=f), True)[
            1
        ].gradient_accumulation_fusion
        for f in ("auto", "on", "off")
    }
    assert fused == {"auto": True, "on": True, "off": False}
