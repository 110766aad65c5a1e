"""RunConfig: JSON round-trips, label/key, CLI round-trip, and every layout rule firing."""

import argparse
import json

import pytest

from megalab.runs import presets
from megalab.runs.config import InvalidLayout, RunConfig, problems
from megalab.runs.flags import add_config_args, config_from_args, config_to_args

BASE = RunConfig(name="t", layers=8, hidden=256, heads=8, seq=256, vocab=1024, gbs=8)


def parse(argv):
    return config_from_args(add_config_args(argparse.ArgumentParser()).parse_args(argv))


def test_defaults_are_valid_and_derived_sizes():
    assert BASE.problems() == []
    c = BASE.replace(gpus=8, tp=2, pp=2, mbs=2, gbs=16)
    assert (c.dp, c.num_microbatches) == (2, 4)
    assert (c.groups, c.ffn_size, c.moe_ffn_size) == (8, 1024, 1024)
    assert RunConfig(vocab=50257, tp=2).padded_vocab == 50432  # multiple of 128*tp


def test_every_field_is_documented():
    import dataclasses

    assert all(f.metadata["doc"] for f in dataclasses.fields(RunConfig))


def test_json_and_dict_round_trip():
    c = presets.get("mixtral-8x7b").replace(gpus=8, tp=2, ep=4, sp=True, lr=1e-4, data="/d/x")
    assert RunConfig.from_json(c.to_json()) == c
    assert RunConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_from_dict_and_replace_reject_unknown_fields():
    with pytest.raises(ValueError, match="unknown RunConfig field.*tensor_parallel"):
        RunConfig.from_dict({**BASE.to_dict(), "tensor_parallel": 2})
    with pytest.raises(ValueError, match="unknown"):
        BASE.replace(tpp=2)


def test_label_has_suffixes_only_for_non_defaults():
    c = presets.get("gpt-1.2b").replace(gpus=4, tp=2, mbs=4, gbs=16)
    assert c.label == "gpt-1.2b_tp2_pp1_cp1_ep1_dp2_mbs4_gbs16_seq1024"
    c = c.replace(pp=2, vpp=2, gpus=8, sp=True, dist_opt=True, recompute="full", fp8=True)
    assert c.label == "gpt-1.2b_tp2_pp2_cp1_ep1_dp2_mbs4_gbs16_seq1024_vpp2_sp_distopt_rc-full_fp8"
    assert BASE.replace(impl="local").label.endswith("_local")


def test_key_is_stable():
    # Hard-coded on purpose: a change here means every recorded result's key changed (field added,
    # renamed, or a default changed). Only update it together with a results/ migration.
    assert presets.get("gpt-1.2b").replace(gpus=4, tp=2, mbs=4, gbs=16).key == "97dca4979886cdb2"
    assert BASE.key == BASE.replace().key and BASE.key != BASE.replace(seed=1).key
    assert len(BASE.key) == 16


