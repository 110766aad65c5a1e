"""Which records time a step cleanly, and how they group: by configuration (iterations and seed aside) and by
the trainer that made them (records.TRAINER_CHANGES).

    timings.timed(store, "H200")            # loose key -> (RunConfig, record): the newest clean timing of each
    timings.repeats(store, "H200")          # (loose key, trainer revision) -> [(RunConfig, record), ...]
    timings.by_trainer(store, cfg, "H200")  # trainer revision -> cfg's clean timings
    timings.side_by_side(store, "H100", 2)  # our trainer against the peer, timed alternately on one host
    timings.graph_call(store, cfg, "H200")   # cfg without CUDA graphs and with each capture, alternated in one call

A clean timing is an ok run on that GPU model, not retracted (errata), not profiled (slower steps), not
packed beside other jobs on its host, not a lease's warm-up run (records.WARMUP_TAG: the first run on a fresh host
is slow; before session 23 the newest warm-up stood for chapter 02's configuration), with a config that loads.
What the layout search marks as measured, what the step-time calibration fits on, and what the book counts as
repeats of one configuration. `store`
is a Store, a folder, or None for the default results store.
"""

from __future__ import annotations

__all__ = ["loose_key", "timed", "repeats", "by_trainer", "side_of", "side_by_side", "graph_call"]


def loose_key(cfg) -> str:
    """A configuration's key with iterations and seed set aside: they do not change how long a step takes."""
    return cfg.replace(iters=1, seed=0).key


def _clean(store, gpu_model: str):
    """(RunConfig, record) of each clean timing on `gpu_model`, oldest first."""
    from megalab.records.schema import WARMUP_TAG
    from megalab.records.store import as_store
    for cfg, r in sorted(as_store(store).runs_on(gpu_model, "ok"), key=lambda cr: cr[1].get("recorded_at") or ""):
        if not {"profile", "packed", WARMUP_TAG} & set(r.get("tags") or []):
            yield cfg, r


def timed(store, gpu_model: str, keep=None) -> dict:
    """Loose config key -> (RunConfig, record): the newest clean timing of each configuration on `gpu_model`,
    in the order of recording; `keep(record)`, if given, chooses among the records before the newest is
    taken."""
    out = {}
    for cfg, r in _clean(store, gpu_model):
        if keep is not None and not keep(r):
            continue
        out.pop(loose_key(cfg), None)
        out[loose_key(cfg)] = (cfg, r)  # newest last: it wins, and keeps the order of recording
    return out


def repeats(store, gpu_model: str) -> dict:
    """(loose config key, trainer revision) -> [(RunConfig, record), ...] oldest first: every clean timing of
    one configuration made by one trainer. Runs of a configuration by an older trainer are not repeats: the
    trainer changed in between."""
    from megalab.records.schema import trainer_revision
    out: dict = {}
    for cfg, r in _clean(store, gpu_model):
        out.setdefault((loose_key(cfg), trainer_revision(r)), []).append((cfg, r))
    return out


def by_trainer(store, cfg, gpu_model: str) -> dict:
    """Trainer revision -> clean timings of cfg (iterations and seed aside) on gpu_model, oldest first: one
    configuration before and after a change of the trainer."""
    return {rev: [r for _, r in v] for (key, rev), v in repeats(store, gpu_model).items() if key == loose_key(cfg)}


def side_of(cfg) -> tuple[str, object]:
    """("ours", cfg) for our trainer's config, ("peer", our trainer's equivalent of it) for the peer's: the
    one configuration both sides of a side-by-side pair are keyed by."""
    from megalab.runs.peer import trainer_config
    return ("peer", trainer_config(cfg)) if cfg.runner != "megalab" else ("ours", cfg)


def _steps_ms(record) -> list[float]:
    """A record's step times (ms) after warm-up (metrics' policy); none for a record without its series."""
    from megalab.metrics import after_warmup
    times = (record.get("series") or {}).get("step_time_s") or []
    kept, _ = after_warmup(list(enumerate(times)), step_of=lambda s: s[0])
    return [1e3 * t for _, t in kept]


