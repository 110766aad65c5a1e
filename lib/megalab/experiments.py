"""The runs behind each chapter, defined once: the notebook asks for them by name, and the GPU host's
recording plan is printed from the same definitions (`megalab experiments ch01 --missing`), so the book
and its records cannot drift apart.

Every chapter function takes `gpus`, the most GPUs to scale to: the same chapter extends from 4 to 8
GPUs (or any power of two) without code changes. Values are RunConfigs (one run), lists of them (a
series), or the specs below for questions that take several runs (Fit, Parity) or a profiled run.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from megalab import presets
from megalab.config import RunConfig, config_to_args

ITERS = 20          # steps per measured run: 3 warm-up steps dropped (metrics.WARMUP_STEPS), median of the rest
PARITY_ITERS = 50   # steps per loss-parity run


def degrees(gpus: int) -> list[int]:
    """1, 2, 4, ... up to gpus: the parallel sizes a chapter sweeps."""
    if gpus < 1:
        raise ValueError(f"gpus={gpus}: need at least 1")
    out = [1]
    while out[-1] * 2 <= gpus:
        out.append(out[-1] * 2)
    return out


def sizing_gpu(mode: str, reference: str = "H200") -> str:
    """The GPU model a chapter's memory searches are sized for: this machine's, when it will run live
    and its model is in megalab.hardware; otherwise the reference records' GPU."""
    from megalab.env import local_gpus
    from megalab.hardware import UnknownGPU, gpu_spec
    here = local_gpus()[0] if mode != "cached" else None
    try:
        return gpu_spec(here).name if here else reference
    except UnknownGPU:
        return reference


# -- questions that take several runs --------------------------------------------------------------
def predicted_largest(cfg: RunConfig, vary: str, gpu: str, step: int = 1, limit: int = 4096) -> int:
    """The largest value of `vary` (mbs or layers) that theory's memory model fits on `gpu`."""
    from megalab.memory import memory
    from megalab.sweep import with_value

    best = 0
    for v in range(step, limit + 1, step):
        if not memory(with_value(cfg, vary, v), gpu)["fits"]:
            break
        best = v
    return best


@dataclass(frozen=True)
class Fit:
    """Bisection for the largest `vary` that fits on `gpu`, over a window around theory's prediction
    (a handful of probes instead of a search from 1). A result at the window's edge says so."""

    cfg: RunConfig
    vary: str
    gpu: str
    step: int = 1
    width: float = 0.1   # the window: prediction ± max(2 steps, width × prediction)

    @property
    def predicted(self) -> int:
        return predicted_largest(self.cfg, self.vary, self.gpu, self.step)

    @property
    def window(self) -> tuple[int, int]:
        p, s = self.predicted, self.step
        half = max(2 * s, round(self.width * p / s) * s)
        return max(s, p - half), p + half

    def run(self, mode: str = "auto", **kw):
        from megalab.sweep import fit
        lo, hi = self.window
        return fit(self.cfg, self.vary, lo=lo, hi=hi, mode=mode, step=self.step, gpu=self.gpu, **kw)

    def plan_line(self, tag: str) -> str:
        lo, hi = self.window
        return _line(tag, "fit", self.cfg, "--vary", self.vary, "--lo", lo, "--hi", hi, "--step", self.step)


@dataclass(frozen=True)
class Parity:
    """The layout `cfg` against the single-GPU run of the same model and global batch (megalab.sweep)."""

    cfg: RunConfig

    def run(self, mode: str = "auto", **kw):
        from megalab.sweep import parity
        return parity(self.cfg, mode=mode, **kw)

    def plan_line(self, tag: str) -> str:
        return _line(tag, "parity", self.cfg)


@dataclass(frozen=True)
class Profiled:
    """One run under torch.profiler: its record keeps the kernel timeline of one step."""

    cfg: RunConfig

    def run(self, mode: str = "auto", **kw):
        from megalab.results import run
        return run(self.cfg, mode=mode, profile=True, **kw)

    def plan_line(self, tag: str) -> str:
        return _line(tag, "run", self.cfg, "--profile")


def _line(tag: str, sub: str, cfg: RunConfig, *extra) -> str:
    words = ([] if sub == "run" else [sub]) + config_to_args(cfg) + [str(x) for x in extra]
    return f"{tag} {shlex.join(words)}"


