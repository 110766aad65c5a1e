"""megalab.records.routing reads the tokens per expert an MoE run recorded (routing.json); checked
on a synthetic record and on the recorded EP 2 runs of chapter 06 (auxiliary loss, forced balance,
none)."""

import pytest

import megalab
from megalab.book import chapters
from megalab.records import routing


def _record(tokens, ratios):
    return {
        "label": "x",
        "routing": {"warmup_steps": 3, "tokens_per_expert": tokens, "max_over_mean": ratios},
    }


def test_load_is_tokens_over_the_layer_mean():
    rec = _record([[2, 2, 2, 2], [8, 0, 0, 0]], [[1.0, 4.0], [1.0, 4.0]])
    load = routing.load(rec)
    assert (
        list(load.index) == [1, 2] and load.loc[1].tolist() == [1.0] * 4 and load.loc[2, 0] == 4.0
    )
    assert routing.summary(rec) == {
        "max_load": 4.0,
        "mean_max_load": 2.5,
        "min_load": 0.0,
        "last_step_max": 4.0,
    }
    assert routing.imbalance(rec).shape == (2, 2) and list(routing.imbalance(rec).columns) == [1, 2]


def test_a_record_without_counts_says_so():
    with pytest.raises(routing.NoRouting, match="kept no routing counts"):
        routing.counts({"label": "dense"})


def test_the_recorded_policies_differ_as_measured():
    """Forced balance keeps every expert near the mean; with or without the auxiliary loss the
    router collapses onto one expert per layer (top-8 of 64: a load of 8 is every token)."""
    two = chapters.runs("ch06", 2)["layouts"][2]
    recs = {"aux": two["ep"][0], **two["routing"]}
    s = {k: routing.summary(megalab.run(c, "cached", quiet=True).record) for k, c in recs.items()}
    assert s["force"]["max_load"] < 1.05 < s["aux"]["max_load"]
    assert s["none"]["last_step_max"] > 7.5 and s["aux"]["last_step_max"] > 7.5
    counts = routing.counts(megalab.run(recs["force"], "cached", quiet=True).record)
    assert counts.shape == (16, 64)
    # every layer routes the same token copies: tokens x top-k
    assert counts.sum(axis=1).nunique() == 1