def side_by_side(store, gpu_model: str, gpus: int, by_lease: bool = False):
    """Our trainer against the peer (Megatron-LM's pretrain_gpt.py, megalab.runs.peer) on `gpus` GPUs of one host,
    timed alternately (records tagged `side`): a DataFrame, one row per configuration (iterations and seed
    aside) that both sides ran, named by the trainer's label. Our runs count from the newest trainer
    revision only (records.TRAINER_CHANGES: older ones are not repeats).
    Per side: `ours_ms` / `peer_ms`, the median of its runs' median step times; `ours_q1`..`peer_q3`, the
    quartiles of all its runs' steps after warm-up (the step-to-step spread, and the run-to-run spread where
    there are repeats); `ours_runs` / `peer_runs`. Then `ratio` = ours / peer and its spread, `ratio_lo` (our
    q1 over their q3) to `ratio_hi` (our q3 over their q1), widened where needed to hold `ratio`; `ours_mfu` /
    `peer_mfu` at the medians, against `gpu_model`'s dense bf16 peak; `cfg`, the trainer's RunConfig; `lease`,
    the commit (short) and date of the plan the runs came from, joined where several leases pooled, oldest first;
    and `lease_at`, when the newest of them began (its first record): leases of one day in the order they ran.
    A step time does not travel between hosts (session 21's two H100s ran CP 2 at 8k 1.3x as long as session
    14's): with `by_lease`, a lease (the commit a plan ran at) is a group of its own, one row per configuration
    and lease, labelled "<label> @ <commit>", so each ratio comes from runs that alternated on one host."""
    import numpy as np
    import pandas as pd
    from megalab import theory
    from megalab.records.schema import trainer_revision
    rows, leases = [], {}   # leases: commit -> ("commit, date", time of its first record): one name past midnight
    for cfg, r in _clean(store, gpu_model):
        if "side" in (r.get("tags") or []) and cfg.gpus == gpus:
            who, ours = side_of(cfg)
            commit = (r.get("git_commit") or "?")[:7]
            at = r.get("recorded_at") or ""
            lease = leases.setdefault(commit, (f"{commit}, {at[:10]}", at))[0]
            rows.append({"key": (loose_key(ours), commit if by_lease else ""), "who": who, "cfg": ours,
                         "steps": _steps_ms(r), "ms": 1e3 * r["summary"]["step_time_s"], "lease": lease,
                         "rev": trainer_revision(r) if who == "ours" else 0})
    out = {}
    for (key, who), part in (pd.DataFrame(rows).groupby(["key", "who"], sort=False) if rows else ()):
        part = part[part["rev"] == part["rev"].max()]
        q1, q3 = np.percentile([t for steps in part["steps"] for t in steps] or list(part["ms"]), [25, 75])
        row = out.setdefault(key, {"cfg": part["cfg"].iloc[-1], "lease": set()})
        row["lease"] |= set(part["lease"])
        row.update({f"{who}_ms": part["ms"].median(), f"{who}_q1": q1, f"{who}_q3": q3, f"{who}_runs": len(part)})
    both = {k: v for k, v in out.items() if "ours_ms" in v and "peer_ms" in v}
    if not both:
        raise LookupError(f"no configuration timed by both trainers on {gpus} {gpu_model} GPU(s): record both sides "
                          f"with tools/gpu/plans/peer-{gpus}gpu.txt")
    df = pd.DataFrame.from_dict(both, orient="index")
    began = {name: at for name, at in leases.values()}
    df["lease_at"] = [max(began[name] for name in names) for names in df["lease"]]
    df["lease"] = ["; ".join(sorted(names, key=began.get)) for names in df["lease"]]
    df.index = [c.label + (f" @ {lease}" if by_lease else "") for (_, lease), c in zip(df.index, df["cfg"])]
    df["ratio"] = df["ours_ms"] / df["peer_ms"]
    df["ratio_lo"] = np.minimum(df["ours_q1"] / df["peer_q3"], df["ratio"])
    df["ratio_hi"] = np.maximum(df["ours_q3"] / df["peer_q1"], df["ratio"])
    for who in ("ours", "peer"):
        df[f"{who}_mfu"] = [theory.mfu(c, ms / 1e3, gpu_model) for c, ms in zip(df["cfg"], df[f"{who}_ms"])]
    return df


