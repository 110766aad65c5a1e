"""train/imports.py: a function torch.compile decorates is compiled at its first call, not when it
is decorated, so Megatron's import no longer loads the compiler; and a rank's start-up loads nothing
the run does not train with."""

import importlib.util
import json
import os
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
    env = dict(os.environ, TORCH_COMPILE_DISABLE="1", PYTHONWARNINGS="ignore")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[:2] == ["False", "None"], out


# what a rank never needs before its first step: the book's analysis and drawing stack, and (compile
# on or off) the compiler, which torch.compile loads at the first call of a compiled function
NOT_ON_THE_RANK_PATH = (
    "pandas",
    "plotly",
    "scipy",
    "matplotlib",
    "IPython",
    "tqdm.notebook",
    "megalab.book",
    "megalab.charts",
    "megalab.commands",
    "megalab.predict",
    "megalab.records.store",
    "megalab.jobs",
)
COMPILER = ("torch._dynamo", "torch._inductor", "jax")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("compile_off", [[], ["--no-compile"]], ids=["compile", "no-compile"])
def test_a_rank_imports_only_what_it_trains_with(compile_off):
    """A rank's start-up (megalab.train.loop.main up to its 'imports' mark: torch, Megatron's
    configs, the probes) and the two entry modules (-m megalab.train, -m megalab.train.batch) load
    none of the book's analysis stack; the entries do not load torch. Each second here is paid by
    every rank of every fresh launch (the 'python' and 'imports' start-up marks)."""
    code = textwrap.dedent(
        """
        import json, sys
        banned = json.loads(sys.argv[1])
        hits = lambda: sorted(m for m in sys.modules if any(
            m == b or m.startswith(b + ".") for b in banned) and sys.modules[m] is not None)
        import megalab.train.__main__, megalab.train.batch
        entry = {"hits": hits(), "torch": "torch" in sys.modules}
        from megalab.train import loop

        def at_imports_mark(*args, **kwargs):  # the call right after the 'imports' mark
            print(json.dumps({"entry": entry, "imports_mark": hits()}))
            sys.exit(0)

        loop.initialize_distributed = at_imports_mark
        loop.main(sys.argv[2:])
        """
    )
    banned = list(NOT_ON_THE_RANK_PATH)
    if importlib.util.find_spec("transformer_engine") is None:  # TE imports torch._dynamo itself
        banned += COMPILER
    argv = ["--preset", "gpt-1.2b", "--tp", "2", "--impl", "local", "--iters", "2", *compile_off]
    env = dict(os.environ, WORLD_SIZE="2", PYTHONWARNINGS="ignore")
    env.pop("TORCH_COMPILE_DISABLE", None)
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(banned), *argv],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seen = json.loads(out.splitlines()[-1])
    assert seen["entry"] == {"hits": [], "torch": False}, seen["entry"]
    assert seen["imports_mark"] == [], seen["imports_mark"]
