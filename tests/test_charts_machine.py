"""charts.machine: matmul, HBM and NCCL bandwidth against size, and the roofline."""

import pandas as pd
import pytest

from megalab import charts


def _nccl():
    rows = []
    for op in ("all_reduce", "all_gather"):
        for gpus in (2, 4):
            for p in range(10, 31, 4):
                size = 1 << p
                rows.append(
                    {
                        "op": op,
                        "gpus": gpus,
                        "size_bytes": size,
                        "busbw_gbs": 300 * size / (size + 2**22),
                        "source": "reference",
                    }
                )
    return pd.DataFrame(rows)


def test_bandwidth_vs_size_log_log_with_peak_and_regions():
    fig = charts.bandwidth_vs_size(_nccl())
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert {t.name for t in fig.data} == {"2 GPUs (reference)", "4 GPUs (reference)"}
    assert len(fig.data) == 4  # 2 ops x 2 GPU counts
    assert any("peak" in a.text for a in fig.layout.annotations)
    # n½ named
    assert any(a.text.startswith("latency-bound:<br>below n½ = ") for a in fig.layout.annotations)
    peak = next(a for a in fig.layout.annotations if a.text.startswith("peak"))
    # below the curves' flat end, not over them
    assert peak.ay > 0 and peak.ax == 0
    # words, not column names
    assert {"all-reduce", "all-gather"} <= {a.text for a in fig.layout.annotations}
    assert fig.layout.yaxis.title.text == "bus bandwidth (GB/s)"


def test_yours_get_their_own_marker():
    df = _nccl()
    mine = df[df["gpus"] == 2].assign(source="yours")
    fig = charts.bandwidth_vs_size(pd.concat([df, mine]))
    symbols = {t.marker.symbol for t in fig.data}
    assert symbols == {charts.SYMBOLS["reference"], charts.SYMBOLS["yours"]}


def test_half_bandwidth_size():
    assert charts.half_bandwidth_size([1, 10, 100], [1.0, 6.0, 10.0]) == 10
    assert charts.half_bandwidth_size([], []) is None


def test_matmul_and_hbm_peak_lines():
    mm = pd.DataFrame({"n": [1024, 8192], "tflops": [300.0, 700.0], "dtype": ["bf16", "bf16"]})
    fig = charts.matmul_vs_size(mm, peak=989)
    assert fig.layout.yaxis.title.text == "TFLOP/s" and fig.layout.shapes[0].y0 == 989
    hbm = pd.DataFrame({"size_bytes": [1 << 24, 1 << 30], "gbs": [2000.0, 4000.0]})
    fig = charts.hbm_vs_size(hbm, peak_tbs=4.8)
    assert list(fig.data[0].y) == [2.0, 4.0]


def test_roofline_ridge_point():
    fig = charts.roofline(989.0, 4.8)
    y = list(fig.data[0].y)
    assert max(y) == 989.0 and min(y) < 989.0
    assert fig.layout.shapes[0].x0 == pytest.approx(989.0 / 4.8)
    assert fig.layout.xaxis.type == "log"
