"""megalab: train LLMs across many GPUs with Megatron Core, one parallelism axis at a time.

Notebooks use:
    import megalab
    cfg = megalab.presets.get("gpt-1.2b").replace(gpus=2, tp=2, mbs=4, gbs=16)
    megalab.theory.plan(cfg)                # predict
    result = megalab.run(cfg, mode="auto")  # measure (live on your GPUs, or the recorded reference)

Importing megalab has no side effects: submodules load on first use (no torch, no CUDA at import).
"""
from importlib import import_module

__version__ = "0.1.0"
__all__ = ["RunConfig", "InvalidLayout", "NotRecorded", "NotEnoughGPUs", "run", "presets", "theory",
           "results", "charts", "bench", "config", "chapters"]

_LAZY = {"RunConfig": ("config", "RunConfig"), "InvalidLayout": ("config", "InvalidLayout"),
         "NotRecorded": ("results", "NotRecorded"), "NotEnoughGPUs": ("launch", "NotEnoughGPUs"),
         "run": ("results", "run")}


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(import_module(f"megalab.{module}"), attr)
    if name in {"presets", "theory", "results", "charts", "bench", "config", "widgets", "launch",
                "metrics", "sweep", "env", "hardware", "store", "records", "chapters", "specs", "recording", "flags", "shapes",
                "search", "calibration", "step_model"}:
        return import_module(f"megalab.{name}")
    raise AttributeError(f"module 'megalab' has no attribute {name!r}")
