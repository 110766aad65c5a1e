"""train/imports.py: a function torch.compile decorates is compiled at its first call, not when it
is decorated, so Megatron's import no longer loads the compiler."""

import subprocess
import sys
import textwrap

import pytest

from megalab.train import imports


def test_a_decorated_function_is_compiled_at_its_first_call():
    compiled = []

    def real(fn, **kw):
        compiled.append((fn.__name__, kw))
        return lambda *a: ("compiled", fn(*a))

    lazy = imports.lazy_compile(real)

    @lazy
    def add(a, b):
        return a + b

    @lazy(mode="max-autotune")
    def neg(a):
        return -a

    assert compiled == [] and add.__name__ == "add"
    assert add(1, 2) == ("compiled", 3) and add(2, 2) == ("compiled", 4)
    assert neg(1) == ("compiled", -1)
    assert compiled == [("add", {}), ("neg", {"mode": "max-autotune"})]  # once each


def test_a_module_is_compiled_as_torch_compile_does():
    import torch

    seen = []
    lazy = imports.lazy_compile(lambda m, **kw: seen.append(m) or "optimized")
    layer = torch.nn.Linear(2, 2)
    assert lazy(layer) == "optimized" and seen == [layer]


@pytest.mark.timeout(300)
def test_megatron_imports_without_the_compiler():
    """The trainer's imports of Megatron Core (GPT model, schedules, optimizer, DDP) load neither
    torch._dynamo nor JAX; imports.load_less is what keeps them out (compile off, as the trainer
    sets it)."""
    code = textwrap.dedent(
        """
        import sys
        from megalab.train import imports
        imports.load_less()
        from megatron.core.models.gpt import GPTModel
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.optimizer import get_megatron_optimizer
        from megatron.core.distributed import DistributedDataParallel
        print("torch._dynamo" in sys.modules, sys.modules.get("jax"))
        """
    )
    import os

    env = dict(os.environ, TORCH_COMPILE_DISABLE="1", PYTHONWARNINGS="ignore")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[:2] == ["False", "None"], out
