"""megalab.theory.context: the 2·cp-chunk split, causal work per rank, the ring's overlap
condition."""

import numpy as np
import pytest

from megalab import theory
from megalab.runs import presets
from megalab.theory import context


def _brute_work(cp: int, seq: int, split: str) -> list[float]:
    """Query-key pairs under a causal mask, counted token by token, per rank (shares of the
    total)."""
    n = (2 if split == "zigzag" else 1) * cp
    owner = np.empty(seq, dtype=int)
    size = seq // n
    for rank in range(cp):
        for c in context.chunks_of_rank(cp, rank, split):
            owner[c * size : (c + 1) * size] = rank
    pairs = np.arange(1, seq + 1)  # query q sees keys 0..q
    work = np.bincount(owner, weights=pairs, minlength=cp)
    return list(work / work.sum())


def test_zigzag_chunks_are_megatrons():
    """Megatron's get_batch_on_this_cp_rank (Dubey et al. 2024, §3.3.2): rank i holds chunks i and
    2cp−1−i."""
    assert [context.chunks_of_rank(4, r) for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]
    assert context.chunks_of_rank(4, 2, "contiguous") == (2,)
    every = sorted(c for r in range(8) for c in context.chunks_of_rank(8, r))
    assert every == list(range(16))  # each chunk on exactly one rank
    with pytest.raises(ValueError):
        context.chunks_of_rank(2, 2)
    with pytest.raises(ValueError):
        context.chunks_of_rank(2, 0, "striped")


@pytest.mark.parametrize("cp", [1, 2, 4, 8])
def test_contiguous_split_rank_i_does_2i_plus_1(cp):
    """Long chunks: rank i of a contiguous split does (2i+1)/cp² of the causal work."""
    assert theory.causal_work(cp, "contiguous") == pytest.approx(
        [(2 * i + 1) / cp**2 for i in range(cp)]
    )
    assert theory.causal_imbalance(cp, "contiguous") == pytest.approx((2 * cp - 1) / cp)


@pytest.mark.parametrize("cp", [1, 2, 4, 8])
def test_zigzag_split_is_balanced_exactly(cp):
    """Chunks i and 2cp−1−i: equal work on every rank, in the limit and counted token by token."""
    assert theory.causal_work(cp) == pytest.approx([1 / cp] * cp)
    assert theory.causal_work(cp, seq=64 * cp) == pytest.approx([1 / cp] * cp, abs=1e-12)
    assert theory.causal_imbalance(cp, seq=64 * cp) == pytest.approx(1.0)


@pytest.mark.parametrize("split", context.SPLITS)
def test_exact_counts_match_a_token_by_token_count(split):
    for cp, seq in ((2, 16), (4, 64), (8, 256)):
        assert theory.causal_work(cp, split, seq=seq) == pytest.approx(_brute_work(cp, seq, split))
    with pytest.raises(ValueError):
        theory.causal_work(4, "zigzag", seq=100)  # Megatron needs seq % (2·cp) == 0


def test_contiguous_ring_is_no_faster_than_unmasked_attention():
    """Brandon et al. 2023 (Striped Attention): with contiguous chunks the busiest rank does nearly
    the work of unmasked attention, twice the causal mean, whatever the ring size."""
    assert theory.causal_imbalance(64, "contiguous") == pytest.approx(2, abs=0.02)
    assert theory.causal_imbalance(2, "contiguous") == pytest.approx(1.5)


def test_attention_share_grows_with_sequence_length():
    """QKᵀ and softmax·V: 4·h·s/2 FLOPs per token per layer forward (causal) against the rest's
    ~24h²: gpt-1.2b (h 1536) crosses half of all FLOPs between 16k and 32k tokens."""
    base = presets.get("gpt-1.2b").replace(mbs=1, gbs=1)
    shares = [
        theory.attention_flops_share(base.replace(seq=s)) for s in (2048, 16384, 32768, 65536)
    ]
    assert shares == sorted(shares)
    assert shares[1] < 0.5 < shares[2]
    # the same share from eq. (3)'s terms by hand
    h, L, V, s = base.hidden, base.layers, base.vocab, 2048
    # per token per layer, forward, /L for logits
    core, rest = 2 * h * s, 24 * h * h + 2 * h * V / L
    assert shares[0] == pytest.approx(core / (core + rest), rel=1e-9)


def test_ring_hides_the_send_from_liu_et_al_block_size_on():
    """Liu et al. 2023 (Ring Attention): a ring hop hides its K/V send when the block has c ≥ F/B
    tokens (non-causal, MHA); the causal zigzag computes half a block per hop, so c ≥ 2F/B."""
    cfg = presets.get("gpt-1.2b").replace(gpus=2, cp=2, seq=16384, mbs=1, gbs=1)
    full = theory.ring_step(cfg, attn_tflops=312, bus_bw_gbs=300, causal=False)
    assert full["min_chunk"] == pytest.approx(312e12 / 300e9)
    assert theory.ring_step(cfg, 312, 300)["min_chunk"] == pytest.approx(2 * 312e12 / 300e9)
    at_edge = cfg.replace(seq=int(2 * full["min_chunk"]))
    step = theory.ring_step(at_edge, 312, 300, causal=False)
    assert step["compute_s"] == pytest.approx(step["comm_s"])
    assert step["chunk"] == pytest.approx(full["min_chunk"])
    short = theory.ring_step(cfg.replace(seq=1024), 312, 300)
    assert not short["hidden"] and full["hidden"]