GRAPHS = ("none", "local", "te")   # RunConfig.cuda_graphs: without, Megatron Core's capture, Transformer Engine's
SITTING_S = 600                    # runs of one call follow each other within a device call's limit


def graph_call(store, cfg, gpu_model: str):
    """cfg without CUDA graphs against itself with each capture (GRAPHS), as the newest call timed them (records
    tagged `graphs` on `gpu_model`, not profiled, trained: records.trained). The call is the newest run without
    graphs and the runs of its commit and host next to it in time, each within SITTING_S of the one before.
    Returns a DataFrame, one row per run in the order they ran ("1: none", "2: local", ...), with `graphs`,
    `id`, `status`, `exit_hung_s` (set when the launcher stopped a run hung at exit), `recorded`, `step_ms`, `mfu`
    and `loss_diff` (|Δloss| per step against the call's first run, an array); and the other records, oldest
    first. Runs of one call that logged different steps are an error."""
    import numpy as np
    import pandas as pd
    from megalab.records.schema import trained
    from megalab.records.store import as_store
    runs = sorted((r for g in GRAPHS for r in as_store(store).find(cfg.replace(cuda_graphs=g), gpu_model=gpu_model,
                   profiled=False) if "graphs" in (r.get("tags") or []) and trained(r)), key=lambda r: r["recorded_at"])
    plain = [i for i, r in enumerate(runs) if r["config"]["cuda_graphs"] == "none"]
    if not plain:
        raise LookupError(f"no call timed {cfg.label} on {gpu_model} without CUDA graphs beside its captures: record "
                          "it with 'graphs!' plan lines (megalab experiments prints them)")
    lo, hi = _sitting(runs, plain[-1])
    call = runs[lo:hi]
    steps = call[0]["series"]["step"]
    if any(r["series"]["step"] != steps for r in call):
        raise ValueError(f"the runs of {cfg.label}'s graph call logged different steps: compare them step by step")
    first = np.array(call[0]["series"]["loss"])
    df = pd.DataFrame([{"run": f"{i + 1}: {r['config']['cuda_graphs']}", "graphs": r["config"]["cuda_graphs"],
                        "id": r["id"][:8], "status": r["status"], "exit_hung_s": r["summary"].get("exit_hung_s"),
                        "recorded": r["recorded_at"][:16].replace("T", " "),
                        "step_ms": 1e3 * r["summary"]["step_time_s"], "mfu": r["summary"]["mfu"],
                        "loss_diff": np.abs(np.array(r["series"]["loss"]) - first)}
                       for i, r in enumerate(call)])
    return df.set_index("run"), runs[:lo] + runs[hi:]


def _sitting(runs: list, at: int) -> tuple[int, int]:
    """The slice bounds of runs[at] and its neighbours in time from the same commit and host, each within
    SITTING_S of the next."""
    from datetime import datetime

    def key(r):
        env = r.get("env") or {}
        return r.get("git_commit"), env.get("hostname"), env.get("gpu_count"), env.get("cpu_count")

    def near(a, b) -> bool:   # b follows a within SITTING_S, from the same commit and host
        t = lambda r: datetime.fromisoformat(r["recorded_at"].replace("Z", "+00:00"))   # noqa: E731
        return key(a) == key(b) and (t(b) - t(a)).total_seconds() <= SITTING_S

    lo = hi = at
    while lo > 0 and near(runs[lo - 1], runs[lo]):
        lo -= 1
    while hi + 1 < len(runs) and near(runs[hi], runs[hi + 1]):
        hi += 1
    return lo, hi + 1
