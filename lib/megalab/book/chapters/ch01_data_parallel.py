"""Chapter 01, data parallelism and the distributed optimizer: its runs, by name."""

from __future__ import annotations

from megalab.runs import presets
from megalab.book.specs import GROUP_ITERS, ITERS, PARITY_ITERS, Fit, Group, Parity, degrees


def runs(gpus: int = 4, iters: int = ITERS, gpu: str = "H200") -> dict:
    """gpt2-xl (1.56 B parameters, seq 1024), Transformer Engine spec. mbs 4 unless said otherwise.
    `gpu`: the card the memory searches are sized for (the reference H200, or a reader's own
    GPU)."""
    base = presets.get("gpt2-xl").replace(iters=iters)
    ds = degrees(gpus)
    top = ds[-1]
    # 16 sequences per GPU per step
    weak = [base.replace(gpus=d, mbs=4, gbs=16 * d) for d in ds]
    # one micro-batch per GPU at top
    strong = [base.replace(gpus=d, mbs=4, gbs=4 * top) for d in ds]
    return {
        "one_gpu": base.replace(mbs=1, gbs=1),
        "fit_mbs": Fit(base.replace(mbs=1, gbs=1), "mbs", gpu),
        # the card most readers have
        "fit_mbs_80gb": Fit(base.replace(mbs=1, gbs=1), "mbs", "H100"),
        "accumulation": [base.replace(mbs=4, gbs=4 * k) for k in (1, 2, 4, 8)],
        "weak": weak,
        # scaling where the GPU, not the host's kernel launches, sets the pace (mbs 4 is
        # launch-bound)
        "weak_mbs16": [base.replace(gpus=d, mbs=16, gbs=64 * d) for d in ds],
        "strong": strong,
        "overlap": [c.replace(overlap=True) for c in weak if c.dp > 1],
        "dist_opt": [c.replace(dist_opt=True) for c in weak if c.dp > 1],
        "reduce_mbs16": [
            base.replace(gpus=top, mbs=16, gbs=64 * top, **kw)
            for kw in ({"overlap": True}, {"dist_opt": True}, {"dist_opt": True, "overlap": True})
        ],
        "fit_mbs_dist_opt": [
            Fit(base.replace(gpus=d, mbs=1, gbs=d, dist_opt=True), "mbs", gpu) for d in ds[1:]
        ],
        # DP replicates the model state, so without the distributed optimizer DP=N fits what 1 GPU
        # fits
        "fit_layers": Fit(base.replace(mbs=1, gbs=1), "layers", gpu, step=8, width=0.05),
        "fit_layers_dist_opt": Fit(
            base.replace(gpus=top, mbs=1, gbs=top, dist_opt=True), "layers", gpu, step=8, width=0.05
        ),
        # DP=top + distributed optimizer against DP=1 with accumulation, same global batch
        "parity": Parity(
            base.replace(gpus=top, mbs=4, gbs=4 * top, dist_opt=True, iters=PARITY_ITERS)
        ),
        # weak and strong scaling and the gradient-reduce overlap, each timed on one host,
        # alternated, with CUDA graphs (GPU-bound at mbs 4); the widest profiled
        "groups": _groups(weak, strong),
    }


def _groups(weak: list, strong: list) -> dict:
    """ch01.dp-weak (16 sequences per GPU), ch01.dp-strong (one global batch over 1, 2, 4 GPUs)
    and, from 2 GPUs, ch01.overlap (the widest weak point with the gradient reduce overlapped or
    not: a difference under 10%, so three rounds)."""
    graphed = lambda cs: [c.replace(iters=GROUP_ITERS, cuda_graphs="te") for c in cs]  # noqa: E731
    out = {
        "dp_weak": Group("ch01.dp-weak", graphed(weak), profiled=len(weak) - 1),
        "dp_strong": Group("ch01.dp-strong", graphed(strong), profiled=len(strong) - 1),
    }
    if weak[-1].dp > 1:
        pair = graphed([weak[-1].replace(overlap=o) for o in (False, True)])
        out["overlap"] = Group("ch01.overlap", pair, rounds=3, profiled=1)
    return out


def defining(gpus: int = 4, iters: int = ITERS, gpu: str = "H200") -> list:
    """The points that define the chapter's figures, re-measured by a quick reproduction beside the
    reference: the memory figure's runs (weak scaling at mbs 4, each degree, and the top degree with
    the distributed optimizer) and the comparison groups its timing figures read (weak and strong
    scaling, the overlapped gradient reduce), with their CUDA graphs, as recorded."""
    r = runs(gpus, iters, gpu)
    return [*r["weak"], *r["dist_opt"][-1:], *r["groups"].values()]
