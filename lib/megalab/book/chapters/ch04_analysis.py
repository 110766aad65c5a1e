"""Chapter 04's tables: memory and attention's share against sequence length, the longest sequence
per CP degree, the bytes each communication type sends, CP's speed-up from the comparison group
`ch04.cp`, the ring step it profiled, the attention work of each CP rank, and loss parity.

    ch04_analysis.lengths(one, "H200", seqs)        # theory per length: GiB, activations, share
    ch04_analysis.memory_rows(sweep, cp2, "H200")  # measured peaks beside theory, 1 GPU and CP 2
    ch04_analysis.first_oom(results)                # the shortest length that ran out of memory
    ch04_analysis.oom_rows(sweep, cp2)              # the runs out of memory, for the figure's marks
    ch04_analysis.refusal(error)                    # a refused layout's message, in Megatron's flags
    ch04_analysis.longest(one, fits, "H200")        # longest sequence per CP degree and card
    ch04_analysis.traffic(one, 2, seqs)             # GB each GPU sends per step, by type
    ch04_analysis.speedup(g)                        # the group: CP 2 over one GPU, per type
    ch04_analysis.ring_profile(cfg, profile, bw)    # the profiled ring step: NCCL hidden
    ch04_analysis.step_parts(ring, step_ms)         # where that step's time went
    ch04_analysis.rank_work(profiled)               # attention seconds per rank, and theory's
    ch04_analysis.parity_curves(parities)           # loss curves named in words
    ch04_analysis.parity_figure(parities, title)    # the curves, a band around each length's 1 GPU
    ch04_analysis.runs_table(g)                     # the evidence page: the group run by run
    ch04_analysis.host_words(g)                     # the group's host: "2×H200 virtual machine"
    ch04_analysis.legend_in_words(fig)              # "series = 1 GPU" becomes "1 GPU"

A layout is said in words (frame.describe), the ring named: "1 GPU", "CP 2 (ring)", "CP 2
(all-gather)".
"""

from __future__ import annotations

from megalab.book import references

from megalab import theory
from megalab.book.chapters.ch03_memory import legend_in_words  # noqa: F401  (charts.metric_vs)

__all__ = [
    "SERIES_CP_URL",
    "SERIES_CP_STEP_MS",
    "series_ring_vs_all_gather",
    "layout",
    "lengths",
    "memory_rows",
    "first_oom",
    "oom_rows",
    "refusal",
    "longest",
    "traffic",
    "speedup",
    "ring_profile",
    "step_parts",
    "rank_work",
    "parity_curves",
    "parity_figure",
    "host_words",
    "runs_table",
    "legend_in_words",
]


# the order of the comm types in tables and legends: the same colour for the same type everywhere
COMM_ORDER = ("", "p2p", "all_gather", "a2a", "a2a+p2p")

# The vuiseng9/megatron-tutorials series' CP 8 rows: gpt-1.2b, global batch 8, eager Megatron-LM
# core_r0.14.0 on one 8×H100 80 GB node. Copied from its table (assets/tbl-301-cp.png of this
# commit), not measured here: (--cp-comm-type, seq) -> step (ms), rows R4-R6 (4k), R7-R9 (16k)
SERIES_CP_URL = references.series("03-cp.md")
SERIES_CP = 8
SERIES_CP_STEP_MS = {
    ("p2p", 4096): 450,
    ("all_gather", 4096): 342,
    ("a2a", 4096): 332,
    ("p2p", 16384): 1300,
    ("all_gather", 16384): 1440,
    ("a2a", 16384): 1250,
}


def series_ring_vs_all_gather() -> dict:
    """The series' CP 8 ring step over its all_gather step, per sequence length, with the tokens
    each GPU holds (seq / cp) and its fastest type: {seq: {"ratio": ..., "tokens": ..., "fastest":
    ...}}. Above 1 the ring is slower."""
    return {
        seq: {
            "ratio": SERIES_CP_STEP_MS["p2p", seq] / SERIES_CP_STEP_MS["all_gather", seq],
            "tokens": seq // SERIES_CP,
            "fastest": min(
                (k for k, s in SERIES_CP_STEP_MS if s == seq),
                key=lambda k: SERIES_CP_STEP_MS[k, seq],
            ),
        }
        for seq in sorted({s for _, s in SERIES_CP_STEP_MS})
    }


