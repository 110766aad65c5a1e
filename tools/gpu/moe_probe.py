"""The trainer with Megatron config fields overridden, to try a setting before it becomes a default.

    MEGALAB_PROBE='moe_permute_fusion=true,moe_router_fusion=true' \
        torchrun --standalone --nproc_per_node=1 tools/gpu/moe_probe.py --preset olmoe-like ...
        --profile --run-dir D

MEGALAB_PROBE holds comma-separated field=value pairs (values read as JSON: true, 3, "x") set on the
TransformerConfig after megalab.train.wiring builds it, before the model is built (its __post_init__
checks are not re-run: use fields whose checks the trainer's values already pass). Output is the
trainer's own metrics lines; nothing is recorded in the store: a setting that wins becomes a default
in megalab.train.wiring, then gets recorded.
"""

import dataclasses
import json
import os
import sys

from megalab.train import loop
from megalab.train.probes import Probe


class ConfigOverride(Probe):
    """Sets MEGALAB_PROBE's fields on Megatron's TransformerConfig."""

    def __init__(self, pairs: str):
        self.pairs = [pair.split("=", 1) for pair in filter(None, pairs.split(","))]

    def configure(self, cfg, config):
        for field, value in self.pairs:
            if field not in {f.name for f in dataclasses.fields(config)}:
                raise SystemExit(f"MEGALAB_PROBE: TransformerConfig has no field {field!r}")
            setattr(config, field, json.loads(value))


if __name__ == "__main__":
    loop.main(sys.argv[1:], probes=[ConfigOverride(os.environ.get("MEGALAB_PROBE", ""))])
