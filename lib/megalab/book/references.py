"""The papers the book cites, each with its link: `cite` writes the link a figure, table or printed
line needs.

    >>> references.cite("korthikanti2022")       # '[Korthikanti et al. 2022](https://arxiv.org/abs/2205.05198)'

Prose cites with the same Markdown link, written by hand: it reads the same in the HTML book and in
JupyterLab (a `{cite}` role would show as markup there). `book/references.md` lists every paper here
(tests/test_references.py holds the two together).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PAPERS", "Paper", "cite", "SERIES_COMMIT", "series"]

# the vuiseng9/megatron-tutorials series (eager Megatron-LM on one 8×H100 node) whose tables the
# chapters quote beside their own runs, pinned to the commit their numbers were copied from
SERIES_COMMIT = "0b2c030a1db783c2c15313bd91b2db10860ac637"


def series(page: str) -> str:
    """The series' `page` ("03-cp.md") at SERIES_COMMIT."""
    return f"https://github.com/vuiseng9/megatron-tutorials/blob/{SERIES_COMMIT}/{page}"


@dataclass(frozen=True)
class Paper:
    short: str  # as the prose cites it: "Korthikanti et al. 2022"
    title: str
    url: str  # arXiv's abstract page where there is one

    def line(self) -> str:
        """The paper as references.md lists it."""
        return f"[{self.short}]({self.url}), *{self.title}*."


PAPERS = {
    "shoeybi2019": Paper(
        "Shoeybi et al. 2019",
        "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model Parallelism",
        "https://arxiv.org/abs/1909.08053",
    ),
    "narayanan2021": Paper(
        "Narayanan et al. 2021",
        "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
        "https://arxiv.org/abs/2104.04473",
    ),
    "korthikanti2022": Paper(
        "Korthikanti et al. 2022",
        "Reducing Activation Recomputation in Large Transformer Models",
        "https://arxiv.org/abs/2205.05198",
    ),
    "rajbhandari2020": Paper(
        "Rajbhandari et al. 2020",
        "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
        "https://arxiv.org/abs/1910.02054",
    ),
    "chen2016": Paper(
        "Chen et al. 2016",
        "Training Deep Nets with Sublinear Memory Cost",
        "https://arxiv.org/abs/1604.06174",
    ),
    "dao2022": Paper(
        "Dao et al. 2022",
        "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
        "https://arxiv.org/abs/2205.14135",
    ),
    "huang2019": Paper(
        "Huang et al. 2019",
        "GPipe: Efficient Training of Giant Neural Networks using Pipeline Parallelism",
        "https://arxiv.org/abs/1811.06965",
    ),
    "liu2023": Paper(
        "Liu et al. 2023",
        "Ring Attention with Blockwise Transformers for Near-Infinite Context",
        "https://arxiv.org/abs/2310.01889",
    ),
    "jacobs2023": Paper(
        "Jacobs et al. 2023",
        "DeepSpeed Ulysses: System Optimizations for Enabling Training of "
        "Extreme Long Sequence Transformer Models",
        "https://arxiv.org/abs/2309.14509",
    ),
    "shazeer2017": Paper(
        "Shazeer et al. 2017",
        "Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer",
        "https://arxiv.org/abs/1701.06538",
    ),
    "fedus2021": Paper(
        "Fedus et al. 2021",
        "Switch Transformers: Scaling to Trillion Parameter Models with Simple "
        "and Efficient Sparsity",
        "https://arxiv.org/abs/2101.03961",
    ),
    "jiang2024": Paper(
        "Jiang et al. 2024", "Mixtral of Experts", "https://arxiv.org/abs/2401.04088"
    ),
    "muennighoff2024": Paper(
        "Muennighoff et al. 2024",
        "OLMoE: Open Mixture-of-Experts Language Models",
        "https://arxiv.org/abs/2409.02060",
    ),
    "dubey2024": Paper(
        "Dubey et al. 2024", "The Llama 3 Herd of Models", "https://arxiv.org/abs/2407.21783"
    ),
    "radford2019": Paper(
        "Radford et al. 2019",
        "Language Models are Unsupervised Multitask Learners (GPT-2)",
        "https://cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_"
        "learners.pdf",
    ),
}


def cite(key: str, page: str | None = None) -> str:
    """The Markdown link that cites a paper: '[Korthikanti et al.
    2022](https://arxiv.org/abs/2205.05198)'; `page` adds where in it ('Table 2'). KeyError names
    the known keys."""
    if key not in PAPERS:
        raise KeyError(f"no paper {key!r}: the book cites {', '.join(PAPERS)}")
    p = PAPERS[key]
    return f"[{p.short}{', ' + page if page else ''}]({p.url})"
