"""The tokens each expert received, as an MoE run recorded them (routing.json,
megalab.train.probes.RouterCounts).

Every MoE run's record keeps, per MoE layer, the token copies each expert received over the steps
after the warm-up (summed over the data-parallel ranks: all the tokens of those steps), and per step
and layer the busiest expert's load over the mean (1.0 is perfectly balanced):

    >>> routing.load(record)         # layers × experts: each expert's tokens over the layer's mean
    >>> routing.imbalance(record)    # steps × layers: busiest expert over the mean, each step
    >>> routing.summary(record)      # the numbers a chapter quotes
"""

from __future__ import annotations

__all__ = ["NoRouting", "counts", "load", "imbalance", "summary"]


class NoRouting(KeyError):
    """The record kept no routing counts (not an MoE run, or made before the trainer counted
    them)."""

    def __str__(self) -> str:
        return str(self.args[0])


def _routing(record: dict) -> dict:
    data = (record or {}).get("routing")
    if not data or not data.get("tokens_per_expert"):
        raise NoRouting(
            f"record {record.get('label', '?')!r} kept no routing counts: an MoE run recorded by a "
            f"trainer that counts tokens per expert (megalab.train.probes) has them; re-run it"
        )
    return data


def counts(record: dict):
    """Token copies per expert (columns 0..E-1) and MoE layer (index 1..L, this rank's layers in
    order), summed over the steps after the warm-up."""
    import pandas as pd

    rows = _routing(record)["tokens_per_expert"]
    return pd.DataFrame(rows, index=pd.RangeIndex(1, len(rows) + 1, name="layer")).rename_axis(
        columns="expert"
    )


def load(record: dict):
    """Each expert's tokens over its layer's mean (1.0: the share balanced routing gives every
    expert)."""
    c = counts(record)
    return c.div(c.mean(axis=1), axis=0)


def imbalance(record: dict):
    """Busiest expert's load over the mean, per step (index, from 0, warm-up included) and MoE layer
    (columns)."""
    import pandas as pd

    rows = _routing(record)["max_over_mean"]
    frame = pd.DataFrame(rows, index=pd.RangeIndex(len(rows), name="step"))
    return frame.set_axis(range(1, frame.shape[1] + 1), axis=1).rename_axis(columns="layer")


def summary(record: dict) -> dict:
    """max_load: the busiest expert of any layer over its layer's mean, over the measured steps;
    mean_max_load: that busiest-expert ratio averaged over layers; min_load: the least-used
    expert's; last_step_max: the busiest expert over the mean in the last step, worst layer."""
    lo = load(record)
    return {
        "max_load": float(lo.max(axis=1).max()),
        "mean_max_load": float(lo.max(axis=1).mean()),
        "min_load": float(lo.min(axis=1).min()),
        "last_step_max": float(imbalance(record).iloc[-1].max()),
    }
