"""theory.recompute: FLOPs by kind of kernel (GEMM, core attention), against Narayanan et al. 2021
eq. (3)."""

import pytest

from megalab import theory
from megalab.runs import presets
from megalab.runs.config import RunConfig
from megalab.theory.recompute import KINDS, flops_by_kind, flops_ratio_by_kind

GPT3 = RunConfig(
    name="gpt-175b", layers=96, hidden=12288, heads=96, vocab=51200, seq=2048, mbs=1, gbs=1536
)


def test_narayanan_eq3_split_into_gemm_and_attention():
    """Narayanan et al. 2021 eq. (3), non-causal: 72·B·s·L·h²·(1 + s/(6h) + V/(12hL)) without
    recomputation, 96·B·s·L·h²·(1 + s/(6h) + V/(16hL)) with full recomputation; the s/(6h) term is
    the core attention."""
    B, s, L, h, V = GPT3.gbs, GPT3.seq, GPT3.layers, GPT3.hidden, GPT3.vocab
    none = flops_by_kind(GPT3, "none", causal=False)
    full = flops_by_kind(GPT3, "full", causal=False)
    assert none["attention"] == pytest.approx(72 * B * s * L * h**2 * s / (6 * h))
    assert none["gemm"] == pytest.approx(72 * B * s * L * h**2 * (1 + V / (12 * h * L)))
    assert full["attention"] == pytest.approx(96 * B * s * L * h**2 * s / (6 * h))
    assert full["gemm"] == pytest.approx(96 * B * s * L * h**2 * (1 + V / (16 * h * L)))


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize(
    "cfg",
    [
        presets.get("gpt-1.2b").replace(seq=2048, mbs=4, gbs=4),
        presets.get("gpt-350m").replace(norm="RMSNorm", activation="swiglu", position="rope"),
        GPT3.replace(gbs=8),
    ],
)
def test_kinds_add_up_to_the_step(cfg, recompute):
    parts = flops_by_kind(cfg, recompute)
    assert set(parts) == set(KINDS) and min(parts.values()) > 0
    assert sum(parts.values()) == pytest.approx(theory.flops_per_step(cfg, recompute))


def test_selective_reruns_only_the_attention_full_reruns_both():
    """Selective: one more forward of the core attention (forward + 2 × backward → 4/3), GEMMs
    unchanged; full: every layer's forward again, 4/3 of the layers' GEMMs (the logits are not
    recomputed)."""
    cfg = presets.get("gpt-1.2b").replace(seq=2048, mbs=4, gbs=4)
    sel = flops_ratio_by_kind(cfg.replace(recompute="selective"))
    full = flops_ratio_by_kind(cfg.replace(recompute="full"))
    assert sel["gemm"] == pytest.approx(1.0) and sel["attention"] == pytest.approx(4 / 3)
    assert full["attention"] == pytest.approx(4 / 3) and 1.25 < full["gemm"] < 4 / 3
    assert full["all"] == pytest.approx(
        theory.hardware_flops(cfg.replace(recompute="full")) / theory.model_flops(cfg)
    )
    assert flops_ratio_by_kind(cfg) == {"gemm": 1.0, "attention": 1.0, "all": 1.0}


def test_recomputing_the_mlp_reruns_its_gemms_and_keeps_no_mlp_activations():
    """recompute_modules=mlp (dense): the MLP's forward again (its GEMMs: 4/3), the attention not;
    per layer the MLP term and its separate input (2 units of s·b·h) go, the rest stays."""
    cfg = presets.get("gpt-1.2b").replace(
        seq=2048, mbs=4, gbs=4, recompute="selective", recompute_modules="mlp"
    )
    h, f = cfg.hidden, cfg.ffn_size
    mlp_fwd = cfg.gbs * cfg.seq * cfg.layers * 2 * 2 * h * f
    assert theory.hardware_flops(cfg) - theory.model_flops(cfg) == pytest.approx(mlp_fwd)
    assert flops_ratio_by_kind(cfg)["attention"] == pytest.approx(1.0)
    none = theory.activation_terms(cfg, recompute="none")
    terms = theory.activation_terms(cfg)
    unit = cfg.seq * cfg.mbs * h
    assert terms["mlp"] == 0 and terms["replicated"] == pytest.approx(none["replicated"] - 2 * unit)
    assert terms["attention"] == none["attention"]
