"""Which records time a step cleanly, and how they group: by configuration (iterations and seed
aside) and by the trainer that made them (records.TRAINER_CHANGES).

    timings.timed(store, "H200")            # loose key -> (RunConfig, record): the newest clean
                                            timing of each
    timings.repeats(store, "H200")          # (loose key, trainer revision) -> [(RunConfig,
                                            record), ...]
    timings.by_trainer(store, cfg, "H200")  # trainer revision -> cfg's clean timings
    timings.side_by_side(store, "H100", 2)  # our trainer against the peer, timed alternately on
                                            one host
    timings.graph_call(store, cfg, "H200")   # cfg without CUDA graphs and with each capture,
                                             alternated in one call
    timings.group(store, "ch02.tp", "H200")  # a comparison group (specs.Group): per configuration,
                                             median and 95% CI
    timings.one_group(records)               # the group the records form, or NotOneGroup with the
                                             reason

A clean timing is an ok run on that GPU model, not retracted (errata), not profiled (slower steps),
not packed beside other jobs on its host, not a warm-up run (records.WARMUP_TAG: the first run on a
fresh host is slow, so it is made to be thrown away; older warm-ups ran chapter 02's configuration),
with a config that loads. What the layout search marks as measured, what the step-time calibration
fits on, and what the book counts as repeats of one configuration. `store`
is a Store, a folder, or None for the default results store.
"""

from __future__ import annotations

__all__ = [
    "loose_key",
    "timed",
    "repeats",
    "by_trainer",
    "side_of",
    "steps_ms",
    "side_by_side",
    "graph_call",
    "NotOneGroup",
    "one_group",
    "group_runs",
    "group",
    "median_interval",
    "tight",
    "TIGHT",
]


def loose_key(cfg) -> str:
    """A configuration's key with iterations and seed set aside: they do not change how long a step
    takes (nor does stopping on a tight median, RunConfig.stop_when_tight)."""
    return cfg.replace(iters=1, seed=0, stop_when_tight=False).key


def _clean(store, gpu_model: str):
    """(RunConfig, record) of each clean timing on `gpu_model`, oldest first."""
    from megalab.records.schema import WARMUP_TAG
    from megalab.records.store import as_store

    for cfg, r in sorted(
        as_store(store).runs_on(gpu_model, "ok"), key=lambda cr: cr[1].get("recorded_at") or ""
    ):
        if not {"profile", "packed", WARMUP_TAG} & set(r.get("tags") or []):
            yield cfg, r


def timed(store, gpu_model: str, keep=None) -> dict:
    """Loose config key -> (RunConfig, record): the newest clean timing of each configuration on
    `gpu_model`, in the order of recording; `keep(record)`, if given, chooses among the records
    before the newest is taken."""
    out = {}
    for cfg, r in _clean(store, gpu_model):
        if keep is not None and not keep(r):
            continue
        out.pop(loose_key(cfg), None)
        out[loose_key(cfg)] = (cfg, r)  # newest last: it wins, and keeps the order of recording
    return out


def repeats(store, gpu_model: str) -> dict:
    """(loose config key, trainer revision) -> [(RunConfig, record), ...] oldest first: every clean
    timing of one configuration made by one trainer. Runs of a configuration by an older trainer are
    not repeats: the trainer changed in between."""
    from megalab.records.schema import trainer_revision

    out: dict = {}
    for cfg, r in _clean(store, gpu_model):
        out.setdefault((loose_key(cfg), trainer_revision(r)), []).append((cfg, r))
    return out


def by_trainer(store, cfg, gpu_model: str) -> dict:
    """Trainer revision -> clean timings of cfg (iterations and seed aside) on gpu_model, oldest
    first: one configuration before and after a change of the trainer."""
    return {
        rev: [r for _, r in v]
        for (key, rev), v in repeats(store, gpu_model).items()
        if key == loose_key(cfg)
    }


