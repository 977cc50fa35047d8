"""Shared figure styling: large fonts and a white template, for projecting in a classroom."""
from __future__ import annotations

import plotly.graph_objects as go

FONT_SIZE = 18
TEMPLATE = "plotly_white"


# Where legends go: above the plot (short legends), below the x-axis title (long ones), or
# inside the plot's top-left corner (rooflines, where that corner is out of reach anyway).
LEGEND_TOP = dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0)
LEGEND_BELOW = dict(orientation="h", yanchor="top", y=-0.28, xanchor="left", x=0)
LEGEND_INSIDE = dict(orientation="v", yanchor="top", y=0.99, xanchor="left", x=0.01,
                     bgcolor="rgba(255,255,255,0.85)", bordercolor="#ccc", borderwidth=1)


def style(fig: go.Figure, title: str, *, height: int = 480, legend: dict = LEGEND_TOP) -> go.Figure:
    """Apply the lab's common look: title, large fonts, white template, placed legend."""
    below = legend == LEGEND_BELOW
    fig.update_layout(
        title=dict(text=title, font=dict(size=FONT_SIZE + 4), y=0.97, yanchor="top"),
        template=TEMPLATE,
        font=dict(size=FONT_SIZE),
        height=height + (80 if below else 0),
        margin=dict(l=80, r=40, t=120, b=170 if below else 70),
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
