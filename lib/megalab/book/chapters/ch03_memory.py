"""Chapter 03's tables: activation memory per layer, what fits, where theory's full-recompute memory
goes wrong, partial recomputation and what recomputed kernels cost.

Every function takes run results (objects with `.config` and `.summary`, as `megalab.run` returns
them) or RunConfigs and returns a pandas frame or a dict of numbers; the notebook shows them with
`frame.table`. Activation memory per layer is the difference of the trainer's `act_gib` (bytes
allocated from the start of the first forward pass to its loss) between two depths, divided by the
difference in layers: it cancels the embedding, the logits and the loss.
"""

from __future__ import annotations

import math

from megalab import theory
from megalab.book import frame

__all__ = [
    "GIB",
    "MIB",
    "layer_name",
    "per_layer",
    "fits",
    "full_recompute_budget",
    "logits_gib",
    "partial_recompute",
    "partial_table",
    "fewest_block_layers",
    "kernels_vs_flops",
    "busy_share",
    "long",
    "per_gpu_vs_t",
    "predicted_rates",
    "legend_in_words",
    "one_recording",
    "recompute_timings",
    "parity_curves",
]

GIB, MIB = 2**30, 2**20


def layer_name(cfg) -> str:
    """A per-layer variant in words: its layout (frame.describe), with ', TE attention' or ', local
    layers' on one GPU where the attention kind is what differs."""
    words = frame.describe(cfg)
    return words if cfg.impl != "te" or cfg.tp > 1 else f"{words}, TE attention"


