"""Launch to first step: what the trainer does before torch and Megatron load, so that less loads.

    imports.load_less()    # first thing in loop.train, before Megatron is imported

- Transformer Engine imports JAX, when installed, only to look for its JAX extension: 0.9 s of
  imports on the GPU hosts (results/probes/importtime-*). JAX is marked absent.
- Megatron Core 0.16.1 decorates its fused elementwise ops with torch.compile when it is imported
  (megatron.core.jit.jit_fuser), and torch.compile imports torch._dynamo and torch._inductor at
  once, even under TORCH_COMPILE_DISABLE=1 (RunConfig.compile False): 3-7 s of a 2-core CPU's
  imports (tests/test_train_imports.py measures it). Here torch.compile decorates lazily: a function
  is compiled at its first call (torch.compile compiles there anyway), so a run that never calls one
  (or runs with compile off) never loads the compiler. A module goes to torch.compile as it is.
  Delete when Megatron's jit_fuser (or torch.compile) defers the compiler's import itself.
"""

import functools
import sys

LAZY = "_megalab_lazy"  # the mark of the lazy torch.compile (set once per process)


def load_less() -> None:
    """Mark JAX absent and make torch.compile lazy for functions (once per process)."""
    sys.modules.setdefault("jax", None)
    import torch

    if not getattr(torch.compile, LAZY, False):
        torch.compile = lazy_compile(torch.compile)


def lazy_compile(real):
    """torch.compile, deferred for functions to their first call."""

    def compile(model=None, **kw):
        if model is None:  # @torch.compile(mode=...)
            return lambda fn: compile(fn, **kw)
        import torch

        if isinstance(model, torch.nn.Module):
            return real(model, **kw)
        compiled = None

        @functools.wraps(model)
        def compiled_at_first_call(*args, **kwargs):
            nonlocal compiled
            if compiled is None:
                compiled = real(model, **kw)
            return compiled(*args, **kwargs)

        return compiled_at_first_call

    setattr(compile, LAZY, True)
    return compile
