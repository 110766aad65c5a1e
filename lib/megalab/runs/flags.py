"""RunConfig <-> command-line flags: one flag per field, parsed back to exactly the same config.

`megalab run`, `megalab.train` and the GPU plans share these flags, so a line printed by
`megalab experiments` runs as it reads.
"""

from __future__ import annotations

import argparse
import dataclasses

from megalab.runs import presets
from megalab.runs.config import RunConfig
from megalab.usage import number, whole_number

__all__ = ["add_config_args", "config_from_args", "config_to_args"]

_FIELDS = dataclasses.fields(RunConfig)

_FLAGS = {
    "tied_embeddings": "--untied",
    "moe_dispatcher": "--dispatcher",  # else --field-name
    "compile": "--no-compile",
}
# booleans that default to True: their flag turns them off
_OFF_FLAGS = {
    "tied_embeddings": "untie embeddings",
    "compile": "run Megatron's and TE's fused ops eagerly (no torch.compile)",
}
_TYPES = {
    "int": whole_number,
    "int | None": whole_number,
    "float": number,
    "str": str,
    "str | None": str,
}


# fields added after plans were printed: their flag only when set, so an older plan's line reads as
# it was printed (pack.py --resume compares lines by their text)
_ONLY_WHEN_SET = ("moe_aux_coeff", "grad_accum_fusion")


def _flag(name: str) -> str:
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def _preset_name(text: str) -> str:
    if text not in presets.PRESETS:
        raise argparse.ArgumentTypeError(
            f"unknown preset {text!r}: pick one of {', '.join(presets.names())}"
        )
    return text


def _run_name(text: str) -> str:
    from megalab.runs.layout_rules import name_problem

    if name_problem(text):
        raise argparse.ArgumentTypeError(name_problem(text))
    return text


_FIELD_TYPES = {"name": _run_name}  # fields checked as they are parsed (else by the type in _TYPES)
_DEFAULT_HELP = {"gpus": "tp*pp*cp, i.e. data-parallel size 1"}  # defaults config_from_args derives


def add_config_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add --preset and one flag per RunConfig field (dash style; booleans are store_true)."""
    g = parser.add_argument_group("run config")
    g.add_argument(
        "--preset",
        type=_preset_name,
        metavar="PRESET",
        help=f"model preset supplying the model fields: {', '.join(presets.names())} "
        "(megalab presets shows their shapes)",
    )
    for f in _FIELDS:
        doc = f.metadata["doc"].replace("%", "%%")  # argparse formats help with %: "±2%" is text
        if f.name in _OFF_FLAGS:
            g.add_argument(
                _flag(f.name),
                dest=f.name,
                action="store_const",
                const=False,
                help=_OFF_FLAGS[f.name],
            )
        elif f.type == "bool":
            g.add_argument(_flag(f.name), dest=f.name, action="store_const", const=True, help=doc)
        else:
            g.add_argument(
                _flag(f.name),
                dest=f.name,
                type=_FIELD_TYPES.get(f.name, _TYPES[f.type]),
                choices=f.metadata["choices"],
                help=f"{doc} (default {_DEFAULT_HELP.get(f.name, f.default)})",
            )
    return parser


def config_from_args(ns: argparse.Namespace) -> RunConfig:
    """RunConfig from parsed flags: defaults < preset model fields < explicit flags; gpus defaults
    to tp*pp*cp."""
    d = RunConfig().to_dict()
    if getattr(ns, "preset", None):
        d.update(presets.get(ns.preset).to_dict())
    d.update(
        {f.name: getattr(ns, f.name) for f in _FIELDS if getattr(ns, f.name, None) is not None}
    )
    if getattr(ns, "gpus", None) is None:
        d["gpus"] = d["tp"] * d["pp"] * d["cp"]
    return RunConfig.from_dict(d)


def config_to_args(cfg: RunConfig) -> list[str]:
    """Flags that config_from_args parses back to exactly cfg (no preset; every set field
    explicit)."""
    args: list[str] = []
    for f in _FIELDS:
        v = getattr(cfg, f.name)
        if f.name in _ONLY_WHEN_SET and v == f.default:
            continue
        if f.name in _OFF_FLAGS:
            args += [] if v else [_flag(f.name)]
        elif f.type == "bool":
            args += [_flag(f.name)] if v else []
        elif v is not None:
            args += [_flag(f.name), repr(v) if isinstance(v, float) else str(v)]
    return args