def per_layer(pairs: dict) -> "pd.DataFrame":
    """{name: (shallow run, deep run)} -> one row per name: layout (words), tp, measured MiB per
    layer per GPU, the formula for its attention (`theory.activation_bytes_per_layer`: TE keeps no
    scores), Table 2's formula with the scores kept (5 bytes each), and measured over formula."""
    import pandas as pd

    rows = {}
    for name, (lo, hi) in pairs.items():
        layers = hi.config.layers - lo.config.layers
        measured = (hi.summary["act_gib"] - lo.summary["act_gib"]) * GIB / layers / MIB
        cfg = lo.config
        formula = theory.activation_bytes_per_layer(cfg) / MIB
        rows[name] = {
            "layout": layer_name(cfg),
            "tp": cfg.tp,
            "measured": measured,
            "formula": formula,
            "table2": theory.activation_bytes_per_layer(cfg, "materialized") / MIB,
            "ratio": measured / formula,
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def fits(searches: dict, specs: dict, gpu: str) -> "pd.DataFrame":
    """{name: FitResult} and {name: Fit} -> one row per name: layout (words), theory's largest
    micro-batch, the largest that ran, the first that ran out of memory (None when none did),
    predicted and allocated GiB per GPU at the largest, and the tokens/s of its few steps (rough:
    fit probes are no timing)."""
    import pandas as pd

    rows = {}
    for name, res in searches.items():
        best, spec = res.best, specs[name]
        above = [v for v, p in res.probes if v > res.largest and not p.ok]
        rows[name] = {
            "layout": frame.describe(best.config),
            "predicted": spec.predicted,
            "largest": res.largest,
            "oom": min(above) if above else None,
            "predicted_gib": theory.memory(best.config, gpu)["total"],
            "allocated_gib": best.summary["mem_allocated_peak_gib"],
            "tokens_per_s": best.summary["tokens_per_s"],
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def _state_gib(cfg) -> float:
    m = theory.memory(cfg)
    return m["weights"] + m["grads"] + m["optimizer"]


def full_recompute_budget(best, layer_input_mib: float) -> "pd.DataFrame":
    """Theory's full-recompute peak set term by term beside what the run measured (`best`: a run
    with full recomputation and pp 1; `layer_input_mib`: the measured MiB one layer keeps per
    sequence, from a depth pair at micro-batch 1). Rows: model state (counted, the same in both
    columns), the layers' inputs (theory 2·s·b·h each; measured: layer_input_mib × layers × b), the
    logits and the rest of the forward (theory: fp32 logits 4·s·b·V, the final norm's output, the
    embedding; measured: act_gib less the inputs), the layer the backward re-runs (theory: one
    layer's full activations on top; measured: the peak less the state and act_gib), and the total
    (theory.memory; the allocated peak)."""
    import pandas as pd

    cfg = best.config
    if cfg.recompute != "full" or cfg.pp != 1:
        raise ValueError(
            f"full_recompute_budget needs full recomputation at pp 1, not {frame.describe(cfg)}"
        )
    state = _state_gib(cfg)
    inputs_theory = cfg.layers * theory.activation_bytes_per_layer(cfg) / GIB
    rerun_theory = theory.activation_bytes_per_layer(cfg, recompute="none") / GIB
    forward_theory = theory.held_activation_bytes(cfg) / GIB - rerun_theory
    inputs = layer_input_mib * MIB * cfg.layers * cfg.mbs / GIB
    act, peak = best.summary["act_gib"], best.summary["mem_allocated_peak_gib"]
    rows = [
        ("weights, gradients, Adam (counted)", state, state),
        (f"inputs of the {cfg.layers} layers", inputs_theory, inputs),
        ("logits and the rest of the forward", forward_theory - inputs_theory, act - inputs),
        ("the layer the backward re-runs", rerun_theory, peak - state - act),
        ("total", theory.memory(cfg)["total"], peak),
    ]
    return pd.DataFrame(rows, columns=["part", "theory", "measured"]).set_index("part")


def logits_gib(cfg, bytes_per_value: int) -> float:
    """GiB of one micro-batch's logits on one GPU (s·b·V/t values) at `bytes_per_value` (4: fp32, 2:
    bf16)."""
    return bytes_per_value * cfg.seq * cfg.mbs * cfg.vocab / cfg.tp / GIB


def partial_recompute(cfg, method: str, layers: int) -> dict:
    """Predicted activation GiB per GPU and extra FLOPs of Megatron's partial recomputation (pp 1,
    TE): `--recompute-granularity full --recompute-method block --recompute-num-layers n` re-runs
    the first n layers from their inputs and keeps the other layers' activations; `uniform` with n
    checkpoints every group of n layers (all of them recomputed) and re-runs n layers at once in the
    backward pass. Megatron Core's TransformerBlock._checkpointed_forward. Returns activations_gib,
    total_gib (with the model state) and extra_flops (executed over model FLOPs, less one)."""
    if (
        method not in ("block", "uniform")
        or not 0 <= layers <= cfg.layers
        or (method == "uniform" and layers < 1)
    ):
        raise ValueError(
            f"partial_recompute: method block (0..{cfg.layers} layers) or uniform (1..{cfg.layers})"
        )
    none = cfg.replace(recompute="none")
    full_layer = theory.activation_bytes_per_layer(none)
    kept_input = theory.activation_bytes_per_layer(cfg.replace(recompute="full"))
    # embedding, logits: not layers
    rest = theory.held_activation_bytes(none) - cfg.layers * full_layer
    if method == "block":
        recomputed = layers
        act = (
            layers * kept_input + (cfg.layers - layers) * full_layer + (full_layer if layers else 0)
        )
    else:
        recomputed = cfg.layers
        act = math.ceil(cfg.layers / layers) * kept_input + layers * full_layer
    full_extra = theory.extra_flops(cfg.replace(recompute="full"))
    act_gib = (act + rest) / GIB
    return {
        "activations_gib": act_gib,
        "total_gib": act_gib + _state_gib(cfg),
        "extra_flops": full_extra * recomputed / cfg.layers,
    }


def partial_table(cfg, layers: list[int]) -> "pd.DataFrame":
    """partial_recompute with block recomputation for each n in `layers`: one row per n (recomputed
    layers, predicted GiB per GPU, extra FLOPs)."""
    import pandas as pd

    rows = [{"recomputed layers": n, **partial_recompute(cfg, "block", n)} for n in layers]
    return pd.DataFrame(rows)


def fewest_block_layers(cfg, capacity_gib: float) -> int | None:
    """The fewest layers block recomputation must re-run for cfg's predicted peak to fit
    `capacity_gib`; None when even all of them do not."""
    for n in range(cfg.layers + 1):
        if partial_recompute(cfg, "block", n)["total_gib"] <= capacity_gib:
            return n
    return None


def kernels_vs_flops(
    ms: "pd.DataFrame", flops: "pd.DataFrame", base: str = "none"
) -> "pd.DataFrame":
    """Kernel time against FLOPs, by kind: `ms` is profiles.kernel_ms (kinds × choices, ms per
    step), `flops` the FLOPs ratios by kind (theory.recompute.flops_ratio_by_kind per choice, its
    "all" row renamed "all kernels"). One row per kind both know and choice other than `base`: kind,
    choice, kernel ms with and without, the kernel-time ratio and the FLOPs ratio."""
    import pandas as pd

    rows = [
        {
            "kind": kind,
            "choice": choice,
            "base_ms": ms.at[kind, base],
            "ms": ms.at[kind, choice],
            "time_x": ms.at[kind, choice] / ms.at[kind, base],
            "flops_x": flops.at[kind, choice],
        }
        for choice in ms.columns
        if choice != base
        for kind in ms.index
        if kind in flops.index
    ]
    return pd.DataFrame(rows)


def busy_share(record: dict) -> float:
    """The share of a profiled step during which at least one GPU kernel ran (profiles.gpu_busy)."""
    from megalab.records import profiles

    b = profiles.gpu_busy(record["profile"])
    return b["busy_s"] / b["span_s"]


def long(df, x: str, columns: dict, value: str) -> "pd.DataFrame":
    """df's `columns` ({column: words}) as long rows for charts.grouped_bars: x, kind (the words),
    value."""
    part = df.rename(columns=columns)[[x, *columns.values()]]
    return part.melt(id_vars=x, var_name="kind", value_name=value)


def per_gpu_vs_t(shape, measured: "pd.DataFrame", degrees=(1, 2, 4, 8)) -> "pd.DataFrame":
    """Activation MiB per layer per GPU against the TP degree, for charts.metric_vs: theory's TP and
    TP + SP lines (TE attention) at `degrees`, labelled predicted, and the measured points of
    `measured` (per_layer's frame; its TP, TP + SP and one-GPU TE rows), labelled measured. Columns:
    t, series, MiB."""
    import pandas as pd

    rows = [
        {
            "t": t,
            "series": f"{'TP + SP' if sp else 'TP'}, predicted",
            "MiB": theory.activation_bytes_per_layer(shape.replace(gpus=t, tp=t, sp=sp and t > 1))
            / MIB,
        }
        for t in degrees
        for sp in (False, True)
    ]
    for _, r in measured.iterrows():
        layout = r["layout"]
        if r["tp"] == 1 and layout == layer_name(shape):
            rows += [
                {"t": 1, "series": f"{s}, measured", "MiB": r["measured"]}
                for s in ("TP", "TP + SP")
            ]
        elif r["tp"] > 1 and layout in (f"TP {r['tp']}", f"TP {r['tp']} + SP"):
            rows.append(
                {
                    "t": r["tp"],
                    "series": f"{'TP + SP' if 'SP' in layout else 'TP'}, measured",
                    "MiB": r["measured"],
                }
            )
    return pd.DataFrame(rows)


def predicted_rates(configs: dict, gpu: str) -> "pd.DataFrame":
    """{name: RunConfig} -> one row per name: layout (words), micro-batch, predicted tokens/s
    (theory.plan's step estimate) and that rate over the first row's."""
    import pandas as pd

    rows = {
        name: {
            "layout": frame.describe(c),
            "mbs": c.mbs,
            "tokens_per_s": c.gbs * c.seq / theory.plan(c, gpu)["step_time_estimate"]["total_s"],
        }
        for name, c in configs.items()
    }
    out = pd.DataFrame.from_dict(rows, orient="index")
    out["relative"] = out["tokens_per_s"] / out["tokens_per_s"].iloc[0]
    return out


def legend_in_words(fig):
    """charts.metric_vs names its lines "<column> = <value>": keep the value ("TP + SP,
    predicted")."""
    return fig.for_each_trace(lambda tr: tr.update(name=tr.name.split(" = ", 1)[-1]))


def one_recording(results) -> bool:
    """Whether `results` (run results with `.record`) come from one host, one commit and one trainer
    revision: the least a step-time comparison needs (a comparison group adds alternation and
    repeats)."""
    from megalab.records import timings, trainer_revision

    records = [r.record for r in results]
    return all(
        len({str(of(rec)) for rec in records}) == 1
        for of in (timings.host_of, lambda rec: rec.get("git_commit"), trainer_revision)
    )


def recompute_timings(timed: dict) -> "pd.DataFrame":
    """{TP degree: [run results at one micro-batch, the first without recomputation]} -> one row per
    run: TP degree, layout (words), step ms, extra time over the degree's first run, extra FLOPs
    (theory), peak GiB allocated, and whether the degree's runs are one recording
    (one_recording)."""
    import pandas as pd

    rows = []
    for t, runs in timed.items():
        base, same = runs[0].summary["step_time_s"], one_recording(runs)
        for r in runs:
            c = r.config
            rows.append(
                {
                    "tp": t,
                    "layout": frame.describe(c),
                    "step_ms": r.summary["step_time_s"] * 1e3,
                    "extra_time": r.summary["step_time_s"] / base - 1,
                    "extra_flops": theory.extra_flops(c),
                    "peak_gib": r.summary["mem_allocated_peak_gib"],
                    "one_recording": same,
                }
            )
    return pd.DataFrame(rows)


def parity_curves(parities) -> dict:
    """charts.loss_parity's curves of ParityResults, named in words: each one-GPU reference as its
    layout ("1 GPU", "1 GPU + selective recomputation"), each layout as frame.describe says; a
    reader's own runs keep their "(yours)" suffix. The first curve is the first result's
    reference."""
    return {name: s for p in parities for name, s in _named_pair(p)}


def _named_pair(p) -> list[tuple[str, dict]]:
    """[(reference name, curve), (layout name, curve)] of one ParityResult, as parity_curves names
    them."""
    names = (
        frame.describe(p.reference[0].config) if p.reference else "1 GPU",
        frame.describe(p.layout.config),
    )
    return [
        (f"{name} (yours)" if s.get("source") == "yours" else name, s)
        for name, s in zip(names, p.curves().values())
    ]


def parity_figure(parities, title: str):
    """charts.loss_difference of parity_curves(parities): each layout's loss minus its own one-GPU
    reference's (with or without recomputation), inside the widest band of that reference's runs."""
    from megalab import charts

    refs, bands = {}, {}
    for p in parities:
        (ref, _), (lay, _) = _named_pair(p)
        refs[lay] = ref
        bands[ref] = max(bands.get(ref, 0.0), p.band)
    return charts.loss_difference(parity_curves(parities), bands, title, references=refs)
