"""Chapter 07's tables: the ranking's test on the frozen case runs, the step-time model against the
graphed comparison groups, a reader's ranking with its error bars, and the commands of the pick.

    ch07_analysis.case_picks(cal, 4)                 # the eight frozen picks per case
    ch07_analysis.ranking_tests(picks)               # per case and GPU count: did the ranking hold?
    ch07_analysis.graphed_check(cal, refit, "H200")  # the groups' medians beside both models
    ch07_analysis.ranked(ranking, cal, 0.8)          # a search's layouts with their error bars
    ch07_analysis.ranking_figure(table, "title")     # the same, drawn
    ch07_analysis.megalab_command(cfg)               # `megalab run --preset ... --mode live`
    ch07_analysis.constants_table({"eager": cal, "CUDA graphs": refit})

The case runs are chapter 07's frozen picks (ch07_choosing_a_layout.CHOSEN): eager steps, recorded
before the model was refitted, never fitted on. The comparison groups (GROUPS) are chapters 01, 02
and 05's runs with CUDA graphs, timed back to back on one 4× H200 host.
"""

from __future__ import annotations

__all__ = [
    "GROUPS",
    "CASE_WORDS",
    "CONSTANT_WORDS",
    "case_picks",
    "ranking_tests",
    "graphed_check",
    "graphed_points",
    "scatter",
    "ranked",
    "ranking_figure",
    "megalab_command",
    "constants_table",
]

# the comparison groups with CUDA graphs that the step-time model is checked against
GROUPS = ("ch01.dp-weak", "ch02.tp", "ch05.vpp")
# the step-time model's constants as the chapter's formula names them
CONSTANT_WORDS = {
    "gemm_eff": "GEMM efficiency, e_gemm",
    "gemm_width": "GEMM half-way width, w_gemm",
    "attn_eff": "attention efficiency, e_attn",
    "host_layer": "host time per layer and micro-batch, h_layer",
    "comm_call": "cost per blocking collective, c_call",
    "expert_gemm": "host time per expert GEMM, h_expert",
}
# what each constant is, in words (the table's column; step_model.CONSTANTS keeps the code's)
CONSTANT_MEANING = {
    "gemm_eff": "share of the benched matmul rate the GEMMs approach as layers widen: a limit, "
    "not reached (at hidden size 4,096: {at_4096:.2f}). It may exceed 1: the share is of the "
    "benched matmul rate, which a GEMM of another shape can beat",
    "gemm_width": "the hidden size at which the GEMMs reach half of that limit",
    "attn_eff": "share of the benched matmul rate flash attention reaches, forward and backward",
    "host_layer": "host time to issue one layer's forward and backward for one micro-batch",
    "comm_call": "cost of one blocking collective or send/recv beyond its bytes: launch, and "
    "waiting for the slowest GPU",
    "expert_gemm": "host time per expert GEMM (one per local expert, layer and pass)",
}
UNIT_WORDS = {"fraction of R": "share of matmul rate", "hidden units": "hidden size"}
CASE_WORDS = {
    "dense_4k": "Llama 3 8B, 4k tokens",
    "long_32k": "Llama 3 8B, 32k tokens",
    "moe": "OLMoE-1B-7B, 4k tokens",
}


def case_picks(cal, gpus: int, mode: str = "cached", gpu: str = "H200"):
    """One row per frozen pick of every case recorded on `gpus` GPUs: case (in words), gpus, pick,
    cfg (its RunConfig), picked_as, layout (frame.describe), predicted_s (cal), mem_gib
    (theory.memory), status, measured_s (None unless it
    trained), error (predicted / measured − 1), rank (predicted, among the case's eight) and
    measured_rank (among those that trained)."""
    import pandas as pd

    import megalab
    from megalab import theory
    from megalab.book.chapters import ch07_choosing_a_layout as ch07
    from megalab.book.frame import describe

    rows = []
    for name, picked in ch07.runs(gpus)["cases_by_gpus"][gpus].items():
        for key, cfg in picked.items():
            r = megalab.run(cfg, mode, quiet=True, gpu=gpu)
            step = r.summary.get("step_time_s") if r.ok else None
            rows.append(
                {
                    "case": CASE_WORDS[name],
                    "gpus": gpus,
                    "pick": key,
                    "cfg": cfg,
                    "picked_as": ch07.WHY[key],
                    "layout": f"{describe(cfg)}, micro-batch {cfg.mbs}",
                    "predicted_s": cal.predict(cfg)["total_s"],
                    "mem_gib": theory.memory(cfg, gpu)["total"],
                    "status": r.status,
                    "measured_s": step,
                }
            )
    df = pd.DataFrame(rows)
    df["measured_s"] = df["measured_s"].astype(float)
    df["error"] = df["predicted_s"] / df["measured_s"] - 1
    by = df.groupby(["case", "gpus"], sort=False)
    df["rank"] = by["predicted_s"].rank().astype(int)
    df["measured_rank"] = by["measured_s"].rank()
    return df


