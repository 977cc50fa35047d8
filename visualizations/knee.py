"""Sweeps of forward time: the knee (time vs tokens per pass) and time vs batch size.

Each row is one measured configuration:
    {"batch": int, "q": int, "seconds": float, "memory_floor_s": float,
     "compute_floor_s": float, "bound": str, "label": str (optional, e.g. "eager" / "fast")}
The floors are the time to stream the bytes at peak bandwidth and to do the FLOPs at peak
compute; no pass can be faster than the larger one (the shaded region is out of reach).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go

from .colors import BLACK, BLUE, BLUISH_GREEN, GREY, REDDISH_PURPLE, SKY_BLUE, VERMILLION
from .layout import FONT_SIZE, LEGEND_BELOW, empty_figure, log_ticks, style

CURVE_COLORS = (BLACK, BLUISH_GREEN, REDDISH_PURPLE, SKY_BLUE, GREY)
MEMORY_FLOOR_COLOR, COMPUTE_FLOOR_COLOR = BLUE, VERMILLION


def _groups(rows: list[dict], key: str) -> dict[tuple, list[dict]]:
    """Rows grouped by (label, value of `key`), in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row.get("label", ""), row[key]), []).append(row)
    return groups


def _curve_name(label: str, fixed: str, value, several: bool) -> str:
    parts = [label] if label else []
    if several:
        parts.append(f"{fixed}={value}")
    return "measured" + (f" ({', '.join(parts)})" if parts else "")


def _measured_trace(group: list[dict], x_key: str, name: str, color: str) -> go.Scatter:
    t1 = group[0]["seconds"]  # the smallest x of the group (1 when the sweep starts there)
    x1 = group[0][x_key]
    return go.Scatter(
        x=[r[x_key] for r in group], y=[r["seconds"] * 1e3 for r in group],
        mode="lines+markers", name=name, line=dict(color=color, width=3),
        marker=dict(size=10), meta={"role": "measured"},
        customdata=[[r["seconds"] / t1, r.get("bound", "") or "—",
                     r["memory_floor_s"] * 1e3, r["compute_floor_s"] * 1e3] for r in group],
        hovertemplate=(f"{x_key}=%{{x}}<br>%{{y:.2f}} ms<br>t({x_key})/t({x1}) = "
                       "%{customdata[0]:.2f}×<br>bound: %{customdata[1]}<br>floors: memory "
                       "%{customdata[2]:.3f} ms, compute %{customdata[3]:.3f} ms<extra></extra>"))


def _floor_traces(group: list[dict], x_key: str, suffix: str) -> list[go.Scatter]:
    """Memory floor, compute floor, and max(floors) shaded down to the axis."""
    xs = [r[x_key] for r in group]
    mem = [r["memory_floor_s"] * 1e3 for r in group]
    comp = [r["compute_floor_s"] * 1e3 for r in group]
    top = [max(m, c) for m, c in zip(mem, comp)]
    positive = [v for v in mem + comp if v > 0]
    bottom = min(positive) / 1.5 if positive else 1e-3
    line = dict(width=2, dash="dash")
    return [
        go.Scatter(x=xs, y=[bottom] * len(xs), mode="lines", line=dict(width=0),
                   showlegend=False, hoverinfo="skip", meta={"role": "shade-base"}),
        go.Scatter(x=xs, y=top, mode="lines", fill="tonexty", line=dict(width=0),
                   fillcolor="rgba(127,127,127,0.15)", name="out of reach: below max(floors)",
                   hoverinfo="skip", meta={"role": "shade"}),
        go.Scatter(x=xs, y=mem, mode="lines", name="memory floor" + suffix,
                   line=dict(color=MEMORY_FLOOR_COLOR, **line), meta={"role": "memory_floor"},
                   hovertemplate="memory floor %{y:.3f} ms<extra></extra>"),
        go.Scatter(x=xs, y=comp, mode="lines", name="compute floor" + suffix,
                   line=dict(color=COMPUTE_FLOOR_COLOR, **line), meta={"role": "compute_floor"},
                   hovertemplate="compute floor %{y:.3f} ms<extra></extra>"),
    ]


