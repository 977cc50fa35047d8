"""Shared figure styling: large fonts and a white template, for projecting in a classroom."""
from __future__ import annotations

import math
from collections.abc import Callable

import plotly.graph_objects as go

FONT_SIZE = 18
TEMPLATE = "plotly_white"


# Where legends go: above the plot (short legends) or below the x-axis title (long ones); never
# over the data.
LEGEND_TOP = dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0)
LEGEND_BELOW = dict(orientation="h", yanchor="top", y=-0.28, xanchor="left", x=0)


def style(fig: go.Figure, title: str, *, height: int = 480, legend: dict = LEGEND_TOP) -> go.Figure:
    """Apply the lab's common look: title, large fonts, white template, placed legend."""
    below = legend == LEGEND_BELOW
    top = 120 if "<br>" in title or legend == LEGEND_TOP else 90  # room for a subtitle or legend
    total = height + (80 if below else 0)
    fig.update_layout(
        # A fixed 30 px below the top edge whatever the height: plotly lifts a two-line title
        # (<br><sup>) by about a line, which at a fractional y clipped its first line.
        title=dict(text=title, font=dict(size=FONT_SIZE + 4), y=1 - 30 / total, yanchor="top"),
        template=TEMPLATE,
        font=dict(size=FONT_SIZE),
        height=total,
        margin=dict(l=80, r=40, t=top, b=170 if below else 70),
        legend=legend,
        hoverlabel=dict(font_size=FONT_SIZE - 2),
    )
    return fig


def empty_figure(title: str, message: str) -> go.Figure:
    """A figure with no data and a centred message saying why."""
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper",
                       showarrow=False, font=dict(size=FONT_SIZE + 2))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return style(fig, title)


def fmt_prob(x: float | None) -> str:
    """A probability to three decimals, or an em dash when absent."""
    return "—" if x is None else f"{x:.3f}"


SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def tick_label(x: float) -> str:
    """A short tick label: SI prefixes from a thousand up (1k, 10G), plain below (0.1, 5, 100)."""
    for scale, prefix in SI_PREFIXES:
        if abs(x) >= scale:
            return f"{x / scale:g}{prefix}"
    return f"{x:g}"


def log_ticks(lo: float, hi: float, label: Callable[[float], str] = tick_label, *,
              decades_only: bool = False) -> dict:
    """Axis settings for a log axis showing values from lo to hi: one full-size labelled tick
    per decade (1, 10, 100, ...), or 1-2-5 in each decade when lo..hi spans under three decades
    (unless decades_only), so there is never a cluttered small label between decades. Returns
    {} (plotly's own ticks) when fewer than two such ticks fall inside lo..hi, or when lo..hi
    is not a positive range."""
    if not (0 < lo < hi) or not math.isfinite(hi):
        return {}
    mantissas = (1,) if decades_only or math.log10(hi / lo) >= 3 else (1, 2, 5)
    lo_e, hi_e = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    vals = [float(m * 10.0 ** e) for e in range(lo_e, hi_e + 1) for m in mantissas]
    vals = [float(f"{v:.6g}") for v in vals if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
    if len(vals) < 2:
        return {}
    return dict(tickmode="array", tickvals=vals, ticktext=[label(v) for v in vals])


def log_range(lo: float, hi: float) -> list[float]:
    """plotly's range of a log axis (log10 of the ends) for values lo..hi."""
    return [math.log10(lo), math.log10(hi)]


def nice_step(n: int, most: int = 15) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that labels n consecutive integers with at
    most `most` ticks."""
    step = 1
    while math.ceil(n / step) > most:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2
    return step
