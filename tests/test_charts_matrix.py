"""charts.matrix: a matrix as coloured cells."""

import pandas as pd
import plotly.graph_objects as go

from megalab import charts


def test_heatmap_from_a_dataframe_labels_cells_and_centres_the_scale():
    tokens = pd.DataFrame(
        [[100, 140, 60, 100], [90, 110, 120, 80]], index=[0, 1], columns=[0, 1, 2, 3]
    )
    fig = charts.heatmap(tokens, "expert", "layer", center=100, text_format=".0f", z_title="tokens")
    assert isinstance(fig, go.Figure) and [t.type for t in fig.data] == ["heatmap"]
    h = fig.data[0]
    assert list(h.x) == ["0", "1", "2", "3"] and list(h.y) == ["0", "1"]
    assert [list(r) for r in h.z] == [[100, 140, 60, 100], [90, 110, 120, 80]]
    assert h.zmid == 100 and h.texttemplate == "%{z:.0f}"
    assert fig.layout.xaxis.title.text == "expert" and fig.layout.yaxis.autorange == "reversed"


def test_heatmap_from_lists_is_numbered_from_zero():
    fig = charts.heatmap([[1.0, 2.0, 3.0]], "x", "y")
    assert list(fig.data[0].x) == ["0", "1", "2"] and list(fig.data[0].y) == ["0"]
    assert fig.data[0].zmid is None and fig.data[0].texttemplate is None
