"""Named model shapes as RunConfigs (the table, with its citations, is megalab.runs.shapes).

A preset fixes the model fields of a RunConfig; the layout (gpus, tp, pp, ...) stays at its
defaults:

    cfg = presets.get("gpt-1.2b").replace(gpus=2, tp=2, mbs=4, gbs=16)
"""

from __future__ import annotations

from megalab.runs.config import RunConfig
from megalab.runs.shapes import PRESETS, UnknownPreset, names

__all__ = ["PRESETS", "UnknownPreset", "names", "get", "source"]


def get(name: str) -> RunConfig:
    """A RunConfig with the preset's model fields and default layout (1 GPU)."""
    if name not in PRESETS:
        raise UnknownPreset(f"unknown preset {name!r}: pick one of {', '.join(PRESETS)}")
    fields = {k: v for k, v in PRESETS[name].items() if k != "source"}
    return RunConfig(name=name, **fields)


def source(name: str) -> str:
    """The citation for a preset's shape."""
    get(name)  # raises UnknownPreset
    return PRESETS[name]["source"]
