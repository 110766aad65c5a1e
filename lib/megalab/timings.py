"""Which records time a step cleanly, and how they group: by configuration (iterations and seed aside) and by
the trainer that made them (records.TRAINER_CHANGES).

    timings.timed(store, "H200")            # loose key -> (RunConfig, record): the newest clean timing of each
    timings.repeats(store, "H200")          # (loose key, trainer revision) -> [(RunConfig, record), ...]
    timings.by_trainer(store, cfg, "H200")  # trainer revision -> cfg's clean timings

A clean timing is an ok run on that GPU model, not retracted (errata), not profiled (slower steps), not
packed beside other jobs on its host, with a config that loads. What the layout search marks as measured,
what the step-time calibration fits on, and what the book counts as repeats of one configuration. `store`
is a Store, a folder, or None for the default results store.
"""

from __future__ import annotations

__all__ = ["loose_key", "timed", "repeats", "by_trainer"]


def loose_key(cfg) -> str:
    """A configuration's key with iterations and seed set aside: they do not change how long a step takes."""
    return cfg.replace(iters=1, seed=0).key


def _clean(store, gpu_model: str):
    """(RunConfig, record) of each clean timing on `gpu_model`, oldest first."""
    from megalab.config import RunConfig
    from megalab.store import _store, same_gpu_model
    store = _store(store)
    retracted = set(store.errata())
    for r in sorted(store.load("run", status="ok"), key=lambda r: r.get("recorded_at") or ""):
        tags = r.get("tags") or []
        if (r.get("id") in retracted or "profile" in tags or "packed" in tags
                or not same_gpu_model((r.get("env") or {}).get("gpu_name"), gpu_model)):
            continue
        try:
            yield RunConfig.from_dict(r["config"]), r
        except (KeyError, TypeError, ValueError):
            continue


def timed(store, gpu_model: str) -> dict:
    """Loose config key -> (RunConfig, record): the newest clean timing of each configuration on `gpu_model`,
    in the order of recording."""
    out = {}
    for cfg, r in _clean(store, gpu_model):
        out.pop(loose_key(cfg), None)
        out[loose_key(cfg)] = (cfg, r)  # newest last: it wins, and keeps the order of recording
    return out


def repeats(store, gpu_model: str) -> dict:
    """(loose config key, trainer revision) -> [(RunConfig, record), ...] oldest first: every clean timing of
    one configuration made by one trainer. Runs of a configuration by an older trainer are not repeats: the
    trainer changed in between."""
    from megalab.records import trainer_revision
    out: dict = {}
    for cfg, r in _clean(store, gpu_model):
        out.setdefault((loose_key(cfg), trainer_revision(r)), []).append((cfg, r))
    return out


def by_trainer(store, cfg, gpu_model: str) -> dict:
    """Trainer revision -> clean timings of cfg (iterations and seed aside) on gpu_model, oldest first: one
    configuration before and after a change of the trainer."""
    return {rev: [r for _, r in v] for (key, rev), v in repeats(store, gpu_model).items() if key == loose_key(cfg)}