def side_of(cfg) -> tuple[str, object]:
    """("ours", cfg) for our trainer's config, ("peer", our trainer's equivalent of it) for the
    peer's: the one configuration both sides of a side-by-side pair are keyed by."""
    from megalab.runs.config import trainer_config

    return ("peer", trainer_config(cfg)) if cfg.runner != "megalab" else ("ours", cfg)


def steps_ms(record) -> list[float]:
    """A record's step times (ms) after warm-up (metrics' policy); none for a record without its
    series."""
    from megalab.metrics import after_warmup

    times = (record.get("series") or {}).get("step_time_s") or []
    kept, _ = after_warmup(list(enumerate(times)), step_of=lambda s: s[0])
    return [1e3 * t for _, t in kept]


def side_by_side(store, gpu_model: str, gpus: int, by_sitting: bool = False):
    """Our trainer against the peer (Megatron-LM's pretrain_gpt.py, megalab.jobs.peer) on `gpus`
    GPUs of one host, timed alternately (records tagged `side`): a DataFrame, one row per
    configuration (iterations and seed aside) that both sides ran, named by the trainer's label. Our
    runs count from the newest trainer revision only (records.TRAINER_CHANGES: older ones are not
    repeats). Per side: `ours_ms` / `peer_ms`, the median of its runs' median step times;
    `ours_q1`..`peer_q3`, the quartiles of all its runs' steps after warm-up (the step-to-step
    spread, and the run-to-run spread where there are repeats); `ours_runs` / `peer_runs`. Then
    `ratio` = ours / peer and its spread, `ratio_lo` (our q1 over their q3) to `ratio_hi` (our q3
    over their q1), widened where needed to hold `ratio`; `ours_mfu` / `peer_mfu` at the medians,
    against `gpu_model`'s dense bf16 peak; `cfg`, the trainer's RunConfig; `sitting`, the commit
    (short) and date of the plan the runs came from (one host's sitting), joined where several
    sittings pooled, oldest first; and `sitting_at`, when the newest of them began (its first
    record): sittings of one day in the order they ran. A step time does not travel between hosts
    (two H100 hosts ran CP 2 at 8k 1.3x apart): with `by_sitting`, a sitting (the commit a plan ran
    at) is a group of its own, one row per configuration and sitting, labelled "<label> @ <commit>",
    so each ratio comes from runs that alternated on one host."""
    import numpy as np
    import pandas as pd
    from megalab import theory
    from megalab.records.schema import trainer_revision

    # sittings: commit -> ("commit, date", time of its first record): one name past midnight
    rows, sittings = [], {}
    for cfg, r in _clean(store, gpu_model):
        if "side" in (r.get("tags") or []) and cfg.gpus == gpus:
            who, ours = side_of(cfg)
            commit = (r.get("git_commit") or "?")[:7]
            at = r.get("recorded_at") or ""
            sitting = sittings.setdefault(commit, (f"{commit}, {at[:10]}", at))[0]
            rows.append(
                {
                    "key": (loose_key(ours), commit if by_sitting else ""),
                    "who": who,
                    "cfg": ours,
                    "steps": steps_ms(r),
                    "ms": 1e3 * r["summary"]["step_time_s"],
                    "sitting": sitting,
                    "rev": trainer_revision(r) if who == "ours" else 0,
                }
            )
    out = {}
    for (key, who), part in pd.DataFrame(rows).groupby(["key", "who"], sort=False) if rows else ():
        part = part[part["rev"] == part["rev"].max()]
        q1, q3 = np.percentile(
            [t for steps in part["steps"] for t in steps] or list(part["ms"]), [25, 75]
        )
        row = out.setdefault(key, {"cfg": part["cfg"].iloc[-1], "sitting": set()})
        row["sitting"] |= set(part["sitting"])
        row.update(
            {
                f"{who}_ms": part["ms"].median(),
                f"{who}_q1": q1,
                f"{who}_q3": q3,
                f"{who}_runs": len(part),
            }
        )
    both = {k: v for k, v in out.items() if "ours_ms" in v and "peer_ms" in v}
    if not both:
        raise LookupError(
            f"no configuration timed by both trainers on {gpus} {gpu_model} GPU(s): record both "
            f"sides "
            f"with tools/gpu/plans/peer-{gpus}gpu.txt"
        )
    df = pd.DataFrame.from_dict(both, orient="index")
    began = {name: at for name, at in sittings.values()}
    df["sitting_at"] = [max(began[name] for name in names) for names in df["sitting"]]
    df["sitting"] = ["; ".join(sorted(names, key=began.get)) for names in df["sitting"]]
    df.index = [
        c.label + (f" @ {sitting}" if by_sitting else "")
        for (_, sitting), c in zip(df.index, df["cfg"])
    ]
    df["ratio"] = df["ours_ms"] / df["peer_ms"]
    df["ratio_lo"] = np.minimum(df["ours_q1"] / df["peer_q3"], df["ratio"])
    df["ratio_hi"] = np.maximum(df["ours_q3"] / df["peer_q1"], df["ratio"])
    for who in ("ours", "peer"):
        df[f"{who}_mfu"] = [
            theory.mfu(c, ms / 1e3, gpu_model) for c, ms in zip(df["cfg"], df[f"{who}_ms"])
        ]
    return df


