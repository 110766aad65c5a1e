"""Named model shapes from the papers, plus small variants that fit one 24-80 GB GPU: the table
only.

Each entry fixes the model fields of a RunConfig and carries a `source` citation. Vocabularies are
stored padded where the paper padded them (GPT-2's 50257 -> 50304, a multiple of 128; Megatron-LM's
51200). `megalab.runs.presets` turns an entry into a RunConfig; `megalab.runs.config` reads the
table to name how a run's model differs from its preset.
"""

from __future__ import annotations


class UnknownPreset(KeyError):
    """No preset has this name; the message lists the available ones."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


_GPT2 = dict(vocab=50304, seq=1024)  # 50257 padded to a multiple of 128
# GPT-2 vocabulary padded, Shoeybi et al. 2019
_MEGATRON = dict(vocab=51200, seq=1024)
_SP_PAPER = dict(vocab=51200, seq=2048)  # Korthikanti et al. 2022
_LLAMA = dict(norm="RMSNorm", activation="swiglu", position="rope", tied_embeddings=False)
_SHOEYBI = "Shoeybi et al. 2019, Megatron-LM, Table 1 ({} parameters)"
_KORTHIKANTI = "Korthikanti et al. 2022, Reducing Activation Recomputation, Table 3 ({} parameters)"

PRESETS: dict[str, dict] = {
    # -- small, for CPU tests and one GPU ---------------------------------------------------------
    "gpt-tiny": dict(
        layers=2,
        hidden=256,
        heads=4,
        vocab=1024,
        seq=256,
        source="megalab test model: GPT-2 shape scaled down, vocab a multiple of 128*8",
    ),
    "gpt-small": dict(
        layers=12,
        hidden=768,
        heads=12,
        **_GPT2,
        source="Radford et al. 2019, GPT-2 small (124M parameters)",
    ),
    "gpt-350m": dict(
        layers=24,
        hidden=1024,
        heads=16,
        **_GPT2,
        source="Radford et al. 2019, GPT-2 medium (350M parameters)",
    ),
    "gpt2-xl": dict(
        layers=48,
        hidden=1600,
        heads=25,
        **_GPT2,
        source="Radford et al. 2019, GPT-2 XL (1.5B parameters)",
    ),
    "gpt-24l-2048": dict(
        layers=24,
        hidden=2048,
        heads=16,
        vocab=50304,
        seq=2048,
        source="megalab performance reference: 24 layers, hidden 2048, 16 heads, seq 2048",
    ),
    # -- Megatron-LM scaling study
    # ------------------------------------------------------------------
    "gpt-1.2b": dict(layers=40, hidden=1536, heads=16, **_MEGATRON, source=_SHOEYBI.format("1.2B")),
    "gpt-2.5b": dict(layers=54, hidden=1920, heads=20, **_MEGATRON, source=_SHOEYBI.format("2.5B")),
    "gpt-4.2b": dict(layers=64, hidden=2304, heads=24, **_MEGATRON, source=_SHOEYBI.format("4.2B")),
    "gpt-8.3b": dict(layers=72, hidden=3072, heads=32, **_MEGATRON, source=_SHOEYBI.format("8.3B")),
    # -- sequence parallelism / selective recomputation paper
    # -------------------------------------------
    "gpt-22b": dict(
        layers=48, hidden=6144, heads=64, **_SP_PAPER, source=_KORTHIKANTI.format("22B")
    ),
    "gpt-175b": dict(
        layers=96, hidden=12288, heads=96, **_SP_PAPER, source=_KORTHIKANTI.format("175B")
    ),
    "gpt-530b": dict(
        layers=105, hidden=20480, heads=128, **_SP_PAPER, source=_KORTHIKANTI.format("530B")
    ),
    "gpt-1t": dict(
        layers=128, hidden=25600, heads=160, **_SP_PAPER, source=_KORTHIKANTI.format("1T")
    ),
    # -- Llama 3
    # ------------------------------------------------------------------------------------
    "llama3-1b": dict(
        layers=16,
        hidden=2048,
        heads=32,
        query_groups=8,
        ffn=8192,
        vocab=128256,
        seq=2048,
        **{**_LLAMA, "tied_embeddings": True},
        source="Meta Llama 3.2 1B model card (tied embeddings; seq shortened to 2048)",
    ),
    "llama3-8b": dict(
        layers=32,
        hidden=4096,
        heads=32,
        query_groups=8,
        ffn=14336,
        vocab=128256,
        seq=8192,
        **_LLAMA,
        source="Grattafiori et al. 2024, The Llama 3 Herd of Models, Table 3",
    ),
    "llama3-70b": dict(
        layers=80,
        hidden=8192,
        heads=64,
        query_groups=8,
        ffn=28672,
        vocab=128256,
        seq=8192,
        **_LLAMA,
        source="Grattafiori et al. 2024, The Llama 3 Herd of Models, Table 3",
    ),
    # -- mixture of experts
    # -------------------------------------------------------------------------
    "moe-tiny": dict(
        layers=2,
        hidden=256,
        heads=4,
        experts=8,
        topk=2,
        moe_ffn=512,
        vocab=1024,
        seq=256,
        **_LLAMA,
        source="megalab test model: 8 experts, top-2",
    ),
    "moe-small": dict(
        layers=8,
        hidden=1024,
        heads=16,
        experts=8,
        topk=2,
        moe_ffn=2816,
        vocab=50304,
        seq=2048,
        **_LLAMA,
        source="megalab one-GPU MoE: Mixtral-style, scaled down",
    ),
    "olmoe-1b-7b": dict(
        layers=16,
        hidden=2048,
        heads=16,
        experts=64,
        topk=8,
        moe_ffn=1024,
        vocab=50304,
        seq=4096,
        **_LLAMA,
        source="Muennighoff et al. 2024, OLMoE (1B active, 7B total)",
    ),
    "olmoe-like": dict(
        layers=16,
        hidden=1024,
        heads=16,
        experts=64,
        topk=8,
        moe_ffn=1024,
        vocab=50304,
        seq=4096,
        **_LLAMA,
        source="the seed tutorial's expert-parallel model: OLMoE-like (Muennighoff et al. "
        "2024), hidden 1024, 16 layers, 64 experts top-8, expert FFN 1024",
    ),
    "mixtral-8x7b": dict(
        layers=32,
        hidden=4096,
        heads=32,
        query_groups=8,
        ffn=14336,
        experts=8,
        topk=2,
        moe_ffn=14336,
        vocab=32000,
        seq=4096,
        **_LLAMA,
        source="Jiang et al. 2024, Mixtral of Experts, Table 1",
    ),
}


def names() -> list[str]:
    """Preset names in registry order (small to large within each family)."""
    return list(PRESETS)
