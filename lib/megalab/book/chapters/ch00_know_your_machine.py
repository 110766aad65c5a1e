"""Chapter 00, know your machine: the ceilings of one host, read from its records.

    from megalab.book.chapters import ch00_know_your_machine as ch00
    pts = ch00.latest_points(bench.load(gpu="H200"))     # one row per bench point, the newest recording
    ch00.copy_tbs(pts, 1 << 32)                          # the 4 GiB copy's bandwidth, TB/s
    ch00.host_cost(timings.group(None, "ch02.tp", "H200"))   # eager against CUDA graphs, per layer

The bench (`megalab bench`) measures matmul, HBM copies and NCCL collectives; the host's cost per
kernel launch comes from `tools/gpu/host_probe.py`'s file in the results store (PROBE) and, per
layer and micro-batch of a model, from the eager and CUDA-graph runs of comparison group ch02.tp.
"""

from __future__ import annotations

import json
import re

L2_MB = 50  # H100/H200 SXM L2 cache, MB (NVIDIA Hopper architecture whitepaper)
# tools/gpu/host_probe.py's output, under the results store: the 4×H200 host (4-GPU collectives,
# timed steps) and the 2×H200 host (matmul, HBM, 2-GPU collectives)
PROBE = "probes/host-4xh200/host_probe.json"
PROBE_2 = "probes/host-2xh200/host_probe.json"
HOSTS = {"4×H200 host": PROBE, "2×H200 host": PROBE_2}
# the comparison group holding an eager and a graphed step
GROUP = "ch02.tp"
_POINT = ["bench", "op", "dtype", "gpus", "size_bytes", "n", "source"]
_OPS = {
    "all_reduce": "all-reduce",
    "all_gather": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "all_to_all": "all-to-all",
}


def latest_points(df):
    """One row per bench point (benchmark, op, dtype, GPU count, size[, source]): the newest
    recording of it."""
    keys = [c for c in _POINT if c in df]
    return df.sort_values("recorded_at").drop_duplicates(keys, keep="last").reset_index(drop=True)


def copy_tbs(hbm, size_bytes: int) -> float:
    """TB/s of the device-to-device copy of `size_bytes` (bytes read + written over time; newest
    point)."""
    rows = latest_points(hbm[hbm["size_bytes"] == size_bytes])
    if rows.empty:
        raise KeyError(
            f"no HBM copy of {size_bytes} bytes recorded: run `megalab bench --only hbm`"
        )
    return float(rows["gbs"].iloc[-1]) / 1e3


def hbm_figure(hbm, peak_tbs: float, title: str = "HBM copy bandwidth"):
    """charts.hbm_vs_size with the sizes whose source and destination fit in L2 together shaded."""
    from megalab import charts

    fig = charts.hbm_vs_size(hbm, peak_tbs=peak_tbs, title=title)
    fig.add_vrect(
        x0=float(hbm["size_bytes"].min()) / 1.5,
        x1=L2_MB * 1e6 / 2,
        fillcolor="#edae49",
        opacity=0.2,
        line_width=0,
        annotation_text="copy fits in L2",
        annotation_position="top left",
    )
    return fig.update_layout(yaxis_range=[0, 1.1 * peak_tbs])


def shown(df):
    """df for display (frame.table): its columns as they are, the index hidden."""
    from megalab.book import frame

    return frame.table(df, {c: c for c in df.columns})


def collective_table(nccl):
    """Peak bus bandwidth (GB/s) of each collective by GPU count, worded headers (a Styler; .data
    the frame)."""
    t = (
        nccl.pivot_table(index="op", columns="gpus", values="busbw_gbs", aggfunc="max")
        .round(0)
        .astype(int)
    )
    t.index = [_OPS.get(op, op) for op in t.index]
    t.columns = [f"{n} GPUs (GB/s)" for n in t.columns]
    return shown(t.rename_axis("collective").reset_index())


def bus_gbs(nccl, op: str, gpus: int, size_bytes: int) -> float:
    """The newest bus bandwidth (GB/s) of one collective at one size."""
    rows = latest_points(
        nccl[(nccl["op"] == op) & (nccl["gpus"] == gpus) & (nccl["size_bytes"] == size_bytes)]
    )
    return float(rows["busbw_gbs"].iloc[-1])


def probe_checks(nccl):
    """What the bench checked: per GPU count, how many all-reduce probes ran (one per timed
    collective and size) and whether every one summed right. The timed collectives' own outputs are
    not checked."""
    g = nccl.groupby("gpus")["correct"]
    out = g.agg(["size", "all"]).rename(
        columns={"size": "all-reduce probes", "all": "every probe correct"}
    )
    out["every probe correct"] = out["every probe correct"].map({True: "yes", False: "no"})
    return shown(out.rename_axis("GPUs").reset_index())