# RunConfig.cuda_graphs: without, Megatron Core's capture, Transformer Engine's
GRAPHS = ("none", "local", "te")
SITTING_S = 600  # runs of one call follow each other within a device call's limit


def graph_call(store, cfg, gpu_model: str):
    """cfg without CUDA graphs against itself with each capture (GRAPHS), as the newest call timed
    them (records tagged `graphs` on `gpu_model`, not profiled, trained: records.trained). The call
    is the newest run without graphs and the runs of its commit and host next to it in time, each
    within SITTING_S of the one before. Returns a DataFrame, one row per run in the order they ran
    ("1: none", "2: local", ...), with `graphs`, `id`, `status`, `exit_hung_s` (set when the
    launcher stopped a run hung at exit), `recorded`, `step_ms`, `mfu` and `loss_diff` (|Δloss| per
    step against the call's first run, an array); and the other records, oldest first. Runs of one
    call that logged different steps are an error."""
    import numpy as np
    import pandas as pd
    from megalab.records.schema import trained
    from megalab.records.store import as_store

    runs = sorted(
        (
            r
            for g in GRAPHS
            for r in as_store(store).find(
                cfg.replace(cuda_graphs=g), gpu_model=gpu_model, profiled=False
            )
            if "graphs" in (r.get("tags") or []) and trained(r)
        ),
        key=lambda r: r["recorded_at"],
    )
    plain = [i for i, r in enumerate(runs) if r["config"]["cuda_graphs"] == "none"]
    if not plain:
        raise LookupError(
            f"no call timed {cfg.label} on {gpu_model} without CUDA graphs beside its captures: "
            f"record "
            "it with 'graphs!' plan lines (megalab experiments prints them)"
        )
    lo, hi = _sitting(runs, plain[-1])
    call = runs[lo:hi]
    steps = call[0]["series"]["step"]
    if any(r["series"]["step"] != steps for r in call):
        raise ValueError(
            f"the runs of {cfg.label}'s graph call logged different steps: compare them step by "
            f"step"
        )
    first = np.array(call[0]["series"]["loss"])
    df = pd.DataFrame(
        [
            {
                "run": f"{i + 1}: {r['config']['cuda_graphs']}",
                "graphs": r["config"]["cuda_graphs"],
                "id": r["id"][:8],
                "status": r["status"],
                "exit_hung_s": r["summary"].get("exit_hung_s"),
                "recorded": r["recorded_at"][:16].replace("T", " "),
                "step_ms": 1e3 * r["summary"]["step_time_s"],
                "mfu": r["summary"]["mfu"],
                "loss_diff": np.abs(np.array(r["series"]["loss"]) - first),
            }
            for i, r in enumerate(call)
        ]
    )
    return df.set_index("run"), runs[:lo] + runs[hi:]