# -- validation: each rule fires with a message naming what to change
# ---------------------------------
RULES = [
    (dict(gpus=6, tp=4), "gpus=6 is not divisible by tp*pp*cp=4"),
    (dict(tp=3, gpus=3), "tp=3 does not divide heads=8: pick tp from 1, 2, 4, 8"),
    (dict(query_groups=3), "query_groups=3 does not divide heads=8"),
    # tp a multiple of groups: Megatron replicates kv
    (dict(query_groups=2, tp=8, gpus=8, heads=16), None),
    (dict(query_groups=4, tp=8, gpus=8, heads=24, hidden=384), None),
    (
        dict(query_groups=6, heads=24, hidden=384, tp=4, gpus=4),
        "tp=4 must divide or be a multiple of query_groups=6",
    ),
    (dict(hidden=250), "heads=8 does not divide hidden=250"),
    (dict(hidden=264, heads=24, position="rope"), "rope needs an even head size"),
    (dict(ffn=1000, tp=16, gpus=16, heads=16), "tp=16 does not divide ffn=1000"),
    (dict(layers=6, pp=4, gpus=4), "layers=6 is not divisible by pp*vpp=4"),
    (dict(layers=8, pp=2, vpp=3, gpus=2), "layers=8 is not divisible by pp*vpp=6"),
    (dict(gbs=6, mbs=4), "gbs=6 is not divisible by mbs*dp=4"),
    (dict(vpp=2), "vpp=2 needs pp > 1"),
    (dict(pp=2, vpp=2, gpus=2, gbs=3), "needs num_microbatches=3 divisible by pp=2"),
    (dict(pp=4, vpp=2, gpus=4, gbs=2), "num_microbatches=2 divisible by pp=4"),
    (dict(sp=True), "sp needs tp > 1"),
    (dict(sp=True, tp=2, gpus=2, impl="local"), "sp needs impl te"),
    (dict(sp=True, tp=8, gpus=8, seq=252), "make seq a multiple of cp*tp=8"),
    (dict(cp=2, gpus=2, impl="local"), "cp=2 needs impl te"),
    (dict(cp=4, gpus=4, seq=260), "seq divisible by 2*cp=8"),
    (dict(cp=2, gpus=2, cp_comm="a2a", heads=6, hidden=384), None),
    (
        dict(cp=4, gpus=4, cp_comm="a2a", heads=6, hidden=384),
        "needs heads/tp=6 and query_groups/tp=6 divisible by 4",
    ),
    (dict(cp=2, gpus=2, cp_comm="a2a+p2p"), "use an even cp >= 4"),
    (dict(ep=2, gpus=2), "ep=2 needs a MoE model"),
    (dict(experts=6, ep=4, gpus=4), "ep=4 does not divide experts=6"),
    (dict(experts=4, topk=5), "topk=5 exceeds experts=4"),
    (dict(experts=4, ep=4, gpus=2), "not divisible by etp*ep*pp=4"),
    (dict(experts=4, moe_ffn=100, etp=8, gpus=8), "etp=8 does not divide moe_ffn=100"),
    (dict(experts=4, tp=2, gpus=2), "MoE with tp=2 needs sp"),
    (dict(experts=4, tp=2, gpus=2, sp=True), None),
    (dict(fp8=True, impl="local"), "fp8 needs impl te"),
    (dict(fp8=True, seq=260), "fp8 needs seq/cp*mbs=260 divisible by 8"),
    (dict(fp8=True, hidden=264, heads=8), "fp8 needs hidden=264 divisible by 16"),
    # hidden/tp = 64, ffn/tp = 256: multiples of 16
    (dict(fp8=True, hidden=512, tp=8, gpus=8), None),
    (dict(fp8=True, hidden=320, heads=8, tp=8, gpus=8), "fp8 needs hidden/tp=40 divisible by 16"),
    (dict(norm="rmsnorm"), "norm='rmsnorm' is not supported: pick one of LayerNorm, RMSNorm"),
    (dict(mbs=0), "mbs=0 must be at least 1"),
    (dict(dropout=1.0), "dropout=1.0 must be in [0, 1)"),
    (
        dict(
            norm="RMSNorm",
            activation="swiglu",
            position="rope",
            impl="local",
            recompute="selective",
        ),
        None,
    ),
    (dict(cuda_graphs="te"), None),
    (dict(cuda_graphs="local", impl="local"), "cuda_graphs=local needs impl te"),
    (dict(cuda_graphs="te", recompute="full"), "cuda_graphs with recompute full"),
    (dict(cuda_graphs="te", recompute="selective"), None),
    (
        dict(cuda_graphs="te", recompute="selective", dropout=0.1),
        "cuda_graphs with selective recompute of core_attn and dropout=0.1",
    ),
    (
        dict(cuda_graphs="local", recompute="selective", recompute_modules="mlp", dropout=0.1),
        "selective recompute of mlp",
    ),
    (dict(cuda_graphs="local", experts=4), "MoE layers with CUDA graphs: use --cuda-graphs te"),
    (dict(cuda_graphs="te", experts=4), None),
    (dict(recompute="selective", recompute_modules="mlp"), None),
    (dict(recompute="selective", recompute_modules="core_attn,mlp"), None),
    (dict(recompute_modules="mlp"), "recompute_modules=mlp needs recompute selective"),
    (
        dict(recompute="selective", recompute_modules="mlp,attn"),
        "name each module once, comma-separated, from core_attn",
    ),
    (dict(recompute="selective", recompute_modules="mlp,mlp"), "name each module once"),
    (
        dict(recompute="selective", recompute_modules="moe_act"),
        "recompute of moe or moe_act needs a MoE model",
    ),
    (dict(moe_balance="none"), "moe_balance=none needs a MoE model"),
    (dict(moe_balance="force", experts=4), None),
    (dict(moe_aux_coeff=0.1, experts=4), None),
    (dict(moe_router_fp32=True, experts=4), None),
    (dict(moe_router_fp32=True), "--moe-router-fp32 need a MoE model"),
    (dict(moe_aux_coeff=0.1), "--moe-aux-coeff and --moe-router-fp32 need a MoE model"),
    (dict(moe_aux_coeff=0.1, experts=4, moe_balance="none"), "moe_aux_coeff=0.1: give a positive"),
    (dict(moe_aux_coeff=0.0, experts=4), "moe_aux_coeff=0: give a positive weight"),
    (dict(grad_accum_fusion="off"), None),
    (dict(lr_warmup=10), None),
    (dict(lr_warmup=30), "lr_warmup=30: warm up for 0 to iters - 1 (29) steps"),
    (dict(grad_accum_fusion="on", impl="local"), None),
    (
        dict(moe_balance="even", experts=4),
        "moe_balance='even' is not supported: pick one of aux_loss, force, none",
    ),
]