# -- chapter 01: data parallelism and the distributed optimizer ------------------------------------
def data_parallel(gpus: int = 4, iters: int = ITERS, gpu: str = "H200") -> dict:
    """gpt2-xl (1.56 B parameters, seq 1024), Transformer Engine spec. mbs 4 unless said otherwise.
    `gpu`: the card the memory searches are sized for (the reference H200, or a reader's own GPU)."""
    base = presets.get("gpt2-xl").replace(iters=iters)
    ds = degrees(gpus)
    top = ds[-1]
    weak = [base.replace(gpus=d, mbs=4, gbs=16 * d) for d in ds]            # 16 sequences per GPU per step
    return {
        "one_gpu": base.replace(mbs=1, gbs=1),
        "fit_mbs": Fit(base.replace(mbs=1, gbs=1), "mbs", gpu),
        "fit_mbs_80gb": Fit(base.replace(mbs=1, gbs=1), "mbs", "H100"),   # the card most readers have
        "accumulation": [base.replace(mbs=4, gbs=4 * k) for k in (1, 2, 4, 8)],
        "weak": weak,
        # scaling where the GPU, not the host's kernel launches, sets the pace (mbs 4 is launch-bound)
        "weak_mbs16": [base.replace(gpus=d, mbs=16, gbs=64 * d) for d in ds],
        "strong": [base.replace(gpus=d, mbs=4, gbs=4 * top) for d in ds],  # one micro-batch per GPU at top
        "overlap": [c.replace(overlap=True) for c in weak if c.dp > 1],
        "dist_opt": [c.replace(dist_opt=True) for c in weak if c.dp > 1],
        "reduce_mbs16": [base.replace(gpus=top, mbs=16, gbs=64 * top, **kw)
                         for kw in ({"overlap": True}, {"dist_opt": True}, {"dist_opt": True, "overlap": True})],
        "fit_mbs_dist_opt": [Fit(base.replace(gpus=d, mbs=1, gbs=d, dist_opt=True), "mbs", gpu) for d in ds[1:]],
        # DP replicates the model state, so without the distributed optimizer DP=N fits what 1 GPU fits
        "fit_layers": Fit(base.replace(mbs=1, gbs=1), "layers", gpu, step=8, width=0.05),
        "fit_layers_dist_opt": Fit(base.replace(gpus=top, mbs=1, gbs=top, dist_opt=True), "layers", gpu,
                                   step=8, width=0.05),
        # DP=top + distributed optimizer against DP=1 with accumulation, same global batch
        "parity": Parity(base.replace(gpus=top, mbs=4, gbs=4 * top, dist_opt=True, iters=PARITY_ITERS)),
    }


# -- chapter 02: tensor parallelism ----------------------------------------------------------------
WEAK_TP_MODELS = {1: "gpt-1.2b", 2: "gpt-2.5b", 4: "gpt-4.2b", 8: "gpt-8.3b"}  # Shoeybi et al. 2019, Table 1


def tensor_parallel(gpus: int = 4, iters: int = ITERS) -> dict:
    """Shoeybi et al. 2019's models with Transformer Engine; TP within one NVLink domain."""
    ts = [t for t in degrees(gpus) if t in WEAK_TP_MODELS]
    model = lambda t: presets.get(WEAK_TP_MODELS[t]).replace(iters=iters)  # noqa: E731
    small = presets.get("gpt-1.2b").replace(iters=iters)
    top = ts[-1]
    return {
        "weak": [model(t).replace(gpus=t, tp=t, mbs=8, gbs=8) for t in ts],          # the paper's batch 8
        "weak_large": [model(t).replace(gpus=t, tp=t, mbs=16, gbs=32) for t in ts],
        "strong": [small.replace(gpus=t, tp=t, mbs=8, gbs=8) for t in ts],
        "profile": Profiled(small.replace(gpus=top, tp=top, mbs=8, gbs=8)),
        "tp_vs_dp": [small.replace(gpus=top, tp=t, mbs=8, gbs=8 * top, dist_opt=t < top) for t in ts],
        "parity": [Parity(small.replace(gpus=t, tp=t, mbs=8, gbs=8, iters=PARITY_ITERS)) for t in ts if t > 1],
    }