def floors_cross(group: list[dict], x_key: str) -> float | None:
    """Where the compute floor overtakes the memory floor (log-log interpolation between
    the two measured x values that bracket it), or None when it does not within the sweep."""
    pts = [(r[x_key], r["memory_floor_s"], r["compute_floor_s"]) for r in group
           if r[x_key] > 0 and r["memory_floor_s"] > 0 and r["compute_floor_s"] > 0]
    for (x0, m0, c0), (x1, m1, c1) in zip(pts, pts[1:]):
        d0, d1 = math.log(c0 / m0), math.log(c1 / m1)
        if d0 < 0 <= d1 and x1 > x0:
            return math.exp(math.log(x0) + (math.log(x1) - math.log(x0)) * d0 / (d0 - d1))
    return None


def _floor_groups(rows: list[dict], fixed: str, x_key: str) -> dict:
    """One set of floors per value of the fixed variable (floors do not depend on the label)."""
    by_fixed: dict = {}
    for row in sorted(rows, key=lambda r: r[x_key]):
        by_fixed.setdefault(row[fixed], {}).setdefault(row[x_key], row)
    return {k: list(v.values()) for k, v in by_fixed.items()}


def _mark_crossing(fig: go.Figure, cross: float, x_key: str) -> None:
    """A dotted vertical line where the floors cross. On a log axis a shape takes the data
    value but an annotation takes its log10 (plotly.py issue #4012)."""
    fig.add_shape(type="line", x0=cross, x1=cross, xref="x", y0=0, y1=1, yref="paper",
                  line=dict(color=GREY, dash="dot", width=2))
    fig.add_annotation(x=math.log10(cross), xref="x", y=0.02, yref="paper", yanchor="bottom",
                       xanchor="left",
                       text=f"floors cross at {x_key} ≈ {cross:,.0f}", showarrow=False,
                       font=dict(size=FONT_SIZE - 2, color=GREY))


def _sweep_figure(rows: list[dict], x_key: str, fixed: str, title: str, x_title: str) -> go.Figure:
    if not rows:
        return empty_figure(title, "no measurements yet")
    fig = go.Figure()
    floor_groups = _floor_groups(rows, fixed, x_key)
    several = len(floor_groups) > 1
    for value, group in floor_groups.items():
        for trace in _floor_traces(group, x_key, f" ({fixed}={value})" if several else ""):
            fig.add_trace(trace)
        cross = floors_cross(group, x_key)
        if cross is not None:
            _mark_crossing(fig, cross, x_key)
    for i, ((label, value), group) in enumerate(_groups(rows, fixed).items()):
        group = sorted(group, key=lambda r: r[x_key])
        name = _curve_name(label, fixed, value, several)
        fig.add_trace(_measured_trace(group, x_key, name, CURVE_COLORS[i % len(CURVE_COLORS)]))
    # Labelled ticks per decade (1-2-5 over a short range), never plotly's small minor labels.
    xs = [v for t in fig.data for v in t.x if v and v > 0]
    ys = [v for t in fig.data for v in t.y if v and v > 0]
    fig.update_xaxes(type="log", title_text=x_title, **log_ticks(min(xs), max(xs)))
    fig.update_yaxes(type="log", title_text="time per forward pass (ms)",
                     **log_ticks(min(ys), max(ys)))
    return style(fig, title, height=540, legend=LEGEND_BELOW)


KNEE_TITLE = "The knee: time per forward vs tokens per pass"


def knee_figure(rows: list[dict], *, title: str = KNEE_TITLE) -> go.Figure:
    """Measured time per forward (ms) against tokens per pass q (log-log), one curve per
    label (and per batch when several), with memory and compute floors; hover gives t(q)/t(1)."""
    return _sweep_figure(rows, "q", "batch", title, "tokens per pass q (log scale)")


def batch_figure(rows: list[dict], *, title: str = "Time per forward vs batch size") -> go.Figure:
    """Measured time per forward (ms) against batch size at fixed q (log-log), with floors;
    hover gives t(b)/t(smallest b)."""
    return _sweep_figure(rows, "batch", "q", title, "batch size (log scale)")
