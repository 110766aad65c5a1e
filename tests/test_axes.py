"""The AXES table against the code that spells its names: RunConfig, peer, Megatron Core, the
trainer."""

import dataclasses
import inspect

import pytest

from megalab.jobs import peer
from megalab.runs import axes, presets
from megalab.runs.axes import AXES, GROUP_ORDER, axis
from megalab.runs.config import RunConfig

CFG = presets.get("olmoe-like").replace(
    gpus=8, tp=2, pp=2, vpp=2, ep=2, etp=2, sp=True, mbs=1, gbs=16
)


def test_every_axis_is_a_runconfig_size():
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    for a in AXES:
        assert a.short in fields or a.short == "dp"
        assert isinstance(getattr(CFG, a.short), int)


def test_peers_flags_and_the_table_agree():
    flags = peer.args(peer.peer_config(CFG))
    for a in AXES:
        if a.flag:
            assert flags[flags.index(a.flag) + 1] == str(getattr(CFG, a.short)), a.flag


def test_vpp_is_left_out_at_one():
    flags = peer.args(peer.peer_config(CFG.replace(vpp=1)))
    assert axis("vpp").flag not in flags and axis("pp").flag in flags


def test_megatron_core_names_its_arguments_as_the_table():
    from megatron.core import parallel_state
    from megatron.core.model_parallel_config import ModelParallelConfig

    fields = {f.name for f in dataclasses.fields(ModelParallelConfig)}
    assert {a.mcore for a in AXES if a.mcore} <= fields
    order = inspect.signature(parallel_state.initialize_model_parallel).parameters["order"].default
    assert tuple(order.split("-")) == GROUP_ORDER


def test_the_trainer_maps_every_axis_by_the_tables_name():
    from megalab.train.wiring import megatron_configs

    cfg = CFG.replace(impl="local")
    parallel, model, _, _ = megatron_configs(cfg, dry_run=True)
    for a in AXES:
        if a.mcore:
            want = getattr(cfg, a.short) if a.short != "vpp" or cfg.vpp > 1 else None
            assert parallel[a.mcore] == want == getattr(model, a.mcore), a.mcore


def test_group_order_and_model_parallel():
    assert [a.short for a in AXES if a.group is not None] == ["tp", "pp", "cp", "ep", "dp"]
    assert axis("tp").group == 0 and axis("pp").group == 4 and axis("vpp").group is None
    assert axes.model_parallel(CFG) * CFG.dp == CFG.gpus


def test_an_unknown_axis_names_the_known_ones():
    with pytest.raises(KeyError, match="tp, pp, vpp"):
        axis("zp")