CHAPTERS = {"ch01": data_parallel, "ch02": tensor_parallel}
# Runs queued for a chapter's next version (recorded by `megalab experiments chNN --pending`), then moved
# into the chapter's function once their records are committed. Nothing is queued now.
PENDING = {"ch01": lambda gpus=4: {}, "ch02": lambda gpus=4: {}}


# -- the recording plan ------------------------------------------------------------------------------
def _items(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _items(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _items(v)
    else:
        yield value


def _gpu_of(item) -> str | None:
    return getattr(item, "gpu", None)


def is_recorded(item, store=None) -> bool:
    """Does the store answer this item in cached mode with settled outcomes (ok, oom, invalid), every run
    of a fit or parity included? A timeout or crash on record is worth recording again."""
    from megalab.results import SETTLED, NotRecorded, run
    from megalab.sweep import ProbeFailed
    try:
        if isinstance(item, RunConfig):
            return run(item, mode="cached", store=store, quiet=True).status in SETTLED
        result = item.run(mode="cached", store=store, quiet=True)
    except (NotRecorded, ProbeFailed):
        return False
    if isinstance(item, Parity):
        return all(r.status in SETTLED for r in [*result.reference, result.layout])
    if isinstance(item, Profiled):
        return result.status in SETTLED
    return True


SOLO_SERIES = ("weak", "weak_large", "weak_mbs16", "strong")  # their 1-GPU points are scaling baselines: timed alone


def _jobs(chapter: str, gpus: int, gpu: str, missing_only: bool, store, pending: bool = False) -> list[tuple]:
    """(order, line) pairs for pack.py: timing baselines alone first, then the widest jobs, fits early
    (they are chains of probes), reference runs, a `wait`, the parity layouts, and last the fits that
    take the whole host."""
    from megalab.sweep import reference_of
    found = (PENDING if pending else CHAPTERS)[chapter](gpus)
    jobs, refs = [], set()
    solo_keys = {c.key for name in SOLO_SERIES for c in found.get(name, []) if c.gpus == 1}
    seen = set()  # run keys and plan lines already planned
    for item in _items(found):
        if (_gpu_of(item) or "H200") != gpu or (missing_only and is_recorded(item, store)):
            continue
        if isinstance(item, RunConfig):
            if item.key in seen:  # the same run in two series (a baseline of both): record it once
                continue
            seen.add(item.key)
            alone = item.key in solo_keys
            order = 0 if alone else (2 if item.gpus == gpus else 4) - item.gpus / 1e3
            jobs.append((order, _line(chapter + "!" * alone, "run", item)))
            continue
        line = item.plan_line(chapter)
        if line in seen:
            continue
        seen.add(line)
        if isinstance(item, Fit):
            jobs.append((8 if item.cfg.gpus == gpus else 3, line))
        elif isinstance(item, Parity):
            from megalab.store import find
            ref = reference_of(item.cfg)
            if ref.key not in refs:  # two repeats: the run-to-run spread sets the parity band
                refs.add(ref.key)
                have = len(find(ref, store=store, status="ok", profiled=False, gpu_model=gpu)) if missing_only else 0
                jobs += [(5, _line(f"{chapter}-ref", "run", ref))] * max(0, 2 - have)
            jobs.append((7, line))
        else:
            jobs.append((1, line))
    jobs.sort(key=lambda j: j[0])
    if any(o == 7 for o, _ in jobs):
        jobs.insert(next(i for i, (o, _) in enumerate(jobs) if o == 7), (6, "wait"))
    return jobs


def plan(chapter: str, gpus: int = 4, gpu: str = "H200", missing_only: bool = False, store=None,
         pending: bool = False) -> list[str]:
    """pack.py lines (`<tag> <megalab args>`) for a chapter's records on `gpu` (fits for another GPU
    model left out), in an order that keeps the host busy; see tools/gpu/pack.py. `pending`: the runs
    queued for the chapter's next version instead of the ones it reads now."""
    if chapter not in CHAPTERS:
        raise KeyError(f"unknown chapter {chapter!r}: pick one of {', '.join(CHAPTERS)}")
    return [line for _, line in _jobs(chapter, gpus, gpu, missing_only, store, pending)]
