"""What a chapter asks the GPUs for: one run (a RunConfig), a fit search, a parity pair, a profiled
run, a comparison group (runs timed back to back on one host, alternated: the only runs a step-time
comparison reads).

Chapter modules (megalab.book.chapters) build their runs from these; megalab.book.recording prints
the GPU host's plan from the same objects, so the book and its records cannot drift apart. Every
chapter takes `gpus`, the most GPUs to scale to, and sweeps `degrees(gpus)`: 4 and 8 GPUs slot in
without code changes.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from megalab.runs.config import RunConfig
from megalab.runs.flags import config_to_args

__all__ = [
    "llama_350m",
    "items",
    "groups",
    "lessons",
    "largest_mbs_within",
    "ITERS",
    "PARITY_ITERS",
    "GROUP_ITERS",
    "degrees",
    "sizing_gpu",
    "predicted_largest",
    "Fit",
    "Parity",
    "Profiled",
    "Group",
    "keys_of",
    "Lesson",
]

# steps per measured run: 3 warm-up steps dropped (metrics.WARMUP_STEPS), median of the rest
ITERS = 20
PARITY_ITERS = 50  # steps per loss-parity run
# steps per run of a comparison group: 37 timed, 74 per configuration over two rounds
GROUP_ITERS = 40


def llama_350m(**fields) -> RunConfig:
    """The Llama-style gpt-350m (RoPE, RMSNorm, SwiGLU, untied) at lr 1e-4 of the book's strict
    loss-parity records: it trains without spikes (see the performance page); `fields` set the
    layout."""
    from megalab.runs import presets

    return presets.get("gpt-350m").replace(
        tied_embeddings=False,
        position="rope",
        norm="RMSNorm",
        activation="swiglu",
        lr=1e-4,
        **fields,
    )


def degrees(gpus: int) -> list[int]:
    """1, 2, 4, ... up to gpus: the parallel sizes a chapter sweeps."""
    if gpus < 1:
        raise ValueError(f"gpus={gpus}: need at least 1")
    out = [1]
    while out[-1] * 2 <= gpus:
        out.append(out[-1] * 2)
    return out


def sizing_gpu(mode: str, reference: str = "H200") -> str:
    """The GPU model a chapter's memory searches are sized for: this machine's, when it will run
    live and its model is in megalab.machine.hardware; otherwise the reference records' GPU."""
    from megalab.machine.env import local_gpus
    from megalab.machine.hardware import UnknownGPU, gpu_spec

    here = local_gpus()[0] if mode != "cached" else None
    try:
        return gpu_spec(here).name if here else reference
    except UnknownGPU:
        return reference


# -- questions that take several runs --------------------------------------------------------------
def predicted_largest(
    cfg: RunConfig, vary: str, gpu: str, step: int = 1, limit: int | None = None
) -> int:
    """The largest value of `vary` (mbs, seq, layers or experts) that theory's memory model fits on
    `gpu` (searched up to `limit`, default 4096 steps)."""
    from megalab.theory import memory
    from megalab.jobs.sweep import with_value

    best = 0
    for v in range(step, (limit or 4096 * step) + 1, step):
        if not memory(with_value(cfg, vary, v), gpu)["fits"]:
            break
        best = v
    return best


def largest_mbs_within(cfg: RunConfig, budget_gib: float, gpu: str = "H200") -> int:
    """The largest micro-batch that divides cfg's sequences per DP rank (gbs / dp) and whose memory
    theory predicts (theory.memory) within `budget_gib`: what the memory a layout frees buys it. At
    least 1."""
    from megalab.theory import memory

    per_rank = cfg.gbs // cfg.dp
    fits = [
        m
        for m in range(1, per_rank + 1)
        if per_rank % m == 0 and memory(cfg.replace(mbs=m), gpu)["total"] <= budget_gib
    ]
    return max(fits, default=1)


@dataclass(frozen=True)
class Fit:
    """Bisection for the largest `vary` that fits on `gpu`, over a window around theory's prediction
    (a handful of probes instead of a search from 1). A result at the window's edge says so."""

    cfg: RunConfig
    vary: str
    gpu: str
    step: int = 1
    width: float = 0.1  # the window: prediction ± max(2 steps, width × prediction)

    @property
    def predicted(self) -> int:
        return predicted_largest(self.cfg, self.vary, self.gpu, self.step)

    @property
    def window(self) -> tuple[int, int]:
        p, s = self.predicted, self.step
        half = max(2 * s, round(self.width * p / s) * s)
        return max(s, p - half), p + half

    def run(self, mode: str = "auto", **kw):
        from megalab.jobs.sweep import fit

        lo, hi = self.window
        return fit(self.cfg, self.vary, lo=lo, hi=hi, mode=mode, step=self.step, gpu=self.gpu, **kw)

    def plan_line(self, tag: str) -> str:
        lo, hi = self.window
        return line_for(
            tag, "fit", self.cfg, "--vary", self.vary, "--lo", lo, "--hi", hi, "--step", self.step
        )