def _sitting(runs: list, at: int) -> tuple[int, int]:
    """The slice bounds of runs[at] and its neighbours in time from the same commit and host, each
    within SITTING_S of the next."""
    from datetime import datetime

    def key(r):
        env = r.get("env") or {}
        return r.get("git_commit"), sitting_host(r), env.get("gpu_count")

    def near(a, b) -> bool:  # b follows a within SITTING_S, from the same commit and host
        t = lambda r: datetime.fromisoformat(r["recorded_at"].replace("Z", "+00:00"))  # noqa: E731
        return key(a) == key(b) and (t(b) - t(a)).total_seconds() <= SITTING_S

    lo = hi = at
    while lo > 0 and near(runs[lo - 1], runs[lo]):
        lo -= 1
    while hi + 1 < len(runs) and near(runs[hi], runs[hi + 1]):
        hi += 1
    return lo, hi + 1


# -- comparison groups (specs.Group)
# --------------------------------------------------------------------- a group's median is read as
# a number when its 95% interval is within ±2%; wider, draw the spread
TIGHT = 0.02


class NotOneGroup(ValueError):
    """Runs whose step times do not compare: from several groups, hosts, commits or trainer
    revisions, or packed beside other jobs, or warm-up runs. The message says which, in one line."""


def host_of(record) -> str:
    """A record's host, as far as its fingerprint tells: hostname, CPU cores and GPU model (what
    the record lacks left out: 'vm (NVIDIA H200)')."""
    env = record.get("env") or {}
    cpus = env.get("cpu_count")
    known = [f"{cpus} CPUs" if cpus else None, env.get("gpu_name")]
    return f"{env.get('hostname') or 'unknown host'} ({', '.join(k for k in known if k) or '?'})"


def sitting_host(record) -> str:
    """host_of, with the boot where the record has one: lent hosts all call themselves "vm", so
    two machines of one model and core count read alike without it."""
    boot = (record.get("env") or {}).get("boot_id")
    return host_of(record) + (f" boot {boot[:8]}" if boot else "")


def _group_tags(record) -> set:
    return {t[len("group.") :] for t in record.get("tags") or () if t.startswith("group.")}


def one_group(records) -> str:
    """The name of the comparison group `records` form; NotOneGroup (one line: what differs) when
    they are runs of several groups or none, of several hosts, commits or trainer revisions, or
    packed or warm-up runs, or reused and fresh processes mixed. A notebook's hidden check calls it
    on the records a figure reads."""
    from megalab.records import WARMUP_TAG, is_reused, trainer_revision

    records = list(records)
    label = lambda r: r.get("label") or r.get("key")  # noqa: E731
    names = set().union(*map(_group_tags, records)) if records else set()
    outside = [label(r) for r in records if not _group_tags(r)]
    if outside or len(names) != 1:
        raise NotOneGroup(
            f"{outside[0]} is in no comparison group: time it in one (specs.Group)"
            if outside
            else f"runs from groups {', '.join(sorted(names)) or 'none'}: compare within one group"
        )
    for tag, why in (
        ("packed", "shared its host (packed): a group's runs run alone"),
        (WARMUP_TAG, "is a warm-up run: its steps are no timing"),
    ):
        bad = [label(r) for r in records if tag in (r.get("tags") or ())]
        if bad:
            raise NotOneGroup(f"{bad[0]} {why}")
    if len({is_reused(r) for r in records}) > 1:
        reused = next(label(r) for r in records if is_reused(r))
        raise NotOneGroup(
            f"{reused} ran in a reused process, others in fresh ones: time a group's runs in fresh "
            "processes (megalab.run, not run_many(reuse=True))"
        )
    for what, of in (
        ("hosts", sitting_host),
        ("commits", lambda r: (r.get("git_commit") or "?")[:7]),
        ("trainer revisions", trainer_revision),
    ):
        seen = sorted({str(of(r)) for r in records})
        if len(seen) > 1:
            raise NotOneGroup(
                f"group {names.pop()} mixes {what} ({'; '.join(seen)}): a step time is compared "
                "only within one recording"
            )
    return names.pop()


