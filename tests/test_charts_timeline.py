"""charts.timeline: kernels on CUDA streams, Gantt charts of tasks on rows."""

import pandas as pd
import plotly.graph_objects as go

from megalab import charts


def test_kernel_timeline_one_trace_per_kind():
    profile = {
        "timeline": {
            "columns": ["category", "start_ms", "duration_ms", "stream"],
            "kernels": [["gemm", 0.0, 1.0, 7], ["nccl", 1.0, 0.5, 23], ["gemm", 1.5, 1.0, 7]],
        }
    }
    fig = charts.kernel_timeline(profile)
    assert {t.name for t in fig.data} == {"gemm", "nccl"}
    assert list(fig.data[0].base) == [0.0, 1.5]
    worded = charts.kernel_timeline(profile, words=True)
    assert {t.name for t in worded.data} == {"matrix multiplies (GEMM)", "NCCL communication"}


def _gpipe(pp=2, m=3, tf=1.0, tb=2.0):
    """GPipe on `pp` stages, `m` micro-batches: all forwards, then all backwards."""
    fwd = [
        dict(row=s, start_s=(s + i) * tf, end_s=(s + i + 1) * tf, kind="F", label=i)
        for s in range(pp)
        for i in range(m)
    ]
    t0 = (pp + m - 1) * tf
    bwd = [
        dict(
            row=s,
            start_s=t0 + (pp - 1 - s + i) * tb,
            end_s=t0 + (pp - s + i) * tb,
            kind="B",
            label=i,
        )
        for s in range(pp)
        for i in range(m)
    ]
    return fwd + bwd


def test_gantt_bars_per_kind_on_rows():
    fig = charts.gantt(pd.DataFrame(_gpipe()), row_title="stage")
    assert isinstance(fig, go.Figure)
    assert [t.name for t in fig.data] == ["F", "B"]
    f = fig.data[0]
    assert (
        f.orientation == "h"
        and list(f.y[:3]) == ["0", "0", "0"]
        and list(f.text[:3]) == ["0", "1", "2"]
    )
    # x = end - start
    assert list(f.base[:3]) == [0.0, 1.0, 2.0] and list(f.x[:3]) == [1.0, 1.0, 1.0]
    b = fig.data[1]
    assert b.base[list(b.y).index("1")] == max(f.base) + 1.0  # the last stage turns round at once
    assert fig.layout.barmode == "overlay" and fig.layout.yaxis.autorange == "reversed"
    assert (
        list(fig.layout.yaxis.categoryarray) == ["0", "1"]
        and fig.layout.yaxis.title.text == "stage"
    )


def test_gantt_panels_side_by_side_share_colours_and_legend():
    measured = [dict(t, start_s=t["start_s"] * 1.1, end_s=t["end_s"] * 1.1) for t in _gpipe()]
    fig = charts.gantt({"measured": measured, "ideal": _gpipe()})
    assert [(t.name, t.yaxis, t.showlegend) for t in fig.data] == [
        ("F", "y", True),
        ("B", "y", True),
        ("F", "y2", False),
        ("B", "y2", False),
    ]
    assert fig.data[0].marker.color == fig.data[2].marker.color
    assert [a.text for a in fig.layout.annotations] == ["measured", "ideal"]
    assert fig.layout.xaxis2.title.text and fig.layout.xaxis.matches == "x2"  # one time axis


def test_gantt_without_labels_has_no_text():
    tasks = [{"row": "rank 0", "start_s": 0.0, "end_s": 0.5, "kind": "comm"}]
    fig = charts.gantt(tasks, row_title="rank")
    assert fig.data[0].text is None and list(fig.data[0].y) == ["rank 0"]


def test_pipeline_schedule_panels_from_theory():
    from megalab import theory

    fig = charts.pipeline_schedule(
        {"1F1B": theory.schedule(2, 4), "interleaved": theory.schedule(2, 4, 2, 0.5, 1.0)}
    )
    names = [t.name for t in fig.data]
    # 1F1B's one chunk is the others' chunk 0
    assert names[:2] == ["forward, chunk 0", "backward, chunk 0"]
    assert fig.data[0].marker.color == fig.data[names.index("forward, chunk 0", 2)].marker.color
    assert {"forward, chunk 1", "backward, chunk 1"} <= set(names)
    assert [t.name for t in charts.pipeline_schedule({"1F1B": theory.schedule(2, 4)}).data] == [
        "forward",
        "backward",
    ]
    assert list(fig.layout.yaxis.categoryarray) == ["stage 0", "stage 1"]
    first = fig.data[0]
    assert list(first.text[:2]) == ["0", "1"] and first.base[0] == 0.0  # labelled by micro-batch
    assert [a.text for a in fig.layout.annotations] == ["1F1B", "interleaved"]


