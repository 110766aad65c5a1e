"""Choices side by side: bars of one metric per choice, a ratio against 1 with its spread, and the
trade-off between two metrics with its Pareto frontier."""

from __future__ import annotations

import re

import plotly.graph_objects as go

from megalab.charts._style import PALETTE, SYMBOLS, _figure, _split_yours, _yours


PERCENT = ("mfu", "efficiency")  # columns of shares drawn on a percent axis
# about the characters of tick text the category axis holds at a 1000 px window
AXIS_CHARACTERS = 84


def _wrap_label(text: str, width: int) -> str:
    """`text` broken at spaces into lines of at most `width` characters (a longer word stays whole),
    joined by plotly's <br>."""
    import textwrap

    return "<br>".join(
        textwrap.wrap(str(text), width=max(width, 1), break_long_words=False)
    ) or str(text)


def _is_percent(y: str, y_title: str | None) -> bool:
    """Whether the bars are a share: `y` in PERCENT, or a y_title in % or "percent" (a "95%
    interval" is a confidence level, not the unit)."""
    title = re.sub(r"\d+\s*%\s*(confidence\s*)?interval", "", y_title or "")
    return y in PERCENT or "%" in title or "percent" in title.lower()


def _integers(values) -> bool:
    import math

    vals = [v for v in values if v is not None and v == v]
    return bool(vals) and all(
        isinstance(v, (int, float)) and math.isfinite(v) and float(v).is_integer() for v in vals
    )