@pytest.mark.parametrize("change,message", RULES)
def test_rule(change, message):
    found = BASE.replace(**change).problems()
    if message is None:
        assert found == []
    else:
        assert any(message in p for p in found), found


def test_hardware_and_installation_checks_only_when_asked():
    c = BASE.replace(gpus=8, fp8=True)
    assert problems(c) == []
    found = problems(c, gpus_available=4, te_available=False, gpu_name="NVIDIA A100-SXM4-80GB")
    assert any("only 4 are available" in p for p in found)
    assert (
        "Transformer Engine is not installed: pass --impl local, or install it (make gpu-setup)"
        in found
    )
    assert any("fp8 needs an Ada, Hopper or Blackwell GPU" in p for p in found)
    for gpu in (
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H200",
        "NVIDIA B200",
        "NVIDIA GB200",
        "NVIDIA L40S",
    ):
        assert problems(c, gpus_available=8, te_available=True, gpu_name=gpu) == []
    assert problems(BASE.replace(impl="local"), te_available=False) == []


def test_validate_lists_every_problem_one_per_line():
    bad = BASE.replace(tp=3, gpus=4, vpp=2, sp=True, impl="local")
    with pytest.raises(InvalidLayout) as e:
        bad.validate()
    lines = str(e.value).splitlines()
    assert len(lines) >= 4 and len(lines) == len(bad.problems())
    assert isinstance(e.value, ValueError)
    assert BASE.validate() is BASE


# -- command line ---------------------------------------------------------------------------------
def test_preset_then_flags_override_and_gpus_default():
    c = parse(["--preset", "llama3-8b", "--tp", "2", "--pp", "2", "--sp", "--seq", "4096"])
    assert (c.name, c.hidden, c.query_groups, c.tied_embeddings) == ("llama3-8b", 4096, 8, False)
    assert (c.tp, c.pp, c.seq, c.sp, c.gpus, c.dp) == (2, 2, 4096, True, 4, 1)
    assert parse(["--preset", "gpt-tiny", "--tp", "2", "--gpus", "8"]).dp == 4
    assert parse([]) == RunConfig()


def test_unknown_preset_lists_the_available_ones(capsys):
    with pytest.raises(SystemExit):
        parse(["--preset", "gpt-9t"])
    assert "unknown preset 'gpt-9t': pick one of gpt-tiny" in capsys.readouterr().err


LAYOUTS = [
    dict(),
    dict(gpus=4, tp=2, pp=2, vpp=2, gbs=8, sp=True),
    dict(gpus=8, cp=2, cp_comm="a2a", fp8=True),
    dict(dist_opt=True, overlap=True, recompute="selective", impl="local", init="megatron"),
    dict(lr=1.5e-4, dropout=0.1, seed=7, iters=3, data="/data/web_text_document", untied=None),
]


@pytest.mark.parametrize("name", presets.names())
@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_config_to_args_round_trips(name, layout):
    change = {k: v for k, v in LAYOUTS[layout].items() if k != "untied"}
    c = presets.get(name).replace(**change)
    if "untied" in LAYOUTS[layout]:
        c = c.replace(
            tied_embeddings=not c.tied_embeddings, moe_dispatcher="allgather", ffn=c.ffn_size
        )
    assert parse(config_to_args(c)) == c
    assert all(isinstance(a, str) for a in config_to_args(c))