def test_pipeline_bubble_colour_per_p_dash_per_v_and_measured_markers():
    rows = [
        dict(m=m, p=p, v=v, bubble=(p - 1) / (v * m))
        for p in (2, 4)
        for v in (1, 2)
        for m in (4, 8)
    ]
    rows.append(dict(m=8, p=4, v=1, bubble=0.5, source="measured"))
    fig = charts.pipeline_bubble(pd.DataFrame(rows))
    lines = [t for t in fig.data if t.mode == "lines"]
    assert [t.name for t in lines] == [
        "p = 2, v = 1",
        "p = 2, v = 2",
        "p = 4, v = 1",
        "p = 4, v = 2",
    ]
    assert lines[0].line.color == lines[1].line.color != lines[2].line.color
    assert lines[0].line.dash == lines[2].line.dash == "solid" and lines[1].line.dash == "dash"
    marks = [t for t in fig.data if t.mode == "markers"]
    assert (
        len(marks) == 1
        and list(marks[0].y) == [0.5]
        and marks[0].marker.color == lines[2].line.color
    )
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.tickformat == ".0%"


def test_pipeline_bubble_recorded_and_readers_own_measurements_as_markers():
    rows = [dict(m=m, p=2, v=1, bubble=1 / m, source="predicted") for m in (2, 4, 8)]
    rows += [
        dict(m=4, p=2, v=1, bubble=0.3, source="reference"),
        dict(m=4, p=2, v=1, bubble=0.32, source="yours"),
    ]
    fig = charts.pipeline_bubble(pd.DataFrame(rows))
    assert [t.name for t in fig.data] == [
        "p = 2, v = 1",
        "measured, p = 2, v = 1",
        "measured, p = 2, v = 1 (yours)",
    ]
    line, book, mine = fig.data
    assert line.mode == "lines" and list(book.y) == [0.3] and list(mine.y) == [0.32]
    assert book.marker.symbol == "circle" and mine.marker.symbol == charts.SYMBOLS["yours"]
    assert book.marker.color == mine.marker.color == line.line.color


def test_kernel_timeline_rows_are_stream_kinds_and_the_x_axis_spans_the_step():
    kernels = [
        ["gemm", 2.0, 5.0, 7],
        ["other", 7.0, 1.0, 7],
        ["nccl", 3.0, 2.0, 23],
        ["other", 5.0, 0.1, 23],
        ["gemm", 4.0, 0.5, 430],
        ["nccl", 6.0, 0.1, 430],
        ["copy", 8.0, 1.0, 7],
    ]
    fig = charts.kernel_timeline(
        {
            "timeline": {
                "columns": ["category", "start_ms", "duration_ms", "stream"],
                "kernels": kernels,
            }
        }
    )
    rows = {y for t in fig.data for y in t.y}
    # no raw stream ids
    assert rows == {"main stream", "other streams: NCCL", "other streams: compute"}
    assert list(fig.layout.yaxis.categoryarray) == [
        "main stream",
        "other streams: NCCL",
        "other streams: compute",
    ]
    assert fig.layout.yaxis.automargin and fig.layout.xaxis.automargin
    assert not fig.layout.yaxis.title.text  # the row names say it
    # first kernel at 0, the last one's end
    assert tuple(fig.layout.xaxis.range) == (0, 7.0)
    nccl = next(t for t in fig.data if t.name == "nccl")
    assert (
        list(nccl.base) == [1.0, 4.0]
        and list(nccl.customdata) == [23, 430]
        and "stream" in nccl.hovertemplate
    )
    colours = {t.name: t.marker.color for t in fig.data}
    # fixed per kind
    assert colours["nccl"] == charts.PALETTE[3] and colours["copy"] == charts.PALETTE[4]
