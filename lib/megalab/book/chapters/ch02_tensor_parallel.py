"""Chapter 02, tensor parallelism: its runs, by name."""

from __future__ import annotations

from megalab.runs import presets
from megalab.book.specs import GROUP_ITERS, ITERS, PARITY_ITERS, Group, Parity, Profiled, degrees


WEAK_TP_MODELS = {1: "gpt-1.2b", 2: "gpt-2.5b", 4: "gpt-4.2b", 8: "gpt-8.3b"}  # Shoeybi et al. 2019, Table 1


def runs(gpus: int = 4, iters: int = ITERS) -> dict:
    """Shoeybi et al. 2019's models with Transformer Engine; TP within one NVLink domain."""
    ts = [t for t in degrees(gpus) if t in WEAK_TP_MODELS]
    model = lambda t: presets.get(WEAK_TP_MODELS[t]).replace(iters=iters)  # noqa: E731
    small = presets.get("gpt-1.2b").replace(iters=iters)
    top = ts[-1]
    graphed = lambda t, name: presets.get(name).replace(gpus=t, tp=t, mbs=8, gbs=8, iters=GROUP_ITERS,  # noqa: E731
                                                          cuda_graphs="te")
    return {
        "weak": [model(t).replace(gpus=t, tp=t, mbs=8, gbs=8) for t in ts],          # the paper's batch 8
        "weak_large": [model(t).replace(gpus=t, tp=t, mbs=16, gbs=32) for t in ts],
        "strong": [small.replace(gpus=t, tp=t, mbs=8, gbs=8) for t in ts],
        "profile": Profiled(small.replace(gpus=top, tp=top, mbs=8, gbs=8)),
        "tp_vs_dp": [small.replace(gpus=top, tp=t, mbs=8, gbs=8 * top, dist_opt=t < top) for t in ts],
        "parity": [Parity(small.replace(gpus=t, tp=t, mbs=8, gbs=8, iters=PARITY_ITERS)) for t in ts if t > 1],
        # timed on one host, alternated, GPU-bound (CUDA graphs): strong scaling as Shoeybi et al.'s Table 8,
        # TP 2 eager (what graphs save), weak scaling's larger models; the largest TP profiled
        "groups": {"tp": Group("ch02.tp", [graphed(t, "gpt-1.2b") for t in ts]
                               + [graphed(2, "gpt-1.2b").replace(cuda_graphs="none") for t in ts if t == 2]
                               + [graphed(t, WEAK_TP_MODELS[t]) for t in ts if t > 1], profiled=len(ts) - 1)},
    }