def layout(cfg) -> str:
    """The layout in words as frame.describe says it, CUDA graphs left unsaid, and the ring named:
    '1 GPU', 'CP 2 (ring)', 'CP 2 (all-gather)', 'CP 4 (all-to-all + P2P)'."""
    from megalab.book.frame import describe

    words = describe(cfg.replace(cuda_graphs="none"))
    return f"{words} (ring)" if cfg.cp > 1 and cfg.cp_comm == "p2p" else words


def lengths(one, card: str, seqs, cp: int = 1):
    """Theory for `one` (a one-GPU RunConfig) at each sequence length of `seqs` on `cp` GPUs: seq,
    gib (memory per GPU), act_gib (its activations) and share (causal attention's share of the
    model FLOPs)."""
    import pandas as pd

    rows = []
    for s in seqs:
        c = one.replace(gpus=cp, cp=cp, seq=s)
        m = theory.memory(c, card)
        rows.append(
            {
                "seq": s,
                "gib": float(m["total"]),
                "act_gib": float(m["activations"]),
                "share": theory.attention_flops_share(c),
            }
        )
    return pd.DataFrame(rows)


def _degree(cfg) -> str:
    return "1 GPU" if cfg.cp == 1 else f"CP {cfg.cp}"


def _ok(results):
    return [r for r in results if r.status == "ok"]


def memory_rows(one_gpu, cp_runs, card: str):
    """Peak reserved memory per GPU of the runs that ran (`one_gpu` on one GPU, `cp_runs` with CP),
    beside theory at the same lengths: seq, GiB, series ('1 GPU, measured', 'CP 2, predicted'). A
    run is a Result (megalab.run, or a fit probe's)."""
    import pandas as pd

    rows = []
    for runs in (one_gpu, cp_runs):
        for r in _ok(runs):
            c = r.config
            rows.append(
                {
                    "seq": c.seq,
                    "GiB": float(r.summary["mem_reserved_peak_gib"]),
                    "series": f"{_degree(c)}, measured",
                }
            )
            rows.append(
                {
                    "seq": c.seq,
                    "GiB": float(theory.memory(c, card)["total"]),
                    "series": f"{_degree(c)}, predicted",
                }
            )
    out = pd.DataFrame(rows).drop_duplicates(["seq", "series"])
    return out.sort_values(["series", "seq"], kind="stable").reset_index(drop=True)


def first_oom(results) -> int | None:
    """The shortest sequence among `results` that ran out of memory (None if none did)."""
    seqs = [r.config.seq for r in results if r.status == "oom"]
    return min(seqs) if seqs else None


def oom_rows(one_gpu, cp_runs):
    """The runs that ran out of memory (`one_gpu` on one GPU, `cp_runs` with CP): seq and series
    ('1 GPU, out of memory'), one row per length and series, shortest first."""
    import pandas as pd

    rows = [
        {"seq": r.config.seq, "series": f"{_degree(r.config)}, out of memory"}
        for runs in (one_gpu, cp_runs)
        for r in runs
        if r.status == "oom"
    ]
    out = pd.DataFrame(rows, columns=["seq", "series"]).drop_duplicates()
    return out.sort_values(["series", "seq"], kind="stable").reset_index(drop=True)


from megalab.book.frame import refusal  # noqa: E402, F401  (a refused layout, worded)


def longest(one, fits: dict, card: str, cps=(1, 2, 4, 8), step: int = 2048):
    """The longest sequence per CP degree on `card`: cp, predicted (theory's, in multiples of
    `step`), measured (the search's largest that ran, from `fits` {cp: FitResult}; None where not
    searched) and ratio (measured over one GPU's measured)."""
    import pandas as pd

    from megalab.book.specs import predicted_largest

    rows = []
    for cp in cps:
        cfg = one.replace(gpus=cp, cp=cp, seq=step * cp)
        fit = fits.get(cp)
        rows.append(
            {
                "cp": cp,
                "predicted": predicted_largest(cfg, "seq", card, step=step),
                "measured": fit.largest if fit is not None else None,
            }
        )
    out = pd.DataFrame(rows)
    out["ratio"] = out["measured"] / out.loc[out["cp"] == 1, "measured"].iloc[0]
    return out


