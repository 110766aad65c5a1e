"""charts: every function returns a Figure whose traces and axis titles say what they show."""
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from megalab import charts


def _nccl():
    rows = []
    for op in ("all_reduce", "all_gather"):
        for gpus in (2, 4):
            for p in range(10, 31, 4):
                size = 1 << p
                rows.append({"op": op, "gpus": gpus, "size_bytes": size,
                             "busbw_gbs": 300 * size / (size + 2**22), "source": "reference"})
    return pd.DataFrame(rows)


def test_memory_breakdown_stacks_prediction_beside_measurement():
    pred = {"weights": 2.0, "grads": 2.0, "optimizer": 12.0, "activations": 5.0, "total": 21.0}
    fig = charts.memory_breakdown(pred, {"allocated": 20.1}, capacity_gib=80)
    assert isinstance(fig, go.Figure)
    assert [t.name for t in fig.data] == ["weights", "grads", "optimizer", "activations", "measured allocated"]
    assert fig.layout.barmode == "stack"
    assert fig.layout.yaxis.title.text == "GiB per GPU"
    assert fig.layout.shapes[0].y0 == 80


def test_step_time_breakdown_has_three_parts():
    fig = charts.step_time_breakdown({"pp4": {"compute_s": 1.0, "bubble_s": 0.3, "comm_s": 0.1}})
    assert [t.name for t in fig.data] == ["compute", "bubble", "comm"]
    assert fig.data[1].x == (0.3,)


def test_scaling_ideal_line_and_efficiency():
    df = pd.DataFrame({"gpus": [1, 2, 4], "tokens_per_s": [100.0, 190.0, 360.0]})
    fig = charts.scaling(df, kind="strong")
    ideal = next(t for t in fig.data if t.name == "ideal (linear)")
    assert list(ideal.y) == [100.0, 200.0, 400.0]
    eff = next(t for t in fig.data if t.name == "efficiency (reference)")
    assert list(eff.y) == pytest.approx([1.0, 0.95, 0.9])
    assert fig.layout.yaxis2.title.text == "efficiency"
    with pytest.raises(ValueError):
        charts.scaling(df, kind="sideways")


def test_loss_parity_band_around_reference():
    s = {"step": [0, 1, 2], "loss": [10.0, 9.0, 8.0]}
    fig = charts.loss_parity({"dp4": s, "tp2": s}, band=0.05)
    assert [t.name for t in fig.data] == ["±0.05 around dp4", "dp4", "tp2"]
    assert max(fig.data[0].y) == pytest.approx(10.05)


def test_bandwidth_vs_size_log_log_with_peak_and_regions():
    fig = charts.bandwidth_vs_size(_nccl())
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert {t.name for t in fig.data} == {"2 GPUs (reference)", "4 GPUs (reference)"}
    assert len(fig.data) == 4   # 2 ops x 2 GPU counts
    assert any("peak" in a.text for a in fig.layout.annotations)
    assert any(a.text == "latency-bound" for a in fig.layout.annotations)


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


def test_renderer_emits_html_without_plotlyjs_and_the_mime_type():
    charts.setup_notebook()
    try:
        bundle = go.Figure(go.Scatter(x=[1], y=[2]))._repr_mimebundle_()
    finally:
        pio.renderers.default = "plotly_mimetype"
    assert "application/vnd.plotly.v1+json" in bundle
    html = bundle["text/html"]
    assert "Plotly.newPlot" in html and "plotly.js v" not in html and len(html) < 50_000


def test_roofline_ridge_point():
    fig = charts.roofline(989.0, 4.8)
    y = list(fig.data[0].y)
    assert max(y) == 989.0 and min(y) < 989.0
    assert fig.layout.shapes[0].x0 == pytest.approx(989.0 / 4.8)
    assert fig.layout.xaxis.type == "log"


def test_metric_vs_one_line_per_group_and_peer_stars():
    df = pd.DataFrame({"mbs": [1, 2, 4, 4], "mfu": [0.2, 0.3, 0.45, 0.44], "dropout": [0.0, 0.0, 0.0, 0.1]})
    fig = charts.metric_vs(df, "mbs", "mfu", by="dropout", peer={4: 0.45}, peer_name="Megatron-LM")
    assert [t.name for t in fig.data] == ["dropout = 0.0", "dropout = 0.1", "Megatron-LM"]
    assert list(fig.data[0].x) == [1, 2, 4] and fig.data[2].marker.symbol == "star"
    assert fig.layout.yaxis.tickformat == ".0%" and fig.layout.xaxis.title.text == "mbs"


def test_distribution_histogram_with_target_line():
    fig = charts.distribution([15.0, 21.0, 25.0], target=20, x_title="seconds")
    assert fig.data[0].type == "histogram" and list(fig.data[0].x) == [15.0, 21.0, 25.0]
    assert fig.layout.shapes[0].x0 == 20 and fig.layout.xaxis.title.text == "seconds"


def test_chapter_charts_return_figures():
    import pandas as pd
    from megalab import charts
    df = pd.DataFrame({"tp": [1, 2, 1, 2], "GiB": [37.6, 21.5, 37.9, 21.3], "kind": ["measured"] * 2 + ["predicted"] * 2})
    fig = charts.grouped_bars(df, "tp", "GiB", color="kind")
    assert [t.name for t in fig.data] == ["measured", "predicted"]
    profile = {"timeline": {"columns": ["category", "start_ms", "duration_ms", "stream"],
                            "kernels": [["gemm", 0.0, 1.0, 7], ["nccl", 1.0, 0.5, 23], ["gemm", 1.5, 1.0, 7]]}}
    fig = charts.kernel_timeline(profile)
    assert {t.name for t in fig.data} == {"gemm", "nccl"}
    assert list(fig.data[0].base) == [0.0, 1.5]
    recs = [{"config": {"gpus": 1, "gbs": 16}, "series": {"step_time_s": [9.0, 9.0, 9.0, 0.8, 0.9]}, "tags": []},
            {"config": {"gpus": 1, "gbs": 16}, "series": {"step_time_s": [9.0, 9.0, 9.0, 0.7, None]}, "tags": ["packed"]}]
    fig = charts.step_time_spread(recs)
    assert list(fig.data[0].y) == [0.8, 0.9] and list(fig.data[1].y) == [0.7]   # warm-up steps dropped
