"""What a run costs on a GPU model, from the records: its launch to first step, its steps, its exit
(megalab.book.eta adds these up for a live reproduction).

    costs = Costs(store, "H200")          # one pass over the store
    costs.fresh(cfg)                      # seconds of cfg in a launch of its own
    costs.failed(cfg)                     # a probe that runs out of memory at step 0
    Costs(store, "H200", launcher="forkserver")   # launches from the warm server

A launch's cost depends on what starts the ranks (megalab.jobs.launch.launcher): from the warm
fork-server a rank has nothing left to import, so a record launched otherwise is costed without
its imports (its start-up marks' `imports` less `python`); on 1×H200 that turned 21.0 s into 7.5 s.

A configuration nobody recorded is costed from a recorded run of the same shape (width, sequence,
micro-batch, model-parallel split, kernels), scaled by its layers and micro-batches.
"""

from __future__ import annotations

import statistics
from collections import Counter

# Measured on 2×H200 (quick reproductions of ch01 and ch02): a run's exit, its record and the next
# run's launch take 3-8 s after its last step (median 5 s)
GAP_S = 5.0
# a rank forked from the warm server imports what is left in 0.0-0.7 s; a fresh interpreter's
# imports took 10-15 s on every GPU host recorded
FORKED_IMPORTS_S = 1.0
NEWEST = 100  # launches whose median start-up a new launch is costed at (launches get cheaper)


def _work(steps: list) -> float | None:
    """Seconds of a run's own steps, step 0 (compilation, allocation) included."""
    timed = [t for t in steps if t is not None]
    return sum(timed) if timed else None


def _shape(cfg) -> tuple:
    """What sets the time of one layer of one micro-batch: its width, sequence, micro-batch,
    model-parallel split, kernels."""
    return (
        cfg.hidden,
        cfg.ffn,
        cfg.seq,
        cfg.mbs,
        cfg.tp,
        cfg.cp,
        cfg.ep,
        cfg.experts,
        cfg.cuda_graphs,
        cfg.recompute,
        cfg.impl,
        cfg.fp8,
    )


def _layer_passes(cfg) -> int:
    """Layers of a pipeline stage times the micro-batches of a step: what a step repeats."""
    return max(1, cfg.layers // max(cfg.pp, 1)) * cfg.num_microbatches


class Costs:
    """The records' costs on GPU model `gpu`, read in one pass (retracted records aside): per run
    key its steps' seconds (`work`; `fewest`: its first warm-up + MIN_TIMED steps, what a run
    stopping on a tight median trains) and status; the median launch to first step of the newest
    launches (`launch_s`) and of a run in a shared launch (`reused_s`), as `launcher` would start
    them (see the module's docstring); seconds per layer pass by shape (for a configuration nobody
    recorded); how often each key is recorded on any GPU."""

    def __init__(self, store=None, gpu: str = "H200", launcher: str = "spawn"):
        from megalab.metrics import WARMUP_STEPS
        from megalab.records.store import as_store, same_gpu_model
        from megalab.records.timings import MIN_TIMED
        from megalab.runs.config import RunConfig

        self.store, self.gpu = as_store(store), gpu
        retracted = set(self.store.errata())
        self.work, self.fewest, self.status, self.anywhere = {}, {}, {}, Counter()
        self.launched = {}  # key -> its newest record's launch to first step, when it had one
        fresh, reused, first, per_pass = [], [], [], {}
        for r in self.store.load("run"):
            if r.get("id") in retracted:
                continue
            self.anywhere[r.get("key")] += 1
            if not same_gpu_model((r.get("env") or {}).get("gpu_name"), gpu):
                continue
            steps = (r.get("series") or {}).get("step_time_s") or []
            summary = r.get("summary") or {}
            self.status[r.get("key")] = r.get("status")
            if (work := _work(steps)) is None:
                continue
            self.work[r.get("key")] = work
            self.fewest[r.get("key")] = _work(steps[: WARMUP_STEPS + MIN_TIMED])
            self.launched.pop(r.get("key"), None)
            marks = summary.get("startup_marks_s") or {}
            imported = max(0.0, (marks.get("imports") or 0) - (marks.get("python") or 0))
            # forked from the warm server: said by the record (env.launcher), or by its marks
            forked = (r.get("env") or {}).get("launcher") == "forkserver" or (
                "imports" in marks and imported < FORKED_IMPORTS_S
            )
            if launcher != "forkserver" and forked:
                pass  # its launch paid no imports: it says nothing of a fresh interpreter's
            elif summary.get("startup_s") is not None and steps[0] is not None:
                at = marks.get("batch_position") or 0
                launch = summary["startup_s"] - steps[0]
                if launcher == "forkserver":  # the server imported already
                    launch -= imported
                (reused if at else fresh).append(launch)
                first.append(steps[0])
                if not at:
                    self.launched[r.get("key")] = fresh[-1]
            if r.get("status") == "ok" and summary.get("step_time_s"):
                cfg = RunConfig.from_dict(r["config"])
                per_pass.setdefault(_shape(cfg), []).append(
                    summary["step_time_s"] / _layer_passes(cfg)
                )
        # with no launch recorded on this GPU model: the 2×H200 ones of the module's docstring
        self.launch_s = statistics.median(fresh[-NEWEST:]) if fresh else 15.0
        self.reused_s = statistics.median(reused[-NEWEST:]) if reused else 1.0
        self.first_s = statistics.median(first[-NEWEST:]) if first else 8.0
        self.per_pass = {k: statistics.median(v[-NEWEST:]) for k, v in per_pass.items()}

    def recorded(self, cfg) -> bool:
        """Whether cfg's own record (or, stopping on a tight median, its full-length one) costs
        it."""
        return cfg.key in self.work or (
            cfg.stop_when_tight and cfg.replace(stop_when_tight=False).key in self.fewest
        )

    def steps_s(self, cfg) -> float:
        """Seconds of cfg's steps: recorded, else predicted from a run of the same shape."""
        from megalab.metrics import WARMUP_STEPS
        from megalab.records.timings import MIN_TIMED

        if cfg.key in self.work:
            return self.work[cfg.key]
        if cfg.stop_when_tight and (same := cfg.replace(stop_when_tight=False).key) in self.fewest:
            return self.fewest[same]
        steps = min(cfg.iters, WARMUP_STEPS + MIN_TIMED) if cfg.stop_when_tight else cfg.iters
        each = self.per_pass.get(_shape(cfg))
        if each is None:  # no run of its shape: those of its width, per token of a micro-batch
            same = [s / (k[2] * k[3]) for k, s in self.per_pass.items() if k[0] == cfg.hidden]
            each = statistics.median(same or [1e-5]) * cfg.seq * cfg.mbs
        return self.first_s + (steps - 1) * each * _layer_passes(cfg)

    def fresh(self, cfg) -> float:
        """A run in its own launch: its launch to first step as recorded (else launch_s), its
        steps, GAP_S."""
        loose = cfg.replace(stop_when_tight=False).key
        launch = self.launched.get(cfg.key, self.launched.get(loose, self.launch_s))
        return launch + self.steps_s(cfg) + GAP_S

    def failed(self, cfg) -> float:
        """A probe that does not fit: its launch and the step that runs out of memory."""
        return self.launch_s + self.work.get(cfg.key, self.first_s) + GAP_S
