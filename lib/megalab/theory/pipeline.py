"""The pipeline schedule: the bubble, how many micro-batches each stage holds, and the schedule
itself.

Narayanan et al. 2021, §2.2.1 (1F1B) and §2.2.2 (interleaved schedule); Megatron Core 0.16.1
pipeline_parallel/schedules.py for the warm-up counts and the order of micro-batches and chunks.
"""

from __future__ import annotations

__all__ = [
    "bubble_fraction",
    "bubble_over_ideal",
    "bubble_over_step",
    "layers_in_flight",
    "schedule",
    "schedule_bubble",
    "stage_order",
]


def bubble_over_ideal(p: int, m: int, v: int = 1) -> float:
    """Pipeline bubble over the ideal step (the time without bubble): (p−1)/m, interleaved
    (p−1)/(v·m).

    Narayanan et al. 2021 §2.2.1 and §2.2.2: with per-micro-batch forward and backward times t_f,
    t_b per stage, the bubble is (p−1)·(t_f + t_b) against m·(t_f + t_b) of useful work; v chunks
    per GPU shrink each bubble slot v times. It exceeds 1 when m < p−1.
    """
    return (p - 1) / (v * max(1, m))


def bubble_over_step(p: int, m: int, v: int = 1) -> float:
    """The share of each GPU's step spent idle: (p−1)/(v·m + p−1), always below 1.

    The same bubble as `bubble_over_ideal`, measured against the whole step (ideal + bubble) instead
    of the ideal part: b/(1+b). This is what a per-stage timeline shows as gaps.
    """
    return (p - 1) / (v * max(1, m) + p - 1)


def bubble_fraction(cfg) -> float:
    """Pipeline bubble over ideal compute time for a RunConfig: (p−1)/m, interleaved (p−1)/(v·m)."""
    return bubble_over_ideal(cfg.pp, cfg.num_microbatches, cfg.vpp)


def layers_in_flight(cfg, stage: int = 0) -> float:
    """Layer-micro-batches whose activations `stage` holds at the peak of the schedule.

    MC 0.16.1 schedules.py `get_pp_rank_microbatches`: 1F1B warms up pp−stage−1 micro-batches, so
    min(pp−stage, m) × L/pp; interleaved warms up 2(pp−stage−1) + (v−1)·pp chunks of L/(pp·v)
    layers. On stage 0 that is L·(1 + (pp−1)/(pp·v)), Megatron's interleaving memory penalty
    (Narayanan et al. 2021 §2.2.2). pp = 1: one micro-batch.
    """
    pp, v, m, L = cfg.pp, cfg.vpp, cfg.num_microbatches, cfg.layers
    if pp == 1:
        return L
    if v == 1:
        return min(pp - stage, m) * L / pp
    return min(2 * (pp - stage - 1) + (v - 1) * pp + 1, m * v) * L / (pp * v)


