"""theory.pipeline: the bubble of 1F1B and interleaved 1F1B, and the schedule that has it."""

import pytest

from megalab import theory
from megalab.runs import presets
from megalab.theory import pipeline


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("v", [1, 2, 3])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_schedule_bubble_is_narayanan_2021(p, v, k):
    """Narayanan et al. 2021 §2.2.1: 1F1B's bubble is (p−1)/m of the ideal step; §2.2.2: with v
    chunks per GPU, (p−1)/(v·m). Exact for Megatron's orders, whatever t_f and t_b."""
    m = k * p
    for tf, tb in ((1.0, 2.0), (1.0, 1.0), (0.3, 0.7)):
        tasks = theory.schedule(p, m, v, tf, tb)
        assert theory.schedule_bubble(tasks) == pytest.approx((p - 1) / (v * m))
        assert theory.schedule_bubble(tasks) == pytest.approx(theory.bubble_over_ideal(p, m, v))


def test_1f1b_step_is_m_plus_p_minus_1_slots():
    """§2.2.1: the step takes (m + p − 1)·(t_f + t_b), also when m < p − 1 (the bubble exceeds the
    work)."""
    for p, m in ((4, 8), (4, 1), (8, 3)):
        tasks = theory.schedule(p, m, tf=1.0, tb=2.0)
        assert max(t["end"] for t in tasks) == pytest.approx((m + p - 1) * 3.0)
        assert theory.bubble_over_ideal(p, m) == pytest.approx((p - 1) / m)


def test_bubble_over_step_is_the_idle_share():
    """(p−1)/(v·m + p−1) = b/(1+b): the share of a GPU's step with nothing to do."""
    p, m, v = 4, 8, 2
    tasks = theory.schedule(p, m, v, tf=0.5, tb=1.0)
    span = max(t["end"] for t in tasks)
    busy0 = sum(t["end"] - t["start"] for t in tasks if t["stage"] == 0)
    assert 1 - busy0 / span == pytest.approx(theory.bubble_over_step(p, m, v))
    b = theory.bubble_over_ideal(p, m, v)
    assert theory.bubble_over_step(p, m, v) == pytest.approx(b / (1 + b))


def test_every_pass_once_after_its_input():
    p, m, v = 4, 8, 2
    tasks = theory.schedule(p, m, v)
    assert len(tasks) == 2 * p * m * v
    end = {(t["kind"], t["microbatch"], t["chunk"] * p + t["stage"]): t["end"] for t in tasks}
    assert len(end) == len(tasks)
    for t in tasks:
        vs = t["chunk"] * p + t["stage"]
        if t["kind"] == "F" and vs > 0:
            assert t["start"] >= end[("F", t["microbatch"], vs - 1)]
        if t["kind"] == "B":
            after = ("B", t["microbatch"], vs + 1) if vs < p * v - 1 else ("F", t["microbatch"], vs)
            assert t["start"] >= end[after]
    for s in range(p):  # one pass at a time per GPU
        own = sorted((t["start"], t["end"]) for t in tasks if t["stage"] == s)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(own, own[1:]))


def test_stage_order_is_megatron_cores():
    """MC 0.16.1 schedules.py: 1F1B warms up p−stage−1 forwards; interleaved follows
    get_schedule_table (groups of p micro-batches through each chunk) and warms up 2(p−stage−1) +
    (v−1)·p forwards."""
    assert pipeline.stage_order(4, 4, 1, 1)[:4] == [
        ("F", 0, 0),
        ("F", 1, 0),
        ("F", 2, 0),
        ("B", 0, 0),
    ]
    assert pipeline.stage_order(4, 4, 1, 3)[:2] == [("F", 0, 0), ("B", 0, 0)]
    order = pipeline.stage_order(2, 4, 2, 0)
    assert order[:5] == [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1), ("F", 2, 0)]
    # the first backward: the last chunk of micro-batch 0
    assert order[5] == ("B", 0, 1)
    assert sorted(order) == sorted([(k, mb, c) for k in "FB" for mb in range(4) for c in range(2)])
    with pytest.raises(ValueError, match="divisible by p"):
        theory.schedule(4, 6, 2)


@pytest.mark.parametrize(
    "p,v,m", [(4, 1, 8), (4, 1, 2), (4, 2, 8), (4, 2, 4), (2, 3, 4), (4, 3, 12)]
)
def test_peak_in_flight_is_layers_in_flight(p, v, m):
    """The schedule's peak of forwards without their backward, × layers per chunk, is theory's
    layers_in_flight: on stage 0, L·(1 + (p−1)/(p·v)) for interleaving (Narayanan et al. 2021
    §2.2.2)."""
    cfg = presets.get("gpt-350m").replace(layers=24, gpus=p, pp=p, vpp=v, mbs=1, gbs=m)
    for s in range(p):
        held = peak = 0
        for kind, _, _ in pipeline.stage_order(p, m, v, s):
            held += 1 if kind == "F" else -1
            peak = max(peak, held)
        assert peak * cfg.layers / (p * v) == pytest.approx(theory.layers_in_flight(cfg, s))


def test_memory_per_stage():
    """The first stage holds the most micro-batches and the embedding; the last the output layer;
    the largest row is what theory.memory reports."""
    cfg = presets.get("gpt-350m").replace(tied_embeddings=False, gpus=4, pp=4, mbs=4, gbs=16)
    rows = theory.memory_per_stage(cfg)
    assert [r["stage"] for r in rows] == [0, 1, 2, 3]
    assert [r["layers_in_flight"] for r in rows] == [24, 18, 12, 6]
    assert rows[0]["weights"] > rows[1]["weights"] == rows[2]["weights"] < rows[3]["weights"]
    assert max(r["total"] for r in rows) == pytest.approx(theory.memory(cfg)["total"])
