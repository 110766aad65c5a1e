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
__all__ = [
    "RunConfig",
    "InvalidLayout",
    "NotRecorded",
    "NotEnoughGPUs",
    "run",
    "run_many",
    "axes",
    "bench",
    "calibration",
    "chapters",
    "charts",
    "config",
    "data",
    "env",
    "flags",
    "hardware",
    "frame",
    "launch",
    "metrics",
    "peer",
    "presets",
    "profiles",
    "prose",
    "records",
    "recording",
    "references",
    "reproduce",
    "reproductions",
    "results",
    "routing",
    "search",
    "shapes",
    "specs",
    "step_model",
    "store",
    "sweep",
    "theory",
    "timings",
    "widgets",
    "wiring",
]

_LAZY = {
    "RunConfig": ("runs.config", "RunConfig"),
    "InvalidLayout": ("runs.config", "InvalidLayout"),
    "NotRecorded": ("jobs.running", "NotRecorded"),
    "NotEnoughGPUs": ("jobs.launch", "NotEnoughGPUs"),
    "run": ("jobs.running", "run"),
    "run_many": ("jobs.running", "run_many"),
}
# The short names notebooks import (`from megalab import results, store`) and where each module
# lives now.
_MODULES = {
    "presets": "runs.presets",
    "config": "runs.config",
    "flags": "runs.flags",
    "shapes": "runs.shapes",
    "launch": "jobs.launch",
    "peer": "jobs.peer",
    "results": "jobs.running",
    "sweep": "jobs.sweep",
    "axes": "runs.axes",
    "store": "records.store",
    "records": "records",
    "timings": "records.timings",
    "profiles": "records.profiles",
    "routing": "records.routing",
    "reproductions": "records.reproductions",
    "step_model": "predict.step_model",
    "calibration": "predict.calibration",
    "search": "predict.search",
    "specs": "book.specs",
    "recording": "book.recording",
    "reproduce": "book.reproduce",
    "widgets": "book.widgets",
    "frame": "book.frame",
    "references": "book.references",
    "prose": "book.prose",
    "chapters": "book.chapters",
    "bench": "jobs.bench",
    "env": "machine.env",
    "hardware": "machine.hardware",
    "theory": "theory",
    "charts": "charts",
    "metrics": "metrics",
    "data": "data",
    "wiring": "train.wiring",
}


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(import_module(f"megalab.{module}"), attr)
    if name in _MODULES:
        return import_module(f"megalab.{_MODULES[name]}")
    raise AttributeError(f"module 'megalab' has no attribute {name!r}")