def host_probe(store=None, name: str = PROBE) -> dict:
    """A host probe file of the results store (PROBE by default), with `links`: the NVLink count of
    every GPU pair ("NV18") read from its `nvidia-smi topo -m` table."""
    probe = json.loads(probe_path(name, store).read_text())
    return {**probe, "links": links(probe.get("topo", ""))}


def probe_roots(store=None) -> list:
    """Where probe files are looked for, in order: the results store, then (for a store that lacks
    them: MEGALAB_RESULTS pointing at a fresh one, as a GPU host's recording does) the checkout's
    committed results/."""
    from megalab.machine.env import repo_root
    from megalab.records.store import as_store

    return [as_store(store).root] + ([repo_root() / "results"] if repo_root() else [])


def probe_path(name: str, store=None):
    """Where probe file `name` ("probes/host-4xh200/host_probe.json") is, the first of probe_roots
    that holds it; FileNotFoundError naming every place otherwise."""
    places = [root / name for root in probe_roots(store)]
    for path in places:
        if path.exists():
            return path
    raise FileNotFoundError(
        f"no host probe {name} in {' or '.join(str(p.parent) for p in places)}: run "
        "tools/gpu/host_probe.py on that host, or point MEGALAB_RESULTS at the book's results/"
    )


def links(topo: str) -> list[str]:
    """The distinct GPU-to-GPU link kinds of an `nvidia-smi topo -m` table ("NV18", "SYS", ...),
    sorted."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", topo)
    kinds = set()
    for line in text.splitlines():
        cells = line.split("\t")
        if cells and re.fullmatch(r"GPU\d+", cells[0].strip()):
            kinds |= {
                c.strip()
                for c in cells[1:]
                if re.fullmatch(r"NV\d+|SYS|NODE|PHB|PXB|PIX", c.strip())
            }
    return sorted(kinds)


def yours(df) -> dict | None:
    """The reader's own host, in host_probe's keys, from the newest `launch` point of `df` whose
    source is "yours" (the bench just run here); None when there is none."""
    if "source" not in df or "eager_launch_host_us" not in df:
        return None
    rows = df[(df["bench"] == "launch") & (df["source"] == "yours")]
    if rows.empty:
        return None
    r = rows.sort_values("recorded_at").iloc[-1]
    host, env = r.get("host") or {}, r.get("env") or {}
    return {
        "cpu_model": host.get("cpu_model") or "?",
        "cpu_count": host.get("cpu_count") or "?",
        "vm": bool(host.get("vm")),
        "gpu": env.get("gpu_name") or "?",
        "gpu_count": env.get("gpu_count") or "?",
        "nccl": host.get("nccl") or "?",
        "torch": env.get("torch") or "?",
        "links": links(host.get("topology") or ""),
        "eager_launch_host_us": float(r["eager_launch_host_us"]),
        "graph_kernel_wall_us": float(r["graph_kernel_wall_us"]),
    }


def host_table(probe: dict, mine: dict | None = None):
    """The host in words: CPU, cores, VM or bare metal, GPUs, NCCL, links, launch costs; with `mine`
    (yours(df)), a column for the reader's own host. `probe` is one host_probe() (column "reference
    host") or {column name: host_probe()} for several reference hosts."""
    import pandas as pd

    refs = {"reference host": probe} if "cpu_model" in probe else dict(probe)
    cols = refs | ({"your host": mine} if mine else {})
    return shown(
        pd.DataFrame({name: _host_words(h) for name, h in cols.items()})
        .rename_axis("")
        .reset_index()
    )


def _cpu_words(h: dict) -> str:
    """The CPU model as the host reports it; a VM that hides the model number says so."""
    model = h["cpu_model"]
    if h.get("vm") and not any(ch.isdigit() for ch in model):
        return f"{model} (model number hidden by the VM)"
    return model


def _host_words(h: dict) -> dict:
    return {
        "CPU": _cpu_words(h),
        "CPU cores (logical)": str(h["cpu_count"]),
        "virtual machine or bare metal": "virtual machine" if h["vm"] else "bare metal",
        "GPUs": f"{h['gpu_count']} × {h['gpu']}",
        "NCCL": h["nccl"],
        "PyTorch": h["torch"],
        "GPU-to-GPU links": ", ".join(h["links"]) or "none",
        "host time per eager kernel launch": f"{h['eager_launch_host_us']:.1f} µs",
        "time per kernel replayed from a CUDA graph": f"{h['graph_kernel_wall_us']:.2f} µs",
    }


