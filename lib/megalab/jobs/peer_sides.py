"""What the two sides of a peer pair share, and what not: the trainer's run of a RunConfig and
Megatron-LM's pretrain_gpt.py given the same one (megalab.jobs.peer).

    peer.sides(cfg)            # setting, megalab, megatron_lm, same: one row per setting
    peer.fusion_equal(cfg)     # whether both sides accumulate weight gradients alike
    peer.mock_unigram_nats()   # the loss of token frequencies alone on the peer's mock data

Read from the flags megalab.jobs.peer passes, the trainer's wiring (megalab.train.wiring) and, for
what pretrain_gpt.py does on its own, Megatron-LM core_v0.16.1's code.
"""

from __future__ import annotations

from megalab.train import wiring

# Megatron-LM's mock data (megatron.core.datasets.gpt_dataset.MockGPTLowLevelDataset): documents
# 1, 2, ..., n-1 and the end-of-document id, n drawn below this length
MOCK_MAX_LENGTH = 4096


def mock_unigram_nats(max_length: int = MOCK_MAX_LENGTH) -> float:
    """The loss (nats per token) of a model that knows only how often each token occurs in
    Megatron-LM's mock data, and nothing of its context: the entropy of its token frequencies. A
    document of length n (uniform in 1..max_length-1) holds tokens 1..n-1 and one end-of-document
    id, so token k occurs in the documents longer than k."""
    import numpy as np

    n = max_length - 1  # the lengths drawn: 1..n
    counts = np.append((n - np.arange(1, n)) / n, 1.0)  # tokens 1..n-1, then end-of-document
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def fusion_equal(cfg) -> bool:
    """Whether both sides of cfg's pair accumulate weight gradients alike: grad_accum_fusion off
    (both unfused) or on (both fused; the peer needs Apex), not auto (the trainer fuses in
    Transformer Engine's linears, the peer runs --no-gradient-accumulation-fusion)."""
    return cfg.grad_accum_fusion != "auto"


def _fusion(cfg) -> tuple[str, str]:
    unfused = "unfused: an add kernel per weight and micro-batch"
    if cfg.grad_accum_fusion == "off":
        both = unfused + " (--grad-accum-fusion off; --no-gradient-accumulation-fusion)"
        return both, both
    if cfg.grad_accum_fusion == "on":
        both = "fused into the weight-gradient GEMMs (the peer needs Apex)"
        return both, both
    return "fused into Transformer Engine's GEMMs", unfused + " (--no-gradient-accumulation-fusion)"


def _graphs(cfg) -> str:
    if cfg.cuda_graphs == "none":
        return "none (eager)"
    who = {"te": "Transformer Engine", "local": "Megatron Core"}[cfg.cuda_graphs]
    scope = "attention and router of each layer" if cfg.experts else "each transformer layer"
    return f"{who} captures {scope} after {wiring.GRAPH_WARMUP_STEPS} eager step"


def _data(cfg) -> tuple[str, str]:
    if cfg.data:
        same = f"{cfg.data} through Megatron's GPTDataset (seed {cfg.seed}, split 100,0,0)"
        return same, same
    return (
        f"synthetic: a Markov chain over {min(cfg.vocab, 4096):,} token ids, 4 successors each, "
        "drawn per global sample (megalab.data)",
        f"mock: documents 1, 2, …, n−1 and end-of-document, n uniform below {MOCK_MAX_LENGTH:,}, "
        f"shuffled into {cfg.seq:,}-token samples (--mock-data)",
    )


def _model(cfg) -> str:
    axes = [f"{a.upper()} {getattr(cfg, a)}" for a in ("tp", "pp", "vpp", "cp", "ep", "dp")]
    layout = ", ".join(a for a in axes if not a.endswith(" 1")) or "1 GPU"
    return (
        f"{cfg.name} ({cfg.layers} layers, hidden {cfg.hidden}, vocabulary {cfg.vocab:,} "
        f"unpadded, {cfg.seq:,} tokens); {layout}; micro-batch {cfg.mbs}, global batch {cfg.gbs}"
    )


def _init(cfg) -> tuple[str, str]:
    peer = "N(0, 0.02), output projections 0.02/√(2L): Megatron's init, drawn per rank from --seed"
    if cfg.init == "megatron":
        return peer, peer
    return "N(0, 0.02), output projections 0.02/√(2L), drawn per global parameter name", peer


def sides(cfg, launches=()):
    """What the trainer's run of `cfg` and its peer's (peer_config(cfg), args(cfg)) share, row by
    row: a DataFrame with `setting`, `megalab`, `megatron_lm` and `same`. `launches` (cuda_graphs
    values, e.g. {"none", "te"}) words the CUDA-graphs row for a pair run both ways; default cfg's.
    From the flags this module passes and the trainer's wiring (megalab.train.wiring), and, for what
    pretrain_gpt.py does on its own, Megatron-LM core_v0.16.1's code: its data loader and NaN
    checks, and its step timer."""
    import pandas as pd

    opt = (
        f"Adam (0.9, 0.95, eps 1e-8), weight decay 0.1, clip 1.0; lr {cfg.lr:g}, "
        f"{cfg.lr_warmup_steps} warm-up steps, cosine to lr/10"
    )
    compiled = "torch.compile (Megatron's jit_fuser)"
    tp_note = "; broadcast to the other TP ranks" if cfg.tp > 1 else ""
    rows = [
        ("model, layout, batch", _model(cfg), None),
        (
            "precision, kernels",
            "bf16, " + ("Transformer Engine" if cfg.impl == "te" else "local"),
            None,
        ),
        ("optimizer, schedule", opt, None),
        ("dropout", f"{cfg.dropout:g} (hidden and attention)", None),
        (
            "CUDA graphs",
            "; or ".join(_graphs(cfg.replace(cuda_graphs=g)) for g in sorted(launches))
            if launches
            else _graphs(cfg),
            None,
        ),
        (
            "fused elementwise ops",
            compiled if cfg.compile else "eager (TORCH_COMPILE_DISABLE)",
            compiled,
        ),
        ("weight-gradient accumulation", *_fusion(cfg)),
        ("initial weights", *_init(cfg)),
        ("data", *_data(cfg)),
        (
            "batch delivery",
            "each rank makes its micro-batch on the host; no attention mask (causal kernel)",
            f"a DataLoader (2 workers) on TP rank 0, with a {cfg.seq:,} × {cfg.seq:,} attention "
            f"mask "
            f"per sample{tp_note}; "
            "the TransformerConfig rebuilt from the arguments every micro-batch",
        ),
        (
            "NaN checks",
            "none",
            "loss (NaN, Inf) every micro-batch, each gradient bucket's norm every step: each "
            "check waits for the GPU",
        ),
        (
            "step time",
            "synchronised clock from zero_grad to the scheduler step; logging outside it",
            "interval timer between two log lines (barrier, synchronise; --log-interval 1): "
            "logging inside it",
        ),
    ]
    out = pd.DataFrame(
        [{"setting": s, "megalab": a, "megatron_lm": a if b is None else b} for s, a, b in rows]
    )
    out["same"] = out["megalab"] == out["megatron_lm"]
    return out
