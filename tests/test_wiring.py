"""megalab.wiring without a process group: the hooks it sets on Megatron's config."""
from types import SimpleNamespace

from megalab.wiring import wire_schedule


def test_wire_schedule_sets_megatron_hooks_and_restores_param_sync_after_step_0():
    """The config wiring of Megatron-LM's train(): overlap hooks, loss scale, grad finalisation, and the
    first step without param all-gather pre-hooks (then on again)."""
    calls = []

    class Chunk:
        no_sync = start_grad_sync = start_param_sync = object()

        def disable_forward_pre_hook(self, param_sync):
            calls.append(("off", param_sync))

        def enable_forward_pre_hook(self):
            calls.append("on")

    model = [Chunk()]
    config = SimpleNamespace(param_sync_func=None)
    ddp = SimpleNamespace(overlap_grad_reduce=True, align_param_gather=True, overlap_param_gather=True)
    after = wire_schedule(config, model, SimpleNamespace(scale_loss="scale"), ddp)
    assert config.grad_scale_func == "scale" and config.grad_sync_func is Chunk.start_grad_sync
    assert config.param_sync_func is None and calls == [("off", False)]
    after()
    assert config.param_sync_func is Chunk.start_param_sync and calls[-1] == "on"


def test_cuda_graphs_map_onto_megatron_and_need_no_capture_step_by_default():
    """cuda_graphs reaches TransformerConfig as Megatron-LM's --cuda-graph-impl does (with TE's graph-safe RNG);
    at 'none' (every record so far) nothing changes and graph_capture does nothing before a step."""
    from megalab import presets
    from megalab.wiring import graph_capture, megatron_configs
    c = presets.get("gpt-350m").replace(impl="local")
    _, none, _, _ = megatron_configs(c, dry_run=True)
    assert (none.cuda_graph_impl, none.use_te_rng_tracker) == ("none", False)
    _, local, _, _ = megatron_configs(c.replace(cuda_graphs="local"), dry_run=True)
    assert (local.cuda_graph_impl, local.cuda_graph_scope, local.use_te_rng_tracker) == ("local", [], True)
    assert graph_capture(c, none, model=None, optimizer=None, ddp_config=None)(3) is None
