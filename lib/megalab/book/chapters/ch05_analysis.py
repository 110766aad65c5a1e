"""Chapter 05's tables and figures: interleaving against 1F1B in the comparison group `ch05.vpp`,
pipeline schedules measured and ideal under one colour key, memory per stage, and the per-rank work
of a profiled step.

    g = timings.group(None, "ch05.vpp", "H200")   # medians, 95% intervals: one host, runs alone
    ch05_analysis.vpp_vs_1f1b(g)                  # each schedule's step beside the bubble formula
    ch05_analysis.measured_schedule(profile)      # a profiled step's passes, as theory.schedule's
    ch05_analysis.ideal_schedule(profile)         # theory.schedule with the measured mean passes
    ch05_analysis.schedule_figure({"measured": a, "ideal": b}, title)   # one colour key throughout
    ch05_analysis.stage_memory(results)           # measured peak per stage against theory
    ch05_analysis.rank_work(profile)              # per stage: passes, compute kernels, NCCL
    ch05_analysis.implied_idle(numbers, 340.0, 313.0)   # 1F1B's idle share the speed-up implies
    ch05_analysis.runs_table(results)             # the evidence page: runs outside any group

Every schedule is drawn by `schedule_figure`, so a pass has the same name and colour in every figure
of the chapter (theory's, and measured beside ideal): forward and backward of chunk 0 (1F1B's only
chunk) in the first two colours, chunk 1's in the next two.
"""

from __future__ import annotations

from megalab.book import references

__all__ = [
    "GROUP",
    "layout",
    "vpp_vs_1f1b",
    "measured_schedule",
    "ideal_schedule",
    "canonical",
    "schedule_figure",
    "stage_memory",
    "memory_bars",
    "rank_work",
    "runs_table",
    "bubble_table",
    "measured_and_ideal",
    "schedule_numbers",
    "implied_idle",
    "HOST_PROBE",
    "probe_busy",
    "parity_curves",
    "bubble_figure",
    "table",
    "m_sweep",
    "SWEEP",
    "sweep_fit",
    "sweep_bars",
    "SERIES_PP_URL",
    "SERIES_PP_STEP_MS",
    "series_pp",
    "series_floor_per_layer",
    "SERIES_VPP_STEP_MS",
]

GROUP = "ch05.vpp"  # gpt-1.2b PP 2, m = 8: 1F1B, VPP 2, VPP 4 with CUDA graphs, alternated
SWEEP = "ch05.m-sweep"  # gpt-1.2b PP 2, 1F1B, micro-batch 4, CUDA graphs: m = 2, 4, 8, 16

# The vuiseng9/megatron-tutorials series' micro-batch sweep (its rows R1-R6): gpt-8.3b (72 layers,
# 9 a stage) on PP 8, global batch 32, eager Megatron-LM core_r0.14.0 on one 8×H100 80 GB node.
# Copied from its table (assets/tbl-401-pp-vpp.png of this commit), not measured here: m -> ms.
SERIES_PP_URL = references.series("04-pp-vpp.md")
SERIES_PP_STEP_MS = {1: 2920, 2: 1730, 4: 1130, 8: 875, 16: 1160, 32: 2050}
# its interleaving rows, same table, global batch 32: (layout, layers per chunk) -> step (ms); a
# stage's whole layers is 1F1B. PP 8 at m = 8: R4, R7, R8; TP 2 + SP × PP 4 at m = 4: R10-R15
SERIES_VPP_STEP_MS = {
    ("PP 8", 9): 875,
    ("PP 8", 3): 715,
    ("PP 8", 1): 880,
    ("TP 2 + SP, PP 4", 18): 887,
    ("TP 2 + SP, PP 4", 9): 745,
    ("TP 2 + SP, PP 4", 6): 680,
    ("TP 2 + SP, PP 4", 3): 665,
    ("TP 2 + SP, PP 4", 2): 710,
    ("TP 2 + SP, PP 4", 1): 895,
}