def grouped_bars(
    df,
    x: str,
    y: str,
    color: str | None = None,
    title: str | None = None,
    y_title: str | None = None,
    text_format: str = ".3g",
    interval: tuple[str, str] | None = None,
) -> go.Figure:
    """Bars of `y` for each value of `x`, one colour per value of `color` (e.g. predicted /
    measured); `interval` (lo, hi: columns) draws each bar's interval, a median's 95% one, say. Rows
    whose `source` is "yours" (a reader's own runs) stand beside the book's as hatched bars of the
    same colour, named "... (yours)". Category labels wrap onto lines (_wrap_label) so that none is
    cut at 1000 px; a share (PERCENT, or a y_title with %) reads in percent on the axis and the
    bars; whole numbers (micro-batches) read as integers, also on a log axis; other values with
    `text_format`."""
    labels = list(dict.fromkeys(df[x].astype(str)))
    width = max(8, AXIS_CHARACTERS // max(1, len(labels)))
    wrapped = {v: _wrap_label(v, width) for v in labels}
    percent, whole = _is_percent(y, y_title), _integers(df[y].tolist())
    fmt = text_format if text_format != ".3g" else ".0%" if percent else ",d" if whole else ".3~g"
    fig = _figure(
        title or f"{y} by {x}",
        barmode="group",
        xaxis_title=x,
        yaxis_title=y_title or y,
        xaxis_type="category",
    )
    groups = [(None, df)] if color is None else list(df.groupby(color, sort=False))
    for i, (value, part) in enumerate(groups):
        name, book, mine = (str(value) if color else y), *_split_yours(part)
        style = dict(
            marker_color=PALETTE[i % len(PALETTE)],
            texttemplate=f"%{{y:{fmt}}}",
            # an interval's whisker would cross a label above the bar
            textposition="inside" if interval else "outside",
            cliponaxis=False,
        )
        if interval:  # mid-bar, clear of the whisker at its top
            style["insidetextanchor"] = "middle"
        if len(book) or not len(mine):
            fig.add_bar(x=book[x].astype(str).map(wrapped), y=book[y], name=name, **style)
            if interval:
                fig.data[-1].error_y = _error(book, y, *interval)
        if len(mine):
            fig.add_bar(
                x=mine[x].astype(str).map(wrapped),
                y=mine[y],
                name=_yours(name),
                marker_pattern_shape="x",
                **style,
            )
    fig.update_xaxes(
        categoryorder="array",
        categoryarray=[wrapped[v] for v in labels],
        tickangle=0,
        automargin=True,
    )
    fig.update_yaxes(automargin=True)
    if percent:
        fig.update_yaxes(tickformat=".0%")
    elif whole:
        # 7 and 59, not 7.00 and 59.0, also when made a log axis
        fig.update_yaxes(tickformat=",~r")
    return fig


def _error(df, y: str, lo: str, hi: str) -> dict:
    """Plotly error bars from the columns `lo` and `hi` around `y`."""
    return dict(
        type="data",
        symmetric=False,
        array=(df[hi] - df[y]).tolist(),
        arrayminus=(df[y] - df[lo]).tolist(),
        color="#444",
        thickness=1.2,
        width=4,
    )


def ratio_bars(
    df,
    x: str,
    ratio: str = "ratio",
    lo: str = "ratio_lo",
    hi: str = "ratio_hi",
    title: str | None = None,
    y_title: str | None = None,
    parity_name: str = "equal",
    group: str | None = None,
) -> go.Figure:
    """One bar per row: `ratio` (e.g. our step time over the peer's) with an error bar from `lo` to
    `hi`, and a dashed line at 1 (`parity_name`). Bars above 1 are drawn in the second colour:
    there, we are behind. With `group` (e.g. the host sitting a pair of runs came from), the rows of
    each group value are a trace of their own, side by side under each `x`, one colour per group;
    bars above 1 are then hatched."""
    fig = _figure(
        title or f"{ratio} by {x}",
        xaxis_title=x,
        yaxis_title=y_title or ratio,
        xaxis_type="category",
        **({"barmode": "group"} if group else {}),
    )
    for i, (name, part) in enumerate(
        [(None, df)] if group is None else df.groupby(group, sort=False)
    ):
        above = part[ratio] > 1
        style = (
            dict(marker_color=[PALETTE[1] if a else PALETTE[0] for a in above], showlegend=False)
            if group is None
            else dict(
                marker_color=PALETTE[i % len(PALETTE)],
                name=str(name),
                marker_pattern_shape=["/" if a else "" for a in above],
            )
        )
        fig.add_bar(
            x=part[x].astype(str),
            y=part[ratio],
            texttemplate="%{y:.2f}",
            textposition="inside",
            error_y=dict(
                type="data",
                symmetric=False,
                array=part[hi] - part[ratio],
                arrayminus=part[ratio] - part[lo],
            ),
            **style,
        )
    fig.add_hline(
        y=1,
        line_dash="dash",
        line_color=PALETTE[7],
        annotation_text=parity_name,
        annotation_position="top left",
    )
    return fig


def frontier(
    df,
    x: str,
    y: str,
    label: str,
    maximize: tuple[str, ...] = (),
    title: str | None = None,
    x_title: str | None = None,
    y_title: str | None = None,
) -> go.Figure:
    """Trade-off scatter, one point per choice (a row of `df`, named by its `label` column), e.g.
    step time against peak memory per recompute setting. Lower is better on both axes unless the
    column is named in `maximize`; the Pareto frontier (the choices no other beats on both) is drawn
    as a line, and the choices off it are grey. Rows whose `source` is "yours" (a reader's own runs)
    are drawn apart, open diamonds with their own frontier, named "... (yours)"."""
    fig = _figure(title or f"{y} against {x}", xaxis_title=x_title or x, yaxis_title=y_title or y)
    book, mine = _split_yours(df)
    _choices(
        fig,
        book,
        x,
        y,
        label,
        maximize,
        "choices",
        "Pareto frontier",
        PALETTE[0],
        dict(dash="dash"),
    )
    if len(mine):
        _choices(
            fig,
            mine,
            x,
            y,
            label,
            maximize,
            _yours("choices"),
            _yours("Pareto frontier"),
            PALETTE[1],
            dict(dash="dot"),
            symbol=SYMBOLS["yours"],
        )
    return fig


def _choices(
    fig, df, x, y, label, maximize, name, frontier_name, colour, line, symbol=None
) -> None:
    """The choices of `df` as labelled points (off-frontier ones grey) and their Pareto frontier as
    a line."""
    best = _pareto(df, x, y, maximize)
    on = df.index.isin(best.index)
    marker = dict(size=11, color=[colour if o else "#aaaaaa" for o in on])
    if symbol:
        marker["symbol"] = symbol
    fig.add_scatter(
        x=df[x],
        y=df[y],
        mode="markers+text",
        name=name,
        text=df[label].astype(str),
        textposition="top center",
        hovertemplate="%{text}: %{x:.3g}, %{y:.3g}<extra></extra>",
        marker=marker,
    )
    fig.add_scatter(
        x=best[x],
        y=best[y],
        mode="lines",
        name=frontier_name,
        line=dict(color=colour, **line),
        hoverinfo="skip",
    )


def _pareto(df, x: str, y: str, maximize: tuple[str, ...]):
    """The rows of `df` no other row beats on both x and y, ordered along x (better x first)."""
    sx, sy = (-1 if x in maximize else 1), (-1 if y in maximize else 1)
    ranked = df.assign(_x=sx * df[x], _y=sy * df[y]).sort_values(["_x", "_y"], kind="stable")
    keep, best_y = [], float("inf")
    for index, value in ranked["_y"].items():
        if value < best_y:
            keep.append(index)
            best_y = value
    return df.loc[keep]