def group_runs(
    store, name: str, gpu_model: str, reproduction: str | None = None, where=None
) -> tuple[list, dict | None]:
    """([(RunConfig, record), ...] oldest first, the profiled record or None) of the comparison
    group `name` ("ch02.tp" or its tag "group.ch02.tp") on `gpu_model`: ok runs not retracted, from
    its newest recording (the host and commit of its newest record; earlier recordings are set
    aside). `where(cfg)`, if given, keeps only the runs whose RunConfig it accepts, before the
    newest recording is chosen: a recording of the tag with other settings is then never read. A
    reader's live reproduction measures the group beside the book's recording: the book's
    is read unless `reproduction` (its tag, reproductions.tag) names the one to read, or no other
    exists. NotOneGroup if those runs are not one group (one_group); results.NotRecorded if the
    group has no run."""
    from megalab.records.schema import is_reproduced
    from megalab.records.store import NotRecorded
    from megalab.records.store import as_store

    name = name.removeprefix("group.")
    found = sorted(
        ((c, r) for c, r in as_store(store).runs_on(gpu_model, "ok") if name in _group_tags(r)),
        key=lambda cr: cr[1].get("recorded_at") or "",
    )
    if where is not None:
        found = [(c, r) for c, r in found if where(c)]
    if reproduction is not None:
        found = [(c, r) for c, r in found if reproduction in (r.get("tags") or ())]
    else:
        found = [(c, r) for c, r in found if not is_reproduced(r)] or found
    if not found:
        chapter = name.split(".", 1)[0]
        chapter = "performance" if chapter == "perf" else chapter  # the page's name
        raise NotRecorded(
            f"no run of comparison group {name} on {gpu_model}: record it with the group's lines "
            f"of `megalab experiments {chapter}`"
        )
    newest = found[-1][1]
    found = [
        (c, r)
        for c, r in found
        if sitting_host(r) == sitting_host(newest)
        and r.get("git_commit") == newest.get("git_commit")
    ]
    one_group(r for _, r in found)
    profiled = [r for _, r in found if "profile" in (r.get("tags") or ())]
    return [(c, r) for c, r in found if "profile" not in (r.get("tags") or ())], (
        profiled[-1] if profiled else None
    )