def ranking_tests(picks):
    """Per case and GPU count (case_picks' rows): trained (of the eight), rank_corr (Spearman, over
    those that trained), first (the model's first pick), first_status, first_x (its measured step
    over the fastest's; None when it did not train), err_lo and err_hi (the range of step
    errors), corr_shown (rank_corr with its n when under 5 runs trained) and err_range (the errors
    as one "from to to" phrase, in %)."""
    import pandas as pd

    rows = []
    for (case, gpus), g in picks.groupby(["case", "gpus"], sort=False):
        ok = g[g["status"] == "ok"]
        first = g.loc[g["predicted_s"].idxmin()]
        rows.append(
            {
                "case": case,
                "gpus": gpus,
                "trained": len(ok),
                "rank_corr": ok["predicted_s"].rank().corr(ok["measured_s"].rank()),
                "first": first["layout"],
                "first_status": "trained" if first["status"] == "ok" else "out of memory",
                "first_x": first["measured_s"] / ok["measured_s"].min(),
                "err_lo": ok["error"].min(),
                "err_hi": ok["error"].max(),
            }
        )
    df = pd.DataFrame(rows)
    df["corr_shown"] = [
        f"{r:.2f}" + (f" (n = {n})" if n < 5 else "")
        for r, n in zip(df["rank_corr"], df["trained"])
    ]
    df["err_range"] = [f"{lo:+.1%} to {hi:+.1%}" for lo, hi in zip(df["err_lo"], df["err_hi"])]
    return df


def _layout(cfg) -> str:
    from megalab.book.frame import describe

    return describe(cfg.replace(cuda_graphs="none"), model=True)


def graphed_check(cal, refit, gpu: str = "H200", store=None, groups=GROUPS):
    """One row per configuration of the comparison `groups`: group, layout (model and layout in
    words), launch ("CUDA graphs" or "eager"), measured_ms (the group's median) with lo_ms and
    hi_ms (its 95% interval), gpu_busy (the group's profiled share, on every row of it), eager_ms
    and eager_err (`cal`, fitted on eager runs), refit_ms and refit_err (`refit`, its host constants
    re-fitted on this host's graphed runs: calibration.calibrate_host; NaN for an eager run, which
    it does not describe), refit_set ("fit", "held out", or "–" for an eager run)."""
    import pandas as pd

    from megalab.records import timings

    refit_set = dict(zip(refit.records["label"], refit.records["set"]))  # labels omit iterations
    rows = []
    for name in groups:
        g = timings.group(store, name, gpu)
        for _, row in g.iterrows():
            cfg = row["cfg"]
            graphed = cfg.cuda_graphs != "none"
            eager = cal.predict(cfg)["total_s"] * 1e3
            again = refit.predict(cfg)["total_s"] * 1e3 if graphed else float("nan")
            rows.append(
                {
                    "group": name,
                    "layout": _layout(cfg),
                    "launch": "CUDA graphs" if graphed else "eager",
                    "measured_ms": row["median_ms"],
                    "lo_ms": row["lo_ms"],
                    "hi_ms": row["hi_ms"],
                    "gpu_busy": g.attrs["gpu_busy"],
                    "eager_ms": eager,
                    "eager_err": eager / row["median_ms"] - 1,
                    "refit_ms": again,
                    "refit_err": again / row["median_ms"] - 1,
                    "refit_set": refit_set.get(cfg.label, "–") if graphed else "–",
                }
            )
    return pd.DataFrame(rows)