def traffic(one, cp: int, seqs, kinds=("p2p", "all_gather", "a2a")):
    """GB each GPU sends per step (theory.comm_bytes_per_step) at CP `cp`: for each length of
    `seqs`, the K/V (or Q, K, V, O) of each comm type of `kinds`, the gradient all-reduce over the
    CP ranks, and TP `cp` with sequence parallelism for comparison. Long rows: seq, traffic (the
    layout in words, 'CP 2 (ring)'), GB."""
    import pandas as pd

    rows = []
    for s in seqs:
        c = one.replace(gpus=cp, cp=cp, seq=s)
        sent = {k: theory.comm_bytes_per_step(c.replace(cp_comm=k)) for k in kinds}
        parts = {layout(c.replace(cp_comm=k)): v["cp"] for k, v in sent.items()}
        parts["CP gradient all-reduce"] = sent[kinds[0]]["dp"]
        tp = one.replace(gpus=cp, tp=cp, sp=True, seq=s)
        parts[f"TP {cp} + SP"] = theory.comm_bytes_per_step(tp)["tp"]
        rows += [{"seq": s, "traffic": k, "GB": v / 1e9} for k, v in parts.items()]
    return pd.DataFrame(rows)


def speedup(g):
    """The comparison group `g` (timings.group of `ch04.cp`) by length, one GPU first and then the
    comm types in COMM_ORDER: seq, layout, cp_comm,
    median_ms, lo_ms, hi_ms (the 95% interval), mfu and speedup (the one-GPU median at the same
    length over this one). LookupError when a length has no one-GPU run."""
    import pandas as pd

    rows = pd.DataFrame(
        {
            "seq": [c.seq for c in g["cfg"]],
            "cp": [c.cp for c in g["cfg"]],
            "layout": [layout(c) for c in g["cfg"]],
            "cp_comm": [c.cp_comm if c.cp > 1 else "" for c in g["cfg"]],
            "median_ms": g["median_ms"].to_numpy(),
            "lo_ms": g["lo_ms"].to_numpy(),
            "hi_ms": g["hi_ms"].to_numpy(),
            "mfu": g["mfu"].to_numpy(),
        }
    )
    one = rows[rows["cp"] == 1].set_index("seq")["median_ms"]
    missing = sorted(set(rows["seq"]) - set(one.index))
    if missing:
        raise LookupError(f"group {g.attrs.get('name')}: no one-GPU run at {missing} tokens")
    rows["speedup"] = rows["seq"].map(one) / rows["median_ms"]
    order = rows["cp_comm"].map({k: i for i, k in enumerate(COMM_ORDER)})  # the ring first
    rows = rows.assign(order=order).sort_values(["seq", "cp", "order"], kind="stable")
    return rows.drop(columns="order").reset_index(drop=True)


def _intervals(k, rows) -> list[tuple[float, float]]:
    return list(zip(k.loc[rows, "start_ms"], k.loc[rows, "duration_ms"]))


def ring_profile(cfg, profile: dict, bus_bw_gbs: float) -> dict:
    """CP's communication in one profiled step of `cfg` (rank 0). The step's longest NCCL kernel is
    the gradient all-reduce over the CP ranks (grad_ms); every other NCCL kernel moves K/V, on
    whichever CUDA streams it ran (CUDA graphs give each captured layer its own): cp_ms (the time at
    least one ran), hidden (the share of it during which an attention kernel ran), exposed_ms (the
    time no compute kernel ran beside them), send_ms and grad_pred_ms (theory's bytes at
    `bus_bw_gbs`), attention_ms, compute_ms (the time any compute kernel ran) and busy (the GPU-busy
    share of the profiled span). An NCCL kernel's time includes waiting for its peer: time in
    NCCL is not time on the link."""
    from megalab.records import profiles

    k = profiles.timeline(profile)
    nccl = k["category"] == "nccl"
    grad = k.loc[nccl, "duration_ms"].idxmax()
    comm = nccl & (k.index != grad)
    attention, compute = k["category"] == "attention", ~nccl

    def union_ms(rows):
        return profiles.union_seconds(_intervals(k, rows)) * 1e3

    def both_ms(a, b):  # |A and B| = |A| + |B| - |A or B|
        return union_ms(a) + union_ms(b) - union_ms(a | b)

    cp_ms = union_ms(comm)
    sent = theory.comm_bytes_per_step(cfg)
    busy = profiles.gpu_busy(profile)
    return {
        "cp_ms": cp_ms,
        "hidden": both_ms(comm, attention) / cp_ms,
        "exposed_ms": cp_ms - both_ms(comm, compute),
        "grad_ms": float(k.at[grad, "duration_ms"]),
        "send_ms": sent["cp"] / 1e9 / bus_bw_gbs * 1e3,
        "grad_pred_ms": sent["dp"] / 1e9 / bus_bw_gbs * 1e3,
        "attention_ms": union_ms(attention),
        "compute_ms": union_ms(compute),
        "busy": busy["busy_s"] / busy["span_s"],
    }


