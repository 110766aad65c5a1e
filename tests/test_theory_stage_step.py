"""theory.stage_step: a pipeline's step from one stage's measured step, the 1F1B bubble added."""

import pytest

from megalab import theory
from megalab.theory.stage_step import best_microbatches, pipeline_step_from_stage


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 3, 8])
def test_matches_the_ideal_1f1b_schedule(p, m):
    """Narayanan et al. 2021 §2.2.1: 1F1B takes (m + p − 1)·(t_f + t_b). A stage alone runs m·(t_f +
    t_b)."""
    tf, tb = 0.4, 0.9
    span = max(t["end"] for t in theory.schedule(p, m, tf=tf, tb=tb))
    assert pipeline_step_from_stage(m * (tf + tb), p, m) == pytest.approx(span)


@pytest.mark.parametrize("p, v", [(2, 2), (4, 2), (4, 3)])
def test_matches_the_ideal_interleaved_schedule(p, v):
    """§2.2.2: with v chunks per GPU the bubble is (p − 1)/(v·m) of the ideal step."""
    m = 2 * p
    tasks = theory.schedule(p, m, v, tf=1.0 / v, tb=2.0 / v)
    assert pipeline_step_from_stage(m * 3.0, p, m, v) == pytest.approx(max(t["end"] for t in tasks))
    assert pipeline_step_from_stage(1.0, p, m, v) - 1 == pytest.approx(
        theory.bubble_over_ideal(p, m, v)
    )


def test_one_stage_has_no_bubble():
    assert pipeline_step_from_stage(0.5, 1, 4) == 0.5
    with pytest.raises(ValueError):
        pipeline_step_from_stage(0.5, 2, 0)


def test_best_m_balances_the_bubble_against_the_cost_of_small_micro_batches():
    """Free micro-batches: the most wins (the formula's advice). A fixed cost per micro-batch: an
    interior m."""
    free = {m: 1.0 for m in (1, 2, 4, 8)}
    assert best_microbatches(free, p=2) == 8
    overhead = {m: 1.0 + 0.2 * m for m in (1, 2, 4, 8)}  # 1 s of work, 0.2 s per micro-batch
    # p = 2: m=1: 2.4, m=2: 2.1, m=4: 2.25, m=8: 2.925
    assert best_microbatches(overhead, p=2) == 2
    # p = 8: 9.6, 6.3, 4.95, 4.875: a deeper pipeline asks for more
    assert best_microbatches(overhead, p=8) == 8
    with pytest.raises(ValueError):
        best_microbatches({}, p=2)
