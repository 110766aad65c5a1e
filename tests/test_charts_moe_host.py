"""charts.moe_host: wall time against GPU-busy time, and step time and MFU against the micro-batch
size."""

import pandas as pd
import plotly.graph_objects as go

from megalab.charts import moe_host


def test_busy_vs_wall_two_panels():
    df = pd.DataFrame(
        {
            "label": ["MoE, before", "MoE, after"],
            "wall_s": [1.9, 1.2],
            "busy_s": [0.37, 0.24],
            "busy_frac": [0.37 / 1.9, 0.2],
            "kernels": [34000, 11000],
        }
    )
    fig = moe_host.busy_vs_wall(df)
    assert isinstance(fig, go.Figure)
    assert [t.name for t in fig.data] == [
        "wall time (unprofiled run)",
        "GPU busy (profiled step)",
        "kernels",
    ]
    assert list(fig.data[1].text) == ["19% busy", "20% busy"]
    assert fig.data[2].xaxis == "x2" and list(fig.data[2].y) == [34000, 11000]


def test_micro_batch_sweep_measured_predicted_and_yours():
    rows = [
        dict(
            model=m,
            mbs=b,
            step_time_s=t,
            mfu=0.1 / t,
            predicted_s=t * 0.9,
            predicted_mfu=0.11 / t,
            source="reference",
        )
        for m, ts in (("MoE", (1.2, 0.7, 0.4)), ("dense", (0.27, 0.15, 0.14)))
        for b, t in zip((1, 2, 4), ts)
    ]
    rows.append(dict(model="MoE", mbs=2, step_time_s=0.71, mfu=0.14, source="yours"))
    fig = moe_host.micro_batch_sweep(pd.DataFrame(rows))
    names = [t.name for t in fig.data]
    assert names[:3] == ["MoE, predicted", "MoE, measured", "MoE, measured (yours)"]
    assert "dense, predicted" in names and "dense, measured" in names
    moe = fig.data[1]
    assert list(moe.x) == [1, 2, 4] and list(moe.y) == [1.2, 0.7, 0.4]  # yours kept apart
    assert fig.data[0].line.dash == "dash"
    # one legend entry per line, not per panel
    assert sum(t.showlegend is not False for t in fig.data) == 5
    assert fig.layout.yaxis2.tickformat == ".0%"