# -- the schedule itself
# -----------------------------------------------------------------------------
def _chunk_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each forward in order: MC 0.16.1 `get_schedule_table`, micro-batches
    in groups of `group` (microbatch_group_size_per_vp_stage, default pp), each group through every
    chunk."""
    table = []
    for first in range(0, m, group):
        last = m if first + group >= m else first + group
        table += [(mb, c) for c in range(v) for mb in range(first, last)]
    return table


def stage_order(p: int, m: int, v: int, stage: int) -> list[tuple[str, int, int]]:
    """The order in which pipeline stage `stage` runs its passes: [("F" or "B", micro-batch,
    chunk)].

    1F1B (v = 1; MC 0.16.1 `forward_backward_pipelining_without_interleaving`): min(p−stage−1, m)
    forwards to warm up, then one forward and one backward in turn, then the remaining backwards.
    Interleaved (v > 1; `forward_backward_pipelining_with_interleaving`): the forwards follow the
    schedule table (micro-batches in groups of p, each group through chunks 0..v−1), the backwards
    the same table with the chunks reversed; 2(p−stage−1) + (v−1)·p forwards warm up, capped at m·v.
    """
    if v == 1:
        warm = min(p - stage - 1, m)
        fwd = [("F", i, 0) for i in range(m)]
        bwd = [("B", i, 0) for i in range(m)]
    else:
        if m % p:
            raise ValueError(
                f"m={m}: the interleaved schedule needs the micro-batches divisible by p={p}"
            )
        table = _chunk_table(m, v, p)
        warm = min(2 * (p - stage - 1) + (v - 1) * p, m * v)
        fwd = [("F", mb, c) for mb, c in table]
        bwd = [("B", mb, v - 1 - c) for mb, c in table]
    order = fwd[:warm]
    for k in range(len(fwd) - warm):
        order += [fwd[warm + k], bwd[k]]
    return order + bwd[len(fwd) - warm :]


def schedule(p: int, m: int, v: int = 1, tf: float = 1.0, tb: float = 2.0) -> list[dict]:
    """The ideal pipeline schedule of one step: every forward and backward pass of every micro-batch
    on every stage, with its start and end, as Megatron Core runs them (`stage_order`).

    p stages, m micro-batches, v model chunks per stage (v = 1: 1F1B, v > 1: interleaved 1F1B); `tf`
    and `tb` are the forward and backward time of one micro-batch through one chunk (L/(p·v) layers;
    Narayanan et al. 2021 take t_b = 2·t_f). Ideal: sends and receives take no time and every chunk
    costs the same; a pass starts as soon as its stage is free and its input has arrived (the
    forward of the previous virtual stage, chunk c on stage p−1 feeding chunk c+1 on stage 0; the
    backward of the next one, the last virtual stage's backward after its own forward). Returns
    dicts with stage, microbatch, chunk, kind ("F" or "B"), start and end, sorted by start.
    """
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"p={p}, m={m}, v={v}: each must be at least 1")
    orders = [stage_order(p, m, v, s) for s in range(p)]
    last = p * v - 1  # virtual stage c·p + s runs chunk c on stage s
    done: dict[tuple[str, int, int], float] = {}
    free, nxt, tasks = [0.0] * p, [0] * p, []
    while len(tasks) < 2 * m * v * p:
        progressed = False
        for s in range(p):
            while nxt[s] < len(orders[s]):
                kind, mb, c = orders[s][nxt[s]]
                vs = c * p + s
                need = (
                    (("F", mb, vs - 1) if vs > 0 else None)
                    if kind == "F"
                    else (("B", mb, vs + 1) if vs < last else ("F", mb, vs))
                )
                if need is not None and need not in done:
                    break  # its input is not computed yet: another stage goes first
                start = max(free[s], done.get(need, 0.0))
                end = start + (tf if kind == "F" else tb)
                done[(kind, mb, vs)] = free[s] = end
                tasks.append(
                    {
                        "stage": s,
                        "microbatch": mb,
                        "chunk": c,
                        "kind": kind,
                        "start": start,
                        "end": end,
                    }
                )
                nxt[s] += 1
                progressed = True
        if not progressed:
            # never for Megatron's orders
            raise RuntimeError(f"the schedule deadlocks (p={p}, m={m}, v={v})")
    return sorted(tasks, key=lambda t: (t["start"], t["stage"]))


def schedule_bubble(tasks: list[dict]) -> float:
    """A schedule's bubble over its ideal step: makespan / (busiest stage's busy time) − 1. On
    `schedule`'s tasks this is (p−1)/(v·m) (Narayanan et al. 2021 §2.2)."""
    busy: dict = {}
    for t in tasks:
        busy[t["stage"]] = busy.get(t["stage"], 0.0) + t["end"] - t["start"]
    span = max(t["end"] for t in tasks) - min(t["start"] for t in tasks)
    return span / max(busy.values()) - 1