@dataclass(frozen=True)
class Parity:
    """The layout `cfg` against the single-GPU run of the same model and global batch
    (megalab.jobs.sweep)."""

    cfg: RunConfig

    def run(self, mode: str = "auto", **kw):
        from megalab.jobs.sweep import parity

        return parity(self.cfg, mode=mode, **kw)

    def plan_line(self, tag: str) -> str:
        return line_for(tag, "parity", self.cfg)


@dataclass(frozen=True)
class Profiled:
    """One run under torch.profiler: its record keeps the kernel timeline of one step. `gpu` names
    the GPU model whose record answers (None: any, the plan's default H200), as for a Fit."""

    cfg: RunConfig
    gpu: str | None = None

    def run(self, mode: str = "auto", **kw):
        from megalab.jobs.running import run

        return run(
            self.cfg, mode=mode, profile=True, **({"gpu": self.gpu} if self.gpu else {}) | kw
        )

    def plan_line(self, tag: str) -> str:
        return line_for(tag, "run", self.cfg, "--profile")


@dataclass(frozen=True)
class Group:
    """A comparison group: `configs` timed back to back on one host, each run alone, after a warm-up
    run, alternated A B C A B C for `rounds` rounds (at least 2; 3 where the difference claimed is
    under 10%), and one profiled run of `configs[profiled]` (its GPU-busy share). A figure that
    compares step times reads one group (megalab.timings.group). `name` is "<chapter>.<lesson>"
    ("ch02.tp"); its records carry the tag "group.<name>". `gpu` as for a Fit (None: the plan's
    default H200)."""

    name: str
    configs: tuple[RunConfig, ...]
    rounds: int = 2
    profiled: int = 0
    gpu: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "configs", tuple(self.configs))
        keys = [c.key for c in self.configs]
        if not keys or len(set(keys)) < len(keys):
            raise ValueError(
                f"group {self.name}: give it distinct configurations (got {len(keys)}, "
                f"{len(set(keys))} distinct)"
            )
        if self.rounds < 2:
            raise ValueError(
                f"group {self.name}: rounds={self.rounds}, alternate at least 2 rounds (A B A B)"
            )
        if not 0 <= self.profiled < len(keys):
            raise ValueError(
                f"group {self.name}: profiled={self.profiled} is not one of its "
                f"{len(keys)} configurations"
            )

    @property
    def tag(self) -> str:
        return f"group.{self.name}"

    @property
    def warmup(self) -> RunConfig:
        """The run that warms the host first (the first run on a fresh host is slow): the group's
        widest configuration, at the usual ITERS steps."""
        return max(self.configs, key=lambda c: c.gpus).replace(iters=ITERS)

    def run(self, mode: str = "auto", gpu: str = "H200", store=None, quiet: bool = True):
        """The group's timings (records.timings.group, a DataFrame): read from the records made on
        `gpu`, or measured on this machine when it has the GPUs of the group's widest configuration
        and either `mode` is "live", or "auto" finds no recording on this machine's GPU model, or a
        quick live reproduction marks the group's configurations (megalab.book.chapters.defining).
        Measured here as the plan records it (plan_lines): the warm-up (not where this reproduction
        ran something already: the host is warm), the configurations alternated `rounds` times
        (in a quick reproduction once, each run stopping on a tight median: quick_runs), the
        profiled run; then this recording is the one read. An
        interrupted measurement resumes under its reproduction. A reproduction's recording that
        lacks some of the book's configurations (wider than its machine) gives way to the book's,
        marked, with yours beside it (megalab.book.beside.with_reference)."""
        from megalab.book.beside import with_reference
        from megalab.jobs import reproduction
        from megalab.jobs.running import NotRecorded, _local_hardware
        from megalab.jobs.running import run as run_one
        from megalab.records.store import as_store
        from megalab.records.timings import group

        here, count, _ = _local_hardware() if mode != "cached" else (None, 0, False)
        within = reproduction.current(store) if here else None
        if within is not None and within.gpus:
            count = min(count, within.gpus)  # a reproduction on some of this machine's GPUs
        if not here or count < self.warmup.gpus:  # no GPUs, or too few: the records answer
            return group(store, self.name, gpu)
        quick = within is not None and all(map(within.defines, self.quick_runs()))
        if mode == "auto" and not quick:
            try:
                return group(store, self.name, here)  # this GPU model's recording
            except NotRecorded:
                pass
        # the first run on a fresh host is slow: warm up, unless this reproduction ran one already
        warm = within is not None and any(as_store(store).load("run", tag=within.tag))
        done: list[str] = []  # this measurement's records: each round is a run of its own
        for cfg, tags, profile in self._runs(1 if quick else self.rounds, not warm, quick):
            got = run_one(cfg, "live", tags, store, exclude=done, quiet=quiet, profile=profile)
            done.append(got.record["id"])
        if within is None:
            return group(store, self.name, here)
        mine = group(store, self.name, here, within.tag)
        try:  # fewer GPUs than the book's: its recording answers, yours beside it
            book = group(store, self.name, gpu)
        except NotRecorded:
            return mine
        return with_reference(mine, book, within.tag, here)

    def quick_runs(self) -> list[RunConfig]:
        """What a quick reproduction launches (Group.run): the warm-up and each configuration, each
        stopping once its median is tight (RunConfig.stop_when_tight; the group reads them beside
        the book's by timings.loose_key, which sets that knob aside)."""
        return [c.replace(stop_when_tight=True) for c in (self.warmup, *self.configs)]

    def _runs(self, rounds: int, warm_up: bool = True, quick: bool = False):
        """(config, tags, profiled) of a measurement, in plan_lines' order; `quick`: quick_runs."""
        from megalab.records import WARMUP_TAG

        warmup, *configs = self.quick_runs() if quick else (self.warmup, *self.configs)
        if warm_up:
            yield warmup, [WARMUP_TAG], False
        for _ in range(rounds):
            for c in configs:
                yield c, [self.tag], False
        yield configs[self.profiled], [self.tag], True

    def plan_lines(self) -> list[str]:
        """pack.py lines: the warm-up, the configurations alternated `rounds` times, the profiled
        run; each alone on the host (`!`)."""
        from megalab.records import WARMUP_TAG

        timed = [
            line_for(f"{self.tag}!", "run", c) for _ in range(self.rounds) for c in self.configs
        ]
        return [
            line_for(f"{WARMUP_TAG}!", "run", self.warmup),
            *timed,
            line_for(f"{self.tag}!", "run", self.configs[self.profiled], "--profile"),
        ]


