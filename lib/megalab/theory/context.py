"""Context parallelism: how a sequence is split over CP ranks, the causal work each rank does, and
when the ring of K/V sends hides behind attention.

Megatron Core cuts every sequence into 2·cp chunks and gives rank i chunks i and 2cp−1−i
(`megatron.core.utils.get_batch_on_this_cp_rank`; Dubey et al. 2024, Llama 3, §3.3.2), because under
a causal mask a contiguous split gives the last rank the most work (Brandon et al. 2023, Striped
Attention). Memory and bytes per step with cp are in megalab.theory.footprint and .comm (s → s/cp).
"""

from __future__ import annotations

from megalab.theory.flops import flops_per_step

__all__ = [
    "SPLITS",
    "chunks_of_rank",
    "causal_work",
    "causal_imbalance",
    "attention_flops_share",
    "ring_step",
]

SPLITS = ("contiguous", "zigzag")
ACT_BYTES = 2  # bf16 K and V on the wire


def chunks_of_rank(cp: int, rank: int, split: str = "zigzag") -> tuple[int, ...]:
    """Which chunks of the sequence rank `rank` holds: zigzag, chunks (i, 2cp−1−i) of 2·cp;
    contiguous, chunk i of cp."""
    if not 0 <= rank < cp:
        raise ValueError(f"rank={rank}: a CP group of {cp} has ranks 0..{cp - 1}")
    if split == "zigzag":
        return (rank, 2 * cp - 1 - rank)
    if split == "contiguous":
        return (rank,)
    raise ValueError(f"split={split!r}: use one of {', '.join(SPLITS)}")


def _pairs_before(end: float, seq: int | None) -> float:
    """Query-key pairs a causal mask keeps for queries 0..end−1: Σ (q+1) = end(end+1)/2 tokens
    exactly, end²/2 in the limit of long chunks (seq None, `end` a fraction of the sequence)."""
    return end * (end + 1) / 2 if seq else end * end / 2


def causal_work(cp: int, split: str = "zigzag", seq: int | None = None) -> list[float]:
    """Each rank's share of one causal attention's work (the query-key pairs under the mask),
    summing to 1.

    Contiguous split, long chunks: rank i's queries see all i earlier chunks and half of its own,
    (2i+1)/cp² of the total: the last rank does 2 − 1/cp times the mean. Zigzag: chunks i and
    2cp−1−i together see 2cp−1 earlier chunks and two halves, the same for every rank, 1/cp each.
    With `seq` (tokens, a multiple of 2·cp) the pairs are counted exactly: zigzag stays exactly
    equal.
    """
    n = (2 if split == "zigzag" else 1) * cp
    size = seq / n if seq else 1.0 / n
    if seq and seq % n:
        raise ValueError(
            f"seq={seq}: must divide into {n} chunks (Megatron needs seq % (2·cp) == 0)"
        )
    work = [
        sum(
            _pairs_before((c + 1) * size, seq) - _pairs_before(c * size, seq)
            for c in chunks_of_rank(cp, r, split)
        )
        for r in range(cp)
    ]
    total = sum(work)
    return [w / total for w in work]


def causal_imbalance(cp: int, split: str = "zigzag", seq: int | None = None) -> float:
    """The busiest rank's attention work over the mean: what the slowest rank costs the step's
    attention (ranks wait for each other at every ring hop and collective). Contiguous: (2cp−1)/cp,
    which tends to 2, i.e. no faster than unmasked attention (Brandon et al. 2023); zigzag: 1."""
    work = causal_work(cp, split, seq)
    return max(work) * cp


def attention_flops_share(cfg) -> float:
    """Share of the model FLOPs per step spent in QKᵀ and softmax·V under the causal mask (grows
    with s, the rest of a layer with s): the non-causal count minus the causal one is the causal
    core."""
    causal = flops_per_step(cfg)
    return (flops_per_step(cfg, causal=False) - causal) / causal


def ring_step(cfg, attn_tflops: float, bus_bw_gbs: float, causal: bool = True) -> dict:
    """One forward hop of ring (p2p) attention on one rank: the attention it computes while the next
    K/V chunk travels, and that send.

    Liu et al. 2023 (Ring Attention): a block of c queries against c keys costs 4·d·c² FLOPs, its K
    and V 4·c·d bytes (bf16), so the send hides when 4dc²/F ≥ 4cd/B, i.e. c ≥ F/B. Here c = s/cp
    tokens per rank, d the query width (h/t) against the K/V width (GQA: h·g/a/t), batch b = mbs;
    with the causal mask and the zigzag split every hop after the first computes half a block, so c
    ≥ 2·F/B (MHA). `attn_tflops`: the attention kernels' rate F; `bus_bw_gbs`: the send's bandwidth
    B. Returns compute_s, comm_s, hidden (compute_s >= comm_s) and min_chunk (the c where they are
    equal).
    """
    c, b, t = cfg.seq / cfg.cp, cfg.mbs, cfg.tp
    head = cfg.hidden // cfg.heads
    q_width, kv_width = head * cfg.heads / t, head * cfg.groups / t
    frac = 0.5 if causal else 1.0
    rate, bw = attn_tflops * 1e12, bus_bw_gbs * 1e9
    compute = 4 * q_width * c * c * b * frac / rate
    comm = 2 * c * b * kv_width * ACT_BYTES / bw
    min_chunk = 2 * kv_width * ACT_BYTES * rate / (4 * q_width * frac * bw)
    return {
        "chunk": c,
        "compute_s": compute,
        "comm_s": comm,
        "hidden": compute >= comm,
        "min_chunk": min_chunk,
    }