def graphed_points(graphed):
    """graphed_check's graphed rows, one point per row and model, for charts.predicted_vs_measured:
    label (the layout), measured_s, predicted_s, model ("eager model" or "re-fitted on graphed
    runs"), set (the re-fit's "fit" or "held out"; "fit" for every eager-model point)."""
    import pandas as pd

    rows = graphed[graphed["launch"] == "CUDA graphs"]
    parts = []
    for model, col in (("eager model", "eager_ms"), ("re-fitted on graphed runs", "refit_ms")):
        parts.append(
            pd.DataFrame(
                {
                    "label": rows["layout"],
                    "measured_s": rows["measured_ms"] / 1e3,
                    "predicted_s": rows[col] / 1e3,
                    "model": model,
                    "set": rows["refit_set"] if col == "refit_ms" else "fit",
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def fitting_search(base, gpus: int, most: int = 64, **kw):
    """search.search(base, gpus, **kw), or, where no layout of the model fits on `gpus` GPUs (the
    default 8 B job on one H200, as a reproduction on one GPU asks), the search on the fewest
    GPUs (doubling, up to `most`) where one does, said in one printed line; the Ranking's `gpus`
    says which. A model that fits on none up to `most` raises ValueError."""
    from megalab.predict import search

    n = gpus
    while True:
        ranking = search.search(base, n, **kw)
        if len(ranking):
            break
        if n * 2 > most:
            raise ValueError(
                f"{base.name}: no layout fits on {gpus} to {most} GPUs at gbs {base.gbs}, "
                f"seq {base.seq}: lower gbs or seq, or pick a smaller preset"
            )
        n *= 2
    if n != gpus:
        said = f"{base.name} fits no layout on {gpus} GPU(s); ranked on {n}, the fewest that hold it"
        print(said)
    return ranking


def ranked(ranking, cal, level: float = 0.8):
    """A search.Ranking as rows: rank, layout (frame.describe), mbs, predicted_s with lo_s and hi_s
    (the central `level` of the held-out records' measured/predicted ratios, cal.interval), mem_gib,
    mfu, measured_s (where the store holds a run of that layout, else None), why (not first, in
    words: _why_words), band (lo_s to hi_s as one phrase)."""
    import pandas as pd

    from megalab.book.frame import describe

    lo, hi = cal.interval(level)
    return pd.DataFrame(
        [
            {
                "rank": c.rank,
                "layout": describe(c.cfg.replace(cuda_graphs="none")),
                "mbs": c.cfg.mbs,
                "predicted_s": c.step_s,
                "lo_s": c.step_s * lo,
                "hi_s": c.step_s * hi,
                "mem_gib": c.mem_gib,
                "mfu": c.mfu,
                "measured_s": c.measured_s,
                "why": _why_words(c.why) or "predicted fastest",
                "band": f"{c.step_s * lo:.2f}–{c.step_s * hi:.2f}",
            }
            for c in ranking
        ]
    ).astype({"measured_s": float})


def _why_words(why: str | None) -> str | None:
    """search's reason a layout is not first, as a sentence: "PP send/recv +78 ms, +44 ms in all"
    becomes "PP send/recv 78 ms more than #1; step 44 ms more"."""
    import re

    if not why:
        return why
    m = re.fullmatch(r"(.+?) \(?\+([\d.]+) ms\)?(?:, \+([\d.]+) ms in all)?", why)
    if not m:
        return why
    name, term, net = m.groups()
    said = f"{name} {term} ms more than #1"
    return said + (f"; step {net} ms more" if net else "")


def scatter(df, **kw):
    """charts.predicted_vs_measured with its legend below the x-axis title, not over it."""
    from megalab import charts

    return charts.predicted_vs_measured(df, **kw).update_layout(
        legend=dict(orientation="h", yanchor="top", y=-0.16, x=0),
        margin=dict(b=40),
        height=560,
    )


def ranking_figure(table, title: str):
    """ranked()'s rows as a dot per layout (predicted step) with its error bar as a whisker, and a
    marker where a run was measured; layouts on the y axis, best on top, the x axis near the
    data."""
    import plotly.graph_objects as go

    from megalab.charts._style import TEMPLATE

    names = [
        f"#{r}: {lay}, mbs {m}" for r, lay, m in zip(table["rank"], table["layout"], table["mbs"])
    ]
    fig = go.Figure(layout=dict(template=TEMPLATE, title=title))
    fig.add_scatter(
        y=names,
        x=table["predicted_s"],
        mode="markers",
        marker=dict(size=10, color="#1f5fa8"),
        name="predicted (whisker: the error band)",
        error_x=dict(
            type="data",
            symmetric=False,
            array=table["hi_s"] - table["predicted_s"],
            arrayminus=table["predicted_s"] - table["lo_s"],
        ),
    )
    measured = table["measured_s"].notna()
    if measured.any():
        fig.add_scatter(
            y=[n for n, m in zip(names, measured) if m],
            x=table.loc[measured, "measured_s"],
            mode="markers",
            marker=dict(symbol="diamond", size=11, color="#d1495b"),
            name="measured",
        )
    return fig.update_layout(
        xaxis_title="step time (s)",
        yaxis=dict(autorange="reversed", automargin=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0),
        height=120 + 36 * len(table),
        showlegend=True,
    )


def megalab_command(cfg, mode: str = "live") -> str:
    """The `megalab run` line of cfg: its preset (when cfg.name is one) and the flags where cfg
    differs from it, --gpus always; every flag without a preset when the short form would not parse
    back to cfg (runs.flags.config_from_args)."""
    import argparse
    import shlex

    from megalab.runs import presets
    from megalab.runs.flags import add_config_args, config_from_args, config_to_args

    def pairs(args: list[str]) -> list[list[str]]:
        out: list[list[str]] = []
        for a in args:
            if a.startswith("--"):
                out.append([a])
            else:
                out[-1].append(a)
        return out

    parser = add_config_args(argparse.ArgumentParser())
    mine = pairs(config_to_args(cfg))
    words = [w for p in mine for w in p]
    if cfg.name in presets.PRESETS:
        preset = {tuple(p) for p in pairs(config_to_args(presets.get(cfg.name)))}
        short = ["--preset", cfg.name] + [
            w for p in mine if tuple(p) not in preset or p[0] == "--gpus" for w in p
        ]
        if config_from_args(parser.parse_args(short)) == cfg:
            words = short
    return shlex.join(["megalab", "run", *words, "--mode", mode])


def constants_table(cals: dict):
    """One row per step-model constant: constant (CONSTANT_WORDS), unit and meaning (in words,
    the GEMM efficiency's with its value at hidden size 4,096), then each calibration's value
    (column: its name in `cals`), `shown_<name>` (that value to three significant figures, as
    text), and `records_<name>`: how many of its fit runs depend on it."""
    import pandas as pd

    first = next(iter(cals.values()))
    at_4096 = first.value("gemm_eff") * 4096 / (4096 + first.value("gemm_width"))
    df = pd.DataFrame(
        {
            "constant": [CONSTANT_WORDS.get(c.name, c.name) for c in first.constants],
            "unit": [UNIT_WORDS.get(c.unit, c.unit) for c in first.constants],
            "meaning": [
                CONSTANT_MEANING.get(c.name, c.meaning).format(at_4096=at_4096)
                for c in first.constants
            ],
        }
    )
    for name, cal in cals.items():
        df[name] = [c.value for c in cal.constants]
        df[f"shown_{name}"] = [_three_figures(c.value) for c in cal.constants]
        df[f"records_{name}"] = [c.records for c in cal.constants]
    return df


def _three_figures(x: float) -> str:
    """x to three significant figures, with thousands separators: 1,240.85 → "1,240", 28.72 →
    "28.7", 0.6234 → "0.623"."""
    import math

    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    places = 2 - math.floor(math.log10(abs(x)))
    return f"{round(x, places):,.{max(places, 0)}f}"
