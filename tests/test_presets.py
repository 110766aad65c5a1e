"""Presets: the papers' shapes (parameter counts checked against the published ones), each
runnable."""

import pytest

from megalab.runs import presets
from megalab.runs.config import RunConfig

# A layout each preset can run at; the big ones use the papers' own layouts
# (Korthikanti et al. 2022, Table 3: 22B TP8; 175B TP8 PP8; 530B TP8 PP35; 1T TP8 PP64).
LAYOUTS = {
    "gpt-tiny": dict(gpus=4, tp=2, pp=2, gbs=8),
    "gpt-small": dict(gpus=4, gbs=16, mbs=4),
    "gpt-350m": dict(gpus=4, tp=4, sp=True, gbs=8),
    "gpt2-xl": dict(gpus=4, pp=4, vpp=2, gbs=16),
    "gpt-24l-2048": dict(gpus=4, tp=2, pp=2, gbs=8),
    "gpt-1.2b": dict(gpus=4, tp=2, mbs=4, gbs=16),
    "gpt-2.5b": dict(gpus=4, tp=2, pp=2, gbs=8),
    "gpt-4.2b": dict(gpus=8, tp=4, pp=2, gbs=8),
    "gpt-8.3b": dict(gpus=8, tp=8, sp=True, gbs=8),
    "gpt-22b": dict(gpus=8, tp=8, sp=True, recompute="selective", gbs=4),
    "gpt-175b": dict(gpus=64, tp=8, pp=8, sp=True, gbs=64),
    "gpt-530b": dict(gpus=280, tp=8, pp=35, gbs=35),
    "gpt-1t": dict(gpus=512, tp=8, pp=64, gbs=64),
    "llama3-1b": dict(gpus=4, cp=2, dp=None, gbs=8),
    "llama3-8b": dict(gpus=4, tp=4, sp=True, gbs=4),
    "llama3-70b": dict(gpus=32, tp=8, pp=4, vpp=5, sp=True, gbs=32, dist_opt=True),
    "moe-tiny": dict(gpus=4, ep=4, gbs=4),
    "moe-small": dict(gpus=4, ep=2, tp=2, sp=True, gbs=4),
    "olmoe-1b-7b": dict(gpus=4, ep=4, gbs=4),
    "olmoe-like": dict(gpus=2, ep=2, gbs=4),
    "mixtral-8x7b": dict(gpus=16, tp=2, ep=8, sp=True, pp=2, gbs=8),
}

# Published parameter counts: Shoeybi et al. 2019 Table 1; Korthikanti et al. 2022 Table 3;
# Radford et al. 2019 Table 2 (GPT-2 sizes as re-counted by the HF release); Llama 3 model card;
# OLMoE (6.9B total); Mixtral (46.7B total).
PUBLISHED = {
    "gpt-small": 124e6,
    "gpt-350m": 355e6,
    "gpt2-xl": 1.56e9,
    "gpt-1.2b": 1.2e9,
    "gpt-2.5b": 2.5e9,
    "gpt-4.2b": 4.2e9,
    "gpt-8.3b": 8.3e9,
    "gpt-22b": 22e9,
    "gpt-175b": 175e9,
    "gpt-530b": 530e9,
    "gpt-1t": 1.0e12,
    "llama3-1b": 1.24e9,
    "llama3-8b": 8.03e9,
    "llama3-70b": 70.6e9,
    "olmoe-1b-7b": 6.9e9,
    "mixtral-8x7b": 46.7e9,
}


def approx_params(c: RunConfig) -> float:
    """Weights only (no biases or norms): embeddings + attention + MLP or experts."""
    d = c.hidden // c.heads
    attn = c.hidden * (c.hidden + 2 * c.groups * d) + c.hidden * c.hidden
    mats = 3 if c.activation == "swiglu" else 2
    mlp = (
        mats * c.hidden * c.ffn_size
        if c.experts == 0
        else c.experts * (mats * c.hidden * c.moe_ffn_size + c.hidden)
    )
    embed = c.vocab * c.hidden * (1 if c.tied_embeddings else 2) + (
        c.seq * c.hidden if c.position == "learned" else 0
    )
    return embed + c.layers * (attn + mlp)


def test_registry_shape():
    assert presets.names() == list(presets.PRESETS)
    assert set(presets.names()) == set(LAYOUTS)
    for name in presets.names():
        assert presets.source(name)
        assert presets.get(name).name == name


@pytest.mark.parametrize("name", presets.names())
def test_preset_runs_at_a_sensible_layout(name):
    layout = {k: v for k, v in LAYOUTS[name].items() if k != "dp"}
    cfg = presets.get(name).replace(**layout)
    assert cfg.problems() == []
    assert cfg.problems(te_available=True, gpu_name="NVIDIA H200", gpus_available=cfg.gpus) == []


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_the_paper(name):
    assert approx_params(presets.get(name)) == pytest.approx(PUBLISHED[name], rel=0.05)


def test_small_presets_fit_one_gpu():
    # 16 bytes/parameter for bf16 weights + fp32 grads, master weights and Adam: under 24 GB
    for name in ("gpt-tiny", "gpt-small", "gpt-350m", "llama3-1b", "moe-tiny", "moe-small"):
        assert approx_params(presets.get(name)) * 16 < 24e9, name


def test_unknown_preset_names_the_choices():
    with pytest.raises(
        presets.UnknownPreset, match="unknown preset 'gpt-9t': pick one of gpt-tiny"
    ):
        presets.get("gpt-9t")
    with pytest.raises(KeyError):
        presets.source("nope")


def test_get_returns_a_fresh_default_layout():
    c = presets.get("llama3-8b")
    assert (c.gpus, c.tp, c.pp, c.dp, c.query_groups, c.tied_embeddings) == (1, 1, 1, 1, 8, False)
    assert c.replace(tp=2).name == "llama3-8b"
