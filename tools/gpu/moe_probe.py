"""The trainer with Megatron config fields overridden, to try a setting before it becomes a default.

    MEGALAB_PROBE='moe_permute_fusion=true,moe_router_fusion=true' \
        torchrun --standalone --nproc_per_node=1 tools/gpu/moe_probe.py --preset olmoe-like ... --profile --run-dir D

MEGALAB_PROBE holds comma-separated field=value pairs (values read as JSON: true, 3, "x") set on the
TransformerConfig after megalab.wiring builds it (its __post_init__ checks are not re-run: use fields
whose checks the trainer's values already pass). Output is the trainer's own metrics lines; nothing is
recorded in the store: a setting that wins becomes a default in megalab.wiring, then gets recorded.
"""
import dataclasses
import json
import os

from megalab import train

megatron_configs = train.megatron_configs


def probing_configs(cfg, dry_run=False):
    parallel, model, ddp, optim = megatron_configs(cfg, dry_run)
    for pair in filter(None, os.environ.get("MEGALAB_PROBE", "").split(",")):
        field, value = pair.split("=", 1)
        if field not in {f.name for f in dataclasses.fields(model)}:
            raise SystemExit(f"MEGALAB_PROBE: TransformerConfig has no field {field!r}")
        setattr(model, field, json.loads(value))
    return parallel, model, ddp, optim


train.megatron_configs = probing_configs

if __name__ == "__main__":
    train.main()