def step_parts(ring: dict, step_ms: float):
    """Where a CP step's `step_ms` (a timed median) goes, from `ring` (ring_profile of a profiled
    step of the same configuration): part and ms, for compute kernels, K/V sends with no compute
    beside them, the gradient all-reduce, and the rest (the GPU idle, or the profiled step's own
    overhead)."""
    import pandas as pd

    parts = {
        "compute kernels": ring["compute_ms"],
        "K/V sends, nothing beside them": ring["exposed_ms"],
        "gradient all-reduce": ring["grad_ms"],
    }
    parts["the rest"] = step_ms - sum(parts.values())
    return pd.DataFrame({"part": list(parts), "ms": list(parts.values())})


def rank_work(profiled):
    """Attention kernel seconds per CP rank in profiled steps, beside theory's for the two splits.
    `profiled`: (RunConfig, profile) pairs whose profile keeps every rank. Rows: layout, rank,
    measured_s, zigzag_s and contiguous_s (the measured total shared as theory.causal_work shares
    it: Megatron's 2·cp chunks, or one contiguous chunk per rank)."""
    import pandas as pd

    from megalab.records import profiles

    out = []
    for cfg, profile in profiled:
        t = profiles.rank_times(profile)
        total = float(t["attention_s"].sum())
        split = {k: theory.causal_work(cfg.cp, k, cfg.seq) for k in ("zigzag", "contiguous")}
        for rank, att in t["attention_s"].items():
            out.append(
                {
                    "layout": layout(cfg),
                    "rank": int(rank),
                    "measured_s": float(att),
                    **{f"{k}_s": total * split[k][int(rank)] for k in split},
                }
            )
    return pd.DataFrame(out)


def parity_curves(parities) -> dict:
    """{name: curve} of ParityResults for charts.loss_parity, named in words with the length: each
    one-GPU reference once ('1 GPU, 4k tokens'), then each layout ('CP 4 (all-to-all), 4k tokens');
    a curve measured here keeps ' (yours)'."""
    out = {}
    for par in parities:
        cfg = par.layout.config
        names = ("1 GPU", layout(cfg))
        for (label, curve), name in zip(par.curves().items(), names):
            mine = " (yours)" if label.endswith(" (yours)") else ""
            out.setdefault(f"{name}, {cfg.seq // 1024}k tokens{mine}", curve)
    return out


def parity_figure(parities, title: str):
    """charts.loss_difference of parity_curves(parities): each layout's loss minus its own length's
    one-GPU loss, inside that length's band (the widest of its parity runs)."""
    from megalab import charts

    curves = parity_curves(parities)
    refs, bands = {}, {}
    for name in curves:
        k = name.split(", ")[-1].removesuffix(" (yours)")  # "4k tokens"
        if not name.startswith("1 GPU"):
            refs[name] = f"1 GPU, {k}"
    for p in parities:
        ref = f"1 GPU, {p.layout.config.seq // 1024}k tokens"
        bands[ref] = max(bands.get(ref, 0.0), p.band)
    return charts.loss_difference(curves, bands, title, references=refs)


def host_words(g) -> str:
    """The comparison group's host in words: '2×H200 virtual machine (32 CPUs)' for attrs host
    'vm (32 CPUs, NVIDIA H200)' and configurations of up to two GPUs."""
    import re

    host = str(g.attrs["host"])
    name = host.split(" (")[0]
    kind = "virtual machine" if name == "vm" else f"host {name}"
    cpus = re.search(r"(\d+) CPUs", host)
    gpus = max(c.gpus for c in g["cfg"])
    model = re.search(r"NVIDIA (\S+)\)", host)
    card = model.group(1) if model else "GPU"
    return f"{gpus}×{card} {kind}" + (f" ({cpus.group(1)} CPUs)" if cpus else "")


def runs_table(g):
    """Group `g` run by run, for the evidence page: ch02_analysis.runs_table (runs, each run's
    median in the order they ran, the median, its 95% interval, half-width, whether wider than ±2%,
    MFU) with each configuration named by its length and layout in words."""
    from megalab.book.chapters.ch02_analysis import runs_table as by_run

    return by_run(g).assign(configuration=[f"{c.seq // 1024}k tokens, {layout(c)}" for c in g["cfg"]])