def test_a_field_added_later_keeps_old_keys():
    """compile was added after records existed: at its default it stays out of the key (old records
    match)."""
    c = presets.get("gpt-1.2b").replace(gpus=4, tp=2, mbs=4, gbs=16)
    assert c.replace(compile=True).key == "97dca4979886cdb2" != c.replace(compile=False).key
    assert c.replace(compile=False).label.endswith("_nocompile") and not c.label.endswith(
        "_nocompile"
    )
    parser = add_config_args(argparse.ArgumentParser())
    assert config_from_args(parser.parse_args(["--no-compile"])).compile is False
    assert config_from_args(parser.parse_args([])).compile is True
    assert "--no-compile" in config_to_args(
        c.replace(compile=False)
    ) and "--no-compile" not in config_to_args(c)


def test_cuda_graphs_at_its_default_keeps_old_keys():
    """cuda_graphs came after the records: 'none' stays out of key and label; a capture is its own
    record."""
    c = presets.get("gpt-1.2b").replace(gpus=4, tp=2, mbs=4, gbs=16)
    assert c.replace(cuda_graphs="none").key == "97dca4979886cdb2"
    assert (
        c.replace(cuda_graphs="te").label == c.label + "_cg-te"
        and c.replace(cuda_graphs="te").key != c.key
    )
    parser = add_config_args(argparse.ArgumentParser())
    assert config_from_args(parser.parse_args(["--cuda-graphs", "local"])).cuda_graphs == "local"


def test_int_and_float_spellings_give_one_key():
    assert BASE.replace(lr=1).key == BASE.replace(lr=1.0).key and isinstance(
        BASE.replace(lr=1).lr, float
    )


def test_vocab_must_split_evenly_over_tp():
    """The trainer does not pad the vocabulary per tp (layout-invariant init): the rule is checked
    up front."""
    from megalab.runs import presets

    cfg = presets.get("gpt-350m").replace(vocab=50257, gpus=2, tp=2, mbs=1, gbs=1)
    msgs = [m for m in cfg.problems() if m.startswith("vocab=")]
    assert msgs and "multiple of 128*tp" in msgs[0] and "50432" in msgs[0]


def test_label_names_how_the_model_differs_from_its_preset():
    from megalab.runs import presets

    gpt = presets.get("gpt-350m")
    assert gpt.label.startswith("gpt-350m_tp1")
    assert gpt.replace(tied_embeddings=False, position="rope").label.startswith(
        "gpt-350m-untied-rope_tp1"
    )
    assert gpt.replace(layers=12, norm="RMSNorm").label.startswith("gpt-350m-L12-RMSNorm_tp1")
    # Llama-style by its preset: no marks
    assert presets.get("moe-small").label.startswith("moe-small_tp1")
    assert (
        presets.get("moe-small")
        .replace(tied_embeddings=True)
        .label.startswith("moe-small-tied_tp1")
    )


