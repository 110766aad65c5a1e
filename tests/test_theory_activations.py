"""theory.activations: the bytes per attention-score element, against Korthikanti et al. 2022's
count."""

import pytest

from megalab import theory
from megalab.runs.config import RunConfig

# the paper's setting: dropout on (its 1-byte masks are in Table 2's counts)
GPT3 = RunConfig(
    name="gpt-175b",
    layers=96,
    hidden=12288,
    heads=96,
    vocab=51200,
    seq=2048,
    impl="local",
    dropout=0.1,
)


def test_score_term_is_five_bytes_per_element_korthikanti_table2():
    """Korthikanti et al. 2022 §4.1 / Table 2: the scores cost 5·a·s/h units of s·b·h, i.e. 5 bytes
    per element of the a·s² score matrix (softmax output 2, dropout mask 1, dropout output 2)."""
    cfg = GPT3
    sbh, a, s, h = 2048 * 12288, 96, 2048, 12288
    terms = theory.activation_terms(cfg)
    assert terms["scores"] / sbh == pytest.approx(5 * a * s / h)
    assert theory.activations.SCORE_BYTES == 5


def test_bytes_per_score_inverts_the_formula():
    """A size computed with k bytes per score element gives back k, with TP and TP + SP too."""
    for cfg in (
        GPT3,
        GPT3.replace(gpus=8, tp=8),
        GPT3.replace(gpus=8, tp=8, sp=True, impl="te"),
        GPT3.replace(mbs=4, gbs=4),
    ):
        for k in (theory.activations.SCORE_BYTES, theory.activations.SCORE_BYTES_FP32_SOFTMAX):
            size = theory.activation_bytes_per_layer(cfg, "materialized", "none", score_bytes=k)
            assert theory.bytes_per_score(cfg, size) == pytest.approx(k)


def test_fp32_softmax_adds_two_bytes_per_score():
    """An unfused softmax keeps its fp32 output (4 bytes) instead of bf16 (2): 2·a·s²·b more per
    layer."""
    cfg = GPT3.replace(mbs=2, gbs=2)
    paper = theory.activation_bytes_per_layer(cfg, "materialized")
    fp32 = theory.activation_bytes_per_layer(cfg, "materialized", score_bytes=7)
    assert fp32 - paper == pytest.approx(2 * 96 * 2048**2 * 2)
    # no scores kept (flash attention, selective recompute): the bytes per score do not matter
    per_layer = theory.activation_bytes_per_layer
    assert per_layer(cfg, "flash", score_bytes=7) == per_layer(cfg, "flash")
    assert per_layer(cfg, "materialized", "selective", score_bytes=7) == pytest.approx(
        34 * 2048 * 2 * 12288
    )