def layout(cfg) -> str:
    """'PP 2', 'PP 2 × VPP 4', 'TP 2 + SP': the layout in words (frame.describe), CUDA graphs left
    unsaid."""
    from megalab.book.frame import describe

    return describe(cfg.replace(cuda_graphs="none"))


def vpp_vs_1f1b(g):
    """The comparison group `g` (timings.group of GROUP), one row per schedule, 1F1B first: layout,
    v, m, median_ms, lo_ms, hi_ms (95% interval), mfu; ratio, its median step over 1F1B's;
    predicted, the bubble formula's ratio (1 + (p−1)/(v·m)) / (1 + (p−1)/m); bubble, (p−1)/(v·m) of
    the ideal step. attrs: gpu_busy, the profiled step's GPU-busy share."""
    import pandas as pd

    from megalab import theory

    rows = []
    for cfg, r in zip(g["cfg"], g.to_dict("records")):
        p, m, v = cfg.pp, cfg.num_microbatches, cfg.vpp
        rows.append(
            {
                "layout": "1F1B, " + layout(cfg) if v == 1 else layout(cfg),
                "v": v,
                "m": m,
                **{k: r[k] for k in ("median_ms", "lo_ms", "hi_ms", "mfu")},
                "bubble": theory.bubble_over_ideal(p, m, v),
                "predicted": (1 + theory.bubble_over_ideal(p, m, v))
                / (1 + theory.bubble_over_ideal(p, m)),
            }
        )
    out = pd.DataFrame(rows).sort_values("v", kind="stable").reset_index(drop=True)
    out["ratio"] = out["median_ms"] / out["median_ms"].iloc[0]
    out.attrs.update(gpu_busy=g.attrs.get("gpu_busy"), host=g.attrs.get("host"))
    return out


def m_sweep(g):
    """The comparison group `g` (timings.group of ch05.m-sweep: 1F1B at one micro-batch size, m
    micro-batches a step), one row per m, ascending: m, median_ms, lo_ms, hi_ms, mfu; per_mb, the
    median step over m (time per micro-batch); ratio, per_mb over the largest m's; predicted, the
    bubble formula's (1 + (p−1)/m) over the largest m's; bubble, (p−1)/m of the ideal step. attrs:
    gpu_busy, host, p."""
    import pandas as pd

    from megalab import theory

    pp = {c.pp for c in g["cfg"]}
    if len(pp) != 1 or len({c.mbs for c in g["cfg"]}) != 1 or any(c.vpp != 1 for c in g["cfg"]):
        raise ValueError("m_sweep: give it 1F1B runs of one pipeline depth and micro-batch size")
    rows = []
    for cfg, r in zip(g["cfg"], g.to_dict("records")):
        p, m = cfg.pp, cfg.num_microbatches
        rows.append(
            {
                "m": m,
                **{k: r[k] for k in ("median_ms", "lo_ms", "hi_ms", "mfu")},
                "per_mb": r["median_ms"] / m,
                "bubble": theory.bubble_over_ideal(p, m),
            }
        )
    out = pd.DataFrame(rows).sort_values("m").reset_index(drop=True)
    last = out.iloc[-1]
    out["ratio"] = out["per_mb"] / last["per_mb"]
    out["predicted"] = (1 + out["bubble"]) / (1 + last["bubble"])
    out.attrs.update(gpu_busy=g.attrs.get("gpu_busy"), host=g.attrs.get("host"), p=pp.pop())
    return out


def sweep_fit(t) -> dict:
    """A straight line through m_sweep's medians (least squares), step = per_mb_ms · m + c_ms,
    beside the bubble formula's, whose c is (p − 1) · per_mb_ms (p − 1 passes' worth of idle):
    per_mb_ms, c_ms, fixed_ms = c_ms − (p − 1) · per_mb_ms (what a step pays once, whatever m),
    worst_ms (the line's largest miss of a median) and over, the largest measured ratio over the
    formula's, less 1."""
    import numpy as np

    slope, c = np.polyfit(t["m"], t["median_ms"], 1)
    miss = t["median_ms"] - (slope * t["m"] + c)
    return {
        "per_mb_ms": float(slope),
        "c_ms": float(c),
        "fixed_ms": float(c - (t.attrs["p"] - 1) * slope),
        "worst_ms": float(miss.abs().max()),
        "over": float((t["ratio"] / t["predicted"]).max() - 1),
    }


