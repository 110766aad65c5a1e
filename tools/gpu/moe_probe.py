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


build_chunks = train.build_chunks


def te_only_wgrad_fusion(cfg, config, dry_run):
    """gradient_accumulation_fusion=true without Apex: Transformer Engine's linears accumulate wgrad into
    main_grad themselves (fuse_wgrad_accumulation); Megatron's own linears (the output layer) would need
    Apex's kernel, so they are switched back to the unfused path once built."""
    from megatron.core.tensor_parallel import layers
    fused = config.gradient_accumulation_fusion
    layers._grad_accum_fusion_available = layers._grad_accum_fusion_available or fused
    chunks = build_chunks(cfg, config, dry_run)
    for chunk in chunks:
        for m in chunk.modules():
            if type(m) in (layers.ColumnParallelLinear, layers.RowParallelLinear):
                m.gradient_accumulation_fusion = False
    return chunks


train.megatron_configs = probing_configs
train.build_chunks = te_only_wgrad_fusion

if __name__ == "__main__":
    train.main()