def test_every_committed_record_keeps_its_label_and_key():
    """The store is keyed by RunConfig.key and read by label: a refactor that moved a field's
    default, a preset or a label suffix would orphan committed records. Checked over every record in
    results/."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "results"
    checked = 0
    for path in sorted(root.glob("*.jsonl")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            rec = json.loads(line)
            if "config" not in rec or "key" not in rec:
                continue
            cfg = RunConfig.from_dict(rec["config"])
            assert cfg.key == rec["key"], f"{path.name}:{n}"
            # ten records of 2026-11-21 predate the label's dropout (_drop0.1) and layer-count
            # (-L224) marks: their stored label is today's label without that mark, and must stay so
            legacy = re.sub(r"_drop[0-9.]+$", "", re.sub(r"-L\d+_", "_", cfg.label))
            assert rec["label"] in (cfg.label, legacy), f"{path.name}:{n}"
            checked += 1
    assert checked >= 240


def test_recompute_modules_and_moe_balance_at_their_defaults_keep_old_keys():
    """Both came after the records: at their defaults (Megatron's core_attn; the auxiliary loss)
    they stay out of key and label; otherwise the label says so and the key differs."""
    c = RunConfig(
        name="gpt-1.2b",
        layers=40,
        hidden=1536,
        heads=16,
        vocab=51200,
        gpus=2,
        tp=2,
        sp=True,
        recompute="selective",
    )
    m = c.replace(recompute_modules="mlp")
    assert m.label == c.label + "-mlp" and m.key != c.key
    assert c.replace(recompute_modules="core_attn").key == c.key
    moe = RunConfig(experts=8, topk=2)
    assert moe.replace(moe_balance="force").label == moe.label + "_balance-force"
    assert moe.replace(moe_balance="aux_loss").key == moe.key != moe.replace(moe_balance="none").key


def test_to_dict_is_asdict_without_the_deep_copy():
    """to_dict copies field by field: right only while every field is a scalar (a list or dict field
    would be shared between a config and its replace()), so this fails the day one is not."""
    import dataclasses

    scalar = {"str", "str | None", "int", "int | None", "float", "bool"}
    assert {f.type for f in dataclasses.fields(RunConfig)} <= scalar
    for cfg in (RunConfig(), RunConfig(gpus=4, tp=2, pp=2, vpp=2, sp=True, recompute="selective")):
        assert cfg.to_dict() == dataclasses.asdict(cfg) and list(cfg.to_dict()) == list(
            dataclasses.asdict(cfg)
        )


def test_stop_when_tight_off_keeps_every_key_and_label():
    """Added after the records: off (the default) it stays out of key and label, and a run that
    stops on a tight median times the same configuration (timings.loose_key)."""
    from megalab.records.timings import loose_key

    c = presets.get("gpt-1.2b").replace(gpus=4, tp=2, mbs=4, gbs=16)
    assert c.replace(stop_when_tight=False).key == "97dca4979886cdb2"
    on = c.replace(stop_when_tight=True)
    assert on.key != c.key and on.label == c.label and loose_key(on) == loose_key(c)
    parser = add_config_args(argparse.ArgumentParser())
    assert config_from_args(parser.parse_args(["--stop-when-tight"])).stop_when_tight is True
    assert "--stop-when-tight" in config_to_args(on) and "--stop-when-tight" not in config_to_args(
        c
    )


def test_aux_coefficient_router_dtype_wgrad_fusion_and_warmup_at_defaults_keep_old_keys():
    """The four knobs came after the records: at their defaults (0.01, the model's dtype, each
    runner's own fusion, min(10, iters // 10) warm-up steps) they stay out of key and label, so
    every committed record keeps its key (recomputed from results/runs.jsonl, less the fields a
    record made before them lacks); otherwise the label says so, the key differs and the flags
    round-trip."""
    import json
    from pathlib import Path

    added = {
        "moe_aux_coeff": 1e-2,
        "moe_router_fp32": False,
        "grad_accum_fusion": "auto",
        "lr_warmup": None,
    }
    path = Path(__file__).resolve().parents[1] / "results" / "runs.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    checked = 0
    for rec in records:
        if "config" in rec and "key" in rec:
            if any(rec["config"].get(k, v) != v for k, v in added.items()):
                continue  # made with a knob set (the routing lesson): its key says so
            old = {k: v for k, v in rec["config"].items() if k not in added}
            cfg = RunConfig.from_dict(old)
            assert cfg.key == rec["key"] == cfg.replace(**added).key
            assert cfg.label == cfg.replace(**added).label
            checked += 1
    assert checked >= 240
    moe = presets.get("olmoe-like").replace(gpus=2, mbs=4, gbs=8)
    changed = {
        "moe_aux_coeff": (0.1, "_aux0.1"),
        "moe_router_fp32": (True, "_router-fp32"),
        "grad_accum_fusion": ("off", "_wgradfusion-off"),
        "lr_warmup": (100, "_warmup100"),
    }
    parser = add_config_args(argparse.ArgumentParser())
    for name, (value, suffix) in changed.items():
        c = moe.replace(**{name: value})
        assert c.label == moe.label + suffix and c.key != moe.key
        assert config_from_args(parser.parse_args(config_to_args(c))) == c
    flags = ["--moe-aux-coeff", "0.1", "--moe-router-fp32", "--grad-accum-fusion", "off"]
    c = config_from_args(parser.parse_args(flags))
    assert (c.moe_aux_coeff, c.moe_router_fp32, c.grad_accum_fusion) == (0.1, True, "off")