def host_cost(group, name: str = "gpt-1.2b", tp: int = 2) -> dict:
    """Eager against CUDA graphs for one configuration of a comparison group (timings.group's
    DataFrame): eager_ms and graphs_ms (median steps), the 95% intervals (eager_lo/hi,
    graphs_lo/hi), the eager runs' medians (eager_runs), layers and micro-batches per step,
    host_ms_per_layer: the step time CUDA graphs remove, per layer and micro-batch; busy: the
    group's profiled GPU-busy share, busy_cfg the configuration profiled, eager_busy_measured
    whether the eager step has one."""
    rows = [
        (label, r) for label, r in group.iterrows() if r["cfg"].name == name and r["cfg"].tp == tp
    ]
    by = {r["cfg"].cuda_graphs: r for _, r in rows}
    if "none" not in by or len(by) < 2:
        raise KeyError(
            f"group {group.attrs.get('name')} has no eager and graphed {name} TP {tp} pair"
        )
    eager, graphs = by["none"], next(r for k, r in by.items() if k != "none")
    cfg = eager["cfg"]
    micro = cfg.gbs // (cfg.mbs * cfg.dp)
    profiled = group.attrs.get("profiled")
    busy_cfg = group.loc[profiled, "cfg"] if profiled in group.index else None
    return {
        "eager_ms": eager["median_ms"],
        "graphs_ms": graphs["median_ms"],
        "eager_lo": eager["lo_ms"],
        "eager_hi": eager["hi_ms"],
        "graphs_lo": graphs["lo_ms"],
        "graphs_hi": graphs["hi_ms"],
        "eager_runs": list(eager["run_ms"]),
        "graphs_runs": list(graphs["run_ms"]),
        "layers": cfg.layers,
        "micro_batches": micro,
        "host_ms_per_layer": (eager["median_ms"] - graphs["median_ms"]) / (cfg.layers * micro),
        "busy": group.attrs.get("gpu_busy"),
        "busy_cfg": busy_cfg,
        "eager_busy_measured": bool(eager["gpu_busy"] == eager["gpu_busy"]),
    }


def host_figure(cost: dict, title: str = "gpt-1.2b, TP 2, one step: eager against CUDA graphs"):
    """Two bars, the eager and the graphed step (ms, the median of every timed step), each run's
    median as a dot and the whiskers from the fastest run's median to the slowest's: a host-bound
    step wanders more from run to run than within one."""
    from megalab.charts._style import PALETTE, _figure

    fig = _figure(title, yaxis_title="ms per step", legend=dict(orientation="h", y=-0.15))
    for i, (x, k) in enumerate((("eager", "eager"), ("CUDA graphs", "graphs"))):
        med, runs = cost[f"{k}_ms"], cost[f"{k}_runs"]
        fig.add_bar(
            x=[x],
            y=[med],
            marker_color=PALETTE[i],
            width=0.5,
            showlegend=False,
            error_y=dict(
                type="data",
                symmetric=False,
                array=[max(max(runs) - med, 0.0)],
                arrayminus=[max(med - min(runs), 0.0)],
            ),
        )
        fig.add_scatter(
            x=[x] * len(runs),
            y=runs,
            mode="markers",
            marker=dict(color="black", size=8),
            name="median of each run",
            showlegend=i == 0,
        )
    fig.add_scatter(  # a legend entry for the whiskers
        x=[None],
        y=[None],
        mode="markers",
        marker=dict(symbol="line-ns-open", color="#444", size=14, line=dict(width=2)),
        name="whiskers: fastest to slowest run",
    )
    return fig.update_layout(height=420)


def recordings_table(records, probes: dict[str, dict]):
    """The benchmark recordings in words: one row per machine and software environment
    (records.provenance), with the GPU-to-GPU links read from that host's probe in `probes`
    ({GPU count: host_probe()}) where the record itself says "none" (records made before the
    environment read `nvidia-smi topo`'s NV# links)."""
    from megalab.records import schema

    prov = schema.provenance(records)
    rows = []
    for _, r in prov.iterrows():
        gpus = r["gpus"][0] if len(r["gpus"]) == 1 else None
        links = r["interconnect"]
        unread = links in (None, "none", schema.LINK_NOT_READ)
        if unread and gpus in probes and "NVIDIA H200" in r["gpu_name"]:
            links = f"NVLink ({', '.join(probes[gpus]['links'])}), from the host probe"
        elif unread:
            links = "not recorded"
        rows.append({
            "GPU": r["gpu_name"].removeprefix("NVIDIA "),
            "GPUs": ", ".join(str(g) for g in r["gpus"]),
            "Links between GPUs": links,
            "Driver": r["driver"],
            "CUDA": r["cuda"],
            "PyTorch": r["torch"],
            "Points": int(r["records"]),
            "Recorded on": str(r["first"])[:10],
        })
    import pandas as pd

    return shown(pd.DataFrame(rows))