def series_pp(gpu: str = "H100"):
    """The series' sweep (SERIES_PP_STEP_MS) read as 1F1B slots, one row per m: mbs (32 / m),
    step_ms; slots, the m + p − 1 a stage runs (a micro-batch's forward and backward each, the
    bubble's included); slot_ms = step_ms / slots; gpu_ms, a slot's GPU work at the dense bf16 peak
    of `gpu` (theory.flops_per_step over m · p); beyond_layer_ms, what a slot took beyond that, per
    layer of the stage. From m = 16 to 32 the micro-batch halves and the slot does not: what sets it
    is work per micro-batch and layer, not FLOPs. attrs: p, layers (per stage)."""
    import pandas as pd

    from megalab import theory
    from megalab.machine.hardware import gpu_spec
    from megalab.runs import presets

    p, gbs = 8, 32
    peak = gpu_spec(gpu).peak_bf16_tflops * 1e12
    rows = []
    for m, step_ms in SERIES_PP_STEP_MS.items():
        cfg = presets.get("gpt-8.3b").replace(gpus=p, pp=p, mbs=gbs // m, gbs=gbs).validate()
        slots = m + p - 1
        gpu_ms = 1e3 * theory.flops_per_step(cfg) / (m * p) / peak
        rows.append(
            {
                "m": m,
                "mbs": cfg.mbs,
                "step_ms": step_ms,
                "slots": slots,
                "slot_ms": step_ms / slots,
                "gpu_ms": gpu_ms,
                "beyond_layer_ms": (step_ms / slots - gpu_ms) / (cfg.layers // p),
            }
        )
    out = pd.DataFrame(rows)
    out.attrs.update(p=p, layers=presets.get("gpt-8.3b").layers // p)
    return out


def series_floor_per_layer() -> float:
    """The series' eager floor per layer and micro-batch, in ms: the fastest of its TP 4 and TP 8
    steps of the 40-layer gpt-1.2b (one micro-batch a step, at global batch 8 and 20 alike:
    ch02_analysis.SERIES_TP_STRONG_MS) over its layers."""
    from megalab.book.chapters.ch02_analysis import SERIES_TP_STRONG_MS
    from megalab.runs import presets

    floor = min(ms for (_, tp), ms in SERIES_TP_STRONG_MS.items() if tp >= 4)
    return floor / presets.get("gpt-1.2b").layers


def sweep_bars(t):
    """m_sweep's rows as long rows for charts.grouped_bars: "micro-batches m", kind ("measured",
    "bubble formula"), and "time per micro-batch / m = 16's" (the largest m's; attrs y, that
    name)."""
    y = f"time per micro-batch / m = {int(t['m'].iloc[-1])}'s"
    bars = t.assign(**{"micro-batches m": t["m"].astype(str)}).melt(
        "micro-batches m", ["ratio", "predicted"], var_name="kind", value_name=y
    )
    bars["kind"] = bars["kind"].map({"ratio": "measured", "predicted": "bubble formula"})
    bars.attrs["y"] = y
    return bars


def measured_schedule(profile: dict) -> list[dict]:
    """A profiled step's passes (`profile.schedule`, megalab.train.stage_clock) in theory.schedule's
    form: stage, microbatch, chunk, kind "F"/"B", start and end in seconds from the step's start."""
    stages = ((profile or {}).get("schedule") or {}).get("stages", {})
    return [
        {
            "stage": int(s),
            **{k: t[k] for k in ("microbatch", "chunk", "kind")},
            "start": t["start_s"],
            "end": t["end_s"],
        }
        for s in sorted(stages, key=int)
        for t in sorted(stages[s], key=lambda t: t["start_s"])
    ]


def ideal_schedule(profile: dict) -> list[dict]:
    """theory.schedule of the measured step's p stages, m micro-batches and v chunks, every forward
    and every backward taking the measured mean: the same step with equal stages and free sends."""
    from megalab.theory import schedule

    passes = measured_schedule(profile)
    if not passes:
        return []
    p, m, v = (1 + max(t[k] for t in passes) for k in ("stage", "microbatch", "chunk"))
    mean = {
        k: sum(t["end"] - t["start"] for t in passes if t["kind"] == k)
        / sum(t["kind"] == k for t in passes)
        for k in "FB"
    }
    return schedule(p, m, v, mean["F"], mean["B"])


def canonical(tasks: list[dict]) -> list[dict]:
    """Tasks ordered so that their kinds first appear as forward chunk 0, backward chunk 0, forward
    chunk 1, ...: charts.gantt colours kinds in order of appearance, so every schedule figure gets
    the same colour for the same pass. The bars' places do not depend on the order."""
    return sorted(tasks, key=lambda t: (t["chunk"], t["kind"] != "F", t["stage"], t["start"]))


def schedule_figure(panels: dict, title: str, seconds: bool = True):
    """charts.pipeline_schedule of {panel title: theory.schedule-form tasks}, in canonical order;
    time in seconds (measured steps) or, seconds=False, in theory's units."""
    from megalab import charts

    x = (
        "seconds from the step's start"
        if seconds
        else "time (one micro-batch's forward through one stage = 1)"
    )
    ordered = {name: canonical(tasks) for name, tasks in panels.items()}
    return charts.pipeline_schedule(ordered, title=title, x_title=x)


def stage_memory(results) -> "pd.DataFrame":  # noqa: F821
    """Per run and stage: run ('PP 2, m = 4'), stage, layers_in_flight, predicted (theory.
    memory_per_stage's total, GiB) and measured (the peak allocated GiB of the stage's first rank;
    Megatron orders ranks tp, then pp), source ('reference' or 'yours'). A run measured here (a
    live reproduction's) brings the book's record of it too, its reference rows."""
    import pandas as pd

    from megalab import theory

    frames = []
    for r in [*results, *_references(results)]:
        c = r.config
        frames.append(
            pd.DataFrame(theory.memory_per_stage(c)).assign(
                run=f"{layout(c)}, m = {c.num_microbatches}",
                measured=r.summary["mem_allocated_peak_gib_per_rank"][:: c.gpus // c.pp],
                source="yours" if r.source == "live" else "reference",
            )
        )
    out = pd.concat(frames).rename(columns={"total": "predicted"})
    return out.drop_duplicates(["run", "stage", "source"]).reset_index(drop=True)


def _references(results) -> list:
    """The book's record of each result measured here (source 'live'), where it has one."""
    from megalab.jobs.running import NotRecorded, run

    out = []
    for r in results:
        if r.source == "live":
            try:
                out.append(run(r.config, "cached", quiet=True))
            except NotRecorded:
                pass
    return out


def memory_bars(mem):
    """stage_memory's rows for charts.grouped_bars: run, GiB, series ('stage 0, predicted'), each
    prediction once (a reader's runs add their measured bars)."""
    bars = mem.melt(
        ["run", "stage", "source"], ["predicted", "measured"], var_name="kind", value_name="GiB"
    )
    bars = bars[(bars["kind"] == "measured") | (bars["source"] == "reference")]
    bars = bars.assign(series="stage " + bars["stage"].astype(str) + ", " + bars["kind"])
    bars.loc[bars["source"] == "yours", "series"] += " (yours)"
    # "m = 2" stays on one line when the axis wraps its labels
    bars["run"] = bars["run"].str.replace("m = ", "m\u00a0=\u00a0")
    return bars.sort_values(["stage", "kind"], ascending=[True, False], kind="stable")


def rank_work(profile: dict):
    """Per stage of a profiled pipeline step (one GPU per stage), seconds: passes, its measured
    passes summed (profiles.schedule_stages' busy_s); compute, its GEMM, attention and other
    kernels per step; nccl, its NCCL kernels (which include waiting for the peer); beyond, passes −
    compute: the time its passes took beyond the kernels they ran."""
    from megalab import profiles

    stages = profiles.schedule_stages(profile)
    ranks = profiles.rank_times(profile)
    out = ranks[["nccl_s"]].rename(columns={"nccl_s": "nccl"}).rename_axis("stage")
    out.insert(0, "compute", ranks[["gemm_s", "attention_s", "other_s"]].sum(axis=1))
    out.insert(0, "passes", stages["busy_s"].astype(float))
    out["beyond"] = out["passes"] - out["compute"]
    return out.reset_index()


def _model(cfg) -> str:
    """The model's name, with its layers where a run keeps only some ('gpt-8.3b, first 36
    layers': one pipeline stage's worth, alone on one GPU)."""
    from megalab.runs import presets

    try:
        full = presets.get(cfg.name).layers
    except (KeyError, ValueError):
        return cfg.name
    return cfg.name if cfg.layers == full else f"{cfg.name}, first {cfg.layers} layers"


def runs_table(results):
    """Runs outside any comparison group, one row each, for the evidence page: configuration
    (model, its layers when a run keeps only some, layout, micro-batches), mbs, step_s (median step
    after warm-up), mfu, host (its CPU count where recorded), recorded (the day) and
    recording (1, 2, ...: runs of one host and one trainer build share a number, numbered in order
    of their first run)."""
    import pandas as pd

    rows, builds = [], {}
    for r in sorted(results, key=lambda r: r.record.get("recorded_at") or ""):
        c, rec = r.config, r.record
        env = rec.get("env") or {}
        host = f"{env['cpu_count']} CPUs" if env.get("cpu_count") else "not recorded"
        key = (env.get("hostname"), env.get("boot_id"), host, rec.get("git_commit"))
        build = builds.setdefault(key, len(builds) + 1)
        rows.append(
            {
                "configuration": f"{_model(c)}, {layout(c)}, m = {c.num_microbatches}",
                "mbs": c.mbs,
                "step_s": float(r.summary["step_time_s"]),
                "mfu": float(r.summary["mfu"]),
                "host": host,
                "recorded": (rec.get("recorded_at") or "")[:10],
                "recording": build,
            }
        )
    return pd.DataFrame(rows)


def bubble_table():
    """theory's bubble for p = 2, 4, 8 stages, v = 1, 2, 3 chunks and m = 1 ... 64 micro-batches
    (interleaved: m divisible by p, as Megatron needs): columns p, v, m, bubble ((p−1)/(v·m) of the
    ideal step) and idle ((p−1)/(v·m+p−1) of the step)."""
    import pandas as pd

    from megalab import theory

    return pd.DataFrame(
        [
            dict(
                p=p,
                v=v,
                m=m,
                bubble=theory.bubble_over_ideal(p, m, v),
                idle=theory.bubble_over_step(p, m, v),
            )
            for p in (2, 4, 8)
            for v in (1, 2, 3)
            for m in (2**i for i in range(7))
            if v == 1 or m % p == 0
        ]
    )


def measured_and_ideal(profile: dict) -> dict:
    """{panel title: tasks} of a profiled step for schedule_figure: the measured passes, and beneath
    them the ideal schedule with the measured mean passes."""
    return {
        "measured": measured_schedule(profile),
        "ideal: equal stages, free sends, the measured mean passes": ideal_schedule(profile),
    }


def schedule_numbers(record: dict) -> dict:
    """profiles.schedule_summary of a profiled record's step (busiest stage, its idle share, spans,
    in_order) with idle_predicted, theory's idle share (p−1)/(v·m+p−1) for its configuration."""
    from megalab import profiles, theory
    from megalab.runs.config import RunConfig

    c = RunConfig.from_dict(record["config"])
    out = dict(profiles.schedule_summary(record["profile"]))
    out["idle_predicted"] = theory.bubble_over_step(c.pp, c.num_microbatches, c.vpp)
    return out


def implied_idle(numbers: dict, step_ms: float, profiled_step_ms: float) -> float:
    """The idle share of the busiest stage that a step of step_ms must have had if its passes did
    the same work as the profiled step's (schedule_numbers: busy_s, span_s; that step's median
    profiled_step_ms): its passes span longer by the difference of the two steps, and the busy time
    stays. Used for 1F1B's step beside the profiled interleaved one: an inference, not a profile."""
    span = numbers["span_s"] + (step_ms - profiled_step_ms) / 1e3
    return 1 - numbers["busy_s"] / span


# one stage of gpt-8.3b's PP 2 (36 layers), eager at micro-batch 1: one profiled step, kept as a
# probe
HOST_PROBE = "results/probes/host-bound-2026-11-25/gpt-8.3b-36l-mbs1.top.json"


def probe_busy(path: str = HOST_PROBE) -> float:
    """The share of the probe's profiled step (tools/gpu/trace_top.py) in which the GPU ran a
    kernel: kernel_busy_ms / wall_ms."""
    import json

    from megalab.machine.env import repo_root

    probe = json.loads((repo_root() / path).read_text())
    return probe["kernel_busy_ms"] / probe["wall_ms"]


def parity_curves(parities) -> dict:
    """{name: curve} for charts.loss_parity: the one-GPU reference once, then each layout in words
    (ch02_analysis.parity_curves)."""
    from megalab.book.chapters.ch02_analysis import parity_curves as curves

    return {k.replace(", plain (non-TE) layers", ""): v for k, v in curves(parities).items()}


# the bubble figure's log axis: ticks in words, 0.5% not "0%"
BUBBLE_TICKS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)


def bubble_figure(bubble, title: str):
    """charts.pipeline_bubble of bubble_table's rows on a log axis whose ticks read 0.5%, 1%, ...;
    a line that lies on an earlier one (p = 4, v = 3 and p = 2, v = 1: both 1/m) gets markers and
    says so in its name ("same line as p = 2, v = 1")."""
    from megalab import charts

    fig = charts.pipeline_bubble(bubble, title=title)
    seen = {}
    for trace in fig.data:
        points = {(float(x), round(float(y), 12)) for x, y in zip(trace.x, trace.y)}
        same = next((name for name, pts in seen.items() if points <= pts), None)
        if same:
            trace.update(
                mode="lines+markers",
                marker=dict(size=9),
                name=f"{trace.name} (same line as {same})",
            )
        seen[trace.name] = points
    ticks = [
        t for t in BUBBLE_TICKS if bubble["bubble"].min() / 2 <= t <= bubble["bubble"].max() * 2
    ]
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=[f"{100 * t:g}%" for t in ticks])
    return fig


# cells apart: the book's tables have no padding of their own
PADDING = [{"selector": "th, td", "props": "padding: 0.2em 0.8em"}]


def table(df, columns: dict, digits: dict | None = None):
    """frame.table with padded cells, so that neighbouring columns do not run together, text
    columns aligned left; True and False read "yes" and "no"."""
    from megalab.book import frame

    words = {c: df[c].map({True: "yes", False: "no"}) for c in columns if df[c].dtype == bool}
    df = df.assign(**words).reset_index(drop=True)  # Styler.set_properties needs a unique index
    text = [h if isinstance(h, str) else h[0] for c, h in columns.items() if _is_text(df[c])]
    styler = frame.table(df, columns, digits).set_table_styles(PADDING)
    return styler.set_properties(subset=text, **{"text-align": "left"})


def _is_text(values) -> bool:
    import pandas as pd

    return not pd.api.types.is_numeric_dtype(values)