def median_interval(values, level: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of `values`: the order statistics x(j) and
    x(n+1-j) with P(Binomial(n, 1/2) < j) <= (1 - level) / 2, j as large as that allows (the
    smallest and largest value when n is under 6)."""
    from math import comb

    xs, tail = sorted(values), (1 - level) / 2
    n = len(xs)
    if not n:
        raise ValueError("no values: an interval needs at least one")
    j, below = 0, 0.0
    # P(B <= j) within the tail: drop one more each side
    while j < n and below + comb(n, j) / 2**n <= tail:
        below += comb(n, j) / 2**n
        j += 1
    k = min(max(j, 1), (n + 1) // 2)
    return xs[k - 1], xs[n - k]


# timed steps (after the warm-up) before a run may stop on a tight median: with 10, the 95% interval
# runs from the 2nd to the 9th fastest step
MIN_TIMED = 10


def tight(step_times, min_timed: int = MIN_TIMED, within: float = TIGHT) -> bool:
    """Whether a run has timed enough steps (RunConfig.stop_when_tight): after the warm-up steps
    (metrics.WARMUP_STEPS), at least `min_timed` of them, and the median's 95% interval
    (median_interval) within ±`within` of the median."""
    from statistics import median

    from megalab.metrics import WARMUP_STEPS

    timed = list(step_times)[WARMUP_STEPS:]
    if len(timed) < max(min_timed, 1):
        return False
    med = median(timed)
    lo, hi = median_interval(timed)
    return med > 0 and max(hi - med, med - lo) <= within * med


def group(store, name: str, gpu_model: str, reproduction: str | None = None, where=None):
    """The comparison group `name` ("ch02.tp") on `gpu_model` (group_runs: one host, commit and
    trainer): a DataFrame, one row per configuration in the order first run, named by its label.
    `cfg`; `runs`; `median_ms`, the median of every step after warm-up of all its runs, `lo_ms` to
    `hi_ms` its 95% interval (median_interval) and `half` the interval's half-width over the median;
    `wide` where `half` > TIGHT (draw the spread, or record more rounds); `run_ms`, each run's
    median (the run-to-run spread); `mfu` at the median; `peak_gib` the runs' median peak reserved
    memory per GPU; `gpu_busy` on the profiled configuration's
    row, its profiled step's GPU-busy time (profiles.gpu_busy) over the median step, at most 1:
    kernels run a little longer under the profiler, so a step the GPU fills can read just over 1
    (`gpu_busy_raw` in attrs keeps that ratio). attrs: name, host, commit, gpu_busy, gpu_busy_raw,
    profiled (the label), wide (the labels flagged). `reproduction` and `where` as for
    group_runs."""
    import numpy as np
    import pandas as pd
    from megalab import theory
    from megalab.records.profiles import gpu_busy

    timed, profiled = group_runs(store, name, gpu_model, reproduction, where)
    rows = {}
    for cfg, r in timed:
        row = rows.setdefault(loose_key(cfg), {"cfg": cfg, "steps": [], "run_ms": [], "peaks": []})
        row["steps"] += steps_ms(r)
        row["peaks"].append(r["summary"].get("mem_reserved_peak_gib"))
        row["run_ms"].append(float(np.median(steps_ms(r) or [1e3 * r["summary"]["step_time_s"]])))
    out = []
    for row in rows.values():
        steps = row.pop("steps") or row["run_ms"]
        peaks = [p for p in row.pop("peaks") if p is not None]
        med = float(np.median(steps))
        lo, hi = median_interval(steps)
        out.append(
            {
                **row,
                "runs": len(row["run_ms"]),
                "median_ms": med,
                "lo_ms": lo,
                "hi_ms": hi,
                "half": max(hi - med, med - lo) / med,
                "mfu": theory.mfu(row["cfg"], med / 1e3, gpu_model),
                "peak_gib": float(np.median(peaks)) if peaks else np.nan,
            }
        )
    df = pd.DataFrame(out, index=[row["cfg"].label for row in out])
    df["wide"] = df["half"] > TIGHT
    df["gpu_busy"] = np.nan
    busy, raw, label = None, None, None
    if profiled is not None and profiled.get("profile"):
        cfg = next((c for c in df["cfg"] if loose_key(c) == loose_key(_config(profiled))), None)
        if cfg is not None:
            label = cfg.label
            raw = gpu_busy(profiled["profile"])["busy_s"] * 1e3 / df.loc[label, "median_ms"]
            busy = min(raw, 1.0)
            df.loc[label, "gpu_busy"] = busy
    newest = timed[-1][1] if timed else profiled
    df.attrs.update(
        name=name.removeprefix("group."),
        host=host_of(newest),
        commit=(newest.get("git_commit") or "")[:7],
        gpu_busy=busy,
        gpu_busy_raw=raw,
        profiled=label,
        wide=list(df.index[df["wide"]]),
    )
    return df


def _config(record):
    from megalab.runs.config import RunConfig

    return RunConfig.from_dict(record["config"])
