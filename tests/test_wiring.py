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