@dataclass(frozen=True)
class Lesson:
    """Runs a lesson reads together for what they train, not for their step times (routing over
    hundreds of steps): each configuration once, alone on the host, tagged with the lesson's `name`
    ("ch06.routing"). `gpu` as for a Fit. `needs`: what the lesson reads beyond the loss
    ("routing": tokens per expert, which only some runs record); a configuration that cannot record
    it is refused here, before any GPU time is spent on it."""

    name: str
    configs: tuple[RunConfig, ...]
    gpu: str | None = None
    needs: tuple[str, ...] = ()

    def __post_init__(self):
        from megalab.train.probes import counts_routing

        object.__setattr__(self, "configs", tuple(self.configs))
        keys = [c.key for c in self.configs]
        if not keys or len(set(keys)) < len(keys):
            raise ValueError(f"lesson {self.name}: give it distinct configurations")
        if unknown := set(self.needs) - {"routing"}:
            raise ValueError(
                f"lesson {self.name}: needs {sorted(unknown)}: only 'routing' is known"
            )
        blind = [c.label for c in self.configs if "routing" in self.needs and not counts_routing(c)]
        if blind:
            raise ValueError(
                f"lesson {self.name}: {blind[0]} records no routing (an MoE run with CUDA graphs "
                "skips the router's hook on replay): give it cuda_graphs='none'"
            )

    @property
    def tag(self) -> str:
        return self.name

    def plan_lines(self) -> list[str]:
        """pack.py lines: each configuration once, alone on the host (`!`)."""
        return [line_for(f"{self.tag}!", "run", c) for c in self.configs]


def line_for(tag: str, sub: str, cfg: RunConfig, *extra) -> str:
    words = ([] if sub == "run" else [sub]) + config_to_args(cfg) + [str(x) for x in extra]
    return f"{tag} {shlex.join(words)}"


def items(value):
    """Every run or question in a chapter's dict (nested lists and dicts walked in order),
    comparison groups and lessons aside (`groups`: their runs are planned and read apart, on one
    host)."""
    if isinstance(value, (Group, Lesson)):
        return
    if isinstance(value, dict):
        for v in value.values():
            yield from items(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from items(v)
    else:
        yield value


def groups(value):
    """Every comparison group (Group) in a chapter's dict, in order."""
    yield from _of(Group, value)


def lessons(value):
    """Every lesson (Lesson) in a chapter's dict, in order."""
    yield from _of(Lesson, value)


def _of(kind, value):
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, kind):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _of(kind, v)


def keys_of(item) -> list[str]:
    """The run keys an item launches: a RunConfig its own; a Fit every probe of its window; a Parity
    its layout and the single-GPU reference; a Profiled run its configuration; a Group each of its
    configurations and its warm-up."""
    from megalab.jobs.sweep import reference_of, with_value

    if isinstance(item, RunConfig):
        return [item.key]
    if isinstance(item, Fit):
        lo, hi = item.window
        return [with_value(item.cfg, item.vary, v).key for v in range(lo, hi + 1, item.step)]
    if isinstance(item, Parity):
        return [item.cfg.key, reference_of(item.cfg).key]
    if isinstance(item, Profiled):
        return [item.cfg.key]
    if isinstance(item, Group):
        return [c.key for c in (*item.configs, item.warmup)]
    raise TypeError(f"{type(item).__name__}: not a run or a question of a chapter")
