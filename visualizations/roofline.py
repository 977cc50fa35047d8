"""Roofline of the device this run used, with every timed forward pass as a point.

performance = min(peak FLOP/s, intensity x bandwidth) (Williams, Waterman, Patterson 2009).
A point's intensity is flops / bytes of the cost model's estimate; its height is
flops / measured seconds. The plot is shaded by what bounds a pass, as app.roofline.classify
decides it from the measured roof: a pass more than OVERHEAD_FACTOR times slower than its roof
allows sits in the grey "overhead-bound" band below roof / OVERHEAD_FACTOR; above that line it is
"memory-bound" left of the ridge and "compute-bound" right of it. Each point is coloured by the
class the run gave it (its `bound`), its symbol says its phase.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go

from app.trace import ForwardTiming

from .colors import BLACK, BOUND_COLORS, GREY, PHASE_SYMBOLS, ROOF_COLORS
from .layout import FONT_SIZE, LEGEND_BELOW, log_range, log_ticks, style

ROOF_DASH = {"measured": "solid", "datasheet": "dash"}
# app.roofline.OVERHEAD_FACTOR (this package never imports the app's torch side); the app passes
# its value as ceilings["overhead_factor"] and tests/test_visualizations.py checks they agree
OVERHEAD_FACTOR = 3.0
BOUND_NAMES = {"memory": "memory-bound", "compute": "compute-bound", "overhead": "overhead-bound"}
REGION_ALPHA = 0.10
PHASE_NAMES = {
    "draft": "draft passes",
    "verify": "verify passes",
    "decode": "decode passes (baseline)",
    "prefill": "prefill",
}


def _roofs(ceilings: dict | None) -> list[tuple[str, float, float, str]]:
    """(kind, peak FLOP/s, bandwidth B/s, source) for the measured and datasheet ceilings."""
    roofs = []
    for kind in ("measured", "datasheet"):
        c = (ceilings or {}).get(kind)
        if c and c.get("flops_per_s", 0) > 0 and c.get("bytes_per_s", 0) > 0:
            roofs.append((kind, float(c["flops_per_s"]), float(c["bytes_per_s"]),
                          str(c.get("source") or "")))
    return roofs


def _x_range(points: list[ForwardTiming], roofs: list) -> tuple[float, float]:
    """Intensity range covering every point and ridge with at least a decade of margin each
    side; the right end is a whole decade, so it carries a labelled tick."""
    xs = [f.flops / f.bytes for f in points] + [peak / bw for _, peak, bw, _ in roofs]
    if not xs:
        return 0.1, 1000.0
    return min(xs) / 10, 10.0 ** math.ceil(math.log10(max(xs) * 10) - 1e-9)


def _y_range(points: list[ForwardTiming], roofs: list, x_lo: float, factor: float) -> tuple[float, float]:
    """Performance range showing every point, both roofs whole and the overhead band under
    roof / factor: from below the lowest point and that line's left end to above the highest
    peak, with room for the ridge labels."""
    ys = [f.flops / f.seconds for f in points]
    lows = ys + [x_lo * bw / factor for _, _, bw, _ in roofs]
    highs = ys + [peak for _, peak, _, _ in roofs]
    if not lows:
        return 1e8, 1e12
    return min(lows) / 2, max(highs) * 3


def _roof_line(kind: str, peak: float, bw: float, source: str, x_lo: float, x_hi: float):
    """min(peak, intensity x bandwidth): a slope up to the ridge, flat after it."""
    ridge = peak / bw
    return go.Scatter(
        x=[x_lo, ridge, x_hi], y=[x_lo * bw, peak, peak], mode="lines",
        name=f"{kind} roof" + (f" ({source})" if source else ""),
        line=dict(color=ROOF_COLORS[kind], width=3, dash=ROOF_DASH[kind]),
        meta={"role": "roof", "kind": kind},
        hovertemplate=(f"{kind}: peak {peak / 1e9:,.0f} GFLOP/s, "
                       f"bandwidth {bw / 1e9:,.1f} GB/s<extra></extra>"))


def _ridge_marker(kind: str, peak: float, bw: float) -> go.Scatter:
    """The ridge point peak / bandwidth, labelled with its intensity."""
    ridge = peak / bw
    return go.Scatter(
        x=[ridge], y=[peak], mode="markers+text", showlegend=False,
        marker=dict(size=12, color=ROOF_COLORS[kind], symbol="x"),
        text=[f"ridge ≈ {ridge:,.1f} FLOP/B"],  # short: it must fit beside the ridge
        # above the roofs, in the white: left of the measured ridge, right of the datasheet's
        textposition="top left" if kind == "measured" else "top right",
        textfont=dict(size=FONT_SIZE - 2), meta={"role": "ridge", "kind": kind},
        hovertemplate=f"{kind} ridge: %{{x:.1f}} FLOP/byte<extra></extra>")


def _hover(f: ForwardTiming) -> str:
    weights = " (int8 weights)" if f.weights == "int8" else ""
    head = "" if f.logits else " (KV cache only, no output layer)"
    return (f"{f.model} model{weights}, {f.phase}{head}<br>batch {f.batch} × {f.tokens} token(s), "
            f"kv_len {f.kv_len}<br>time {f.seconds * 1e3:.2f} ms<br>"
            f"achieved {f.flops / f.seconds / 1e9:,.2f} GFLOP/s, "
            f"{f.bytes / f.seconds / 1e9:,.2f} GB/s<br>bound: {f.bound or '—'}")


def _point_trace(phase: str, passes: list[ForwardTiming]) -> go.Scatter:
    """One phase's passes: symbol by phase, colour by class (the legend's entries, _legend)."""
    return go.Scatter(
        x=[f.flops / f.bytes for f in passes], y=[f.flops / f.seconds for f in passes],
        mode="markers", name=PHASE_NAMES.get(phase, phase), showlegend=False,
        marker=dict(size=13, symbol=PHASE_SYMBOLS.get(phase, "cross"),
                    color=[BOUND_COLORS.get(f.bound, BLACK) for f in passes],
                    opacity=0.85, line=dict(width=1, color="white")),
        text=[_hover(f) for f in passes], hovertemplate="%{text}<extra></extra>",
        meta={"role": "forward", "phase": phase})


def _legend(points: list[ForwardTiming]) -> list[go.Scatter]:
    """Legend-only entries: a colour per class present (filled squares), then a symbol per
    phase present (open, black: the symbol is the message, the colour belongs to the class)."""
    entries = []
    for bound in dict.fromkeys(f.bound for f in points):
        entries.append(go.Scatter(x=[None], y=[None], mode="markers", name=BOUND_NAMES.get(bound, "not classified"),
                                  marker=dict(size=13, symbol="square", color=BOUND_COLORS.get(bound, BLACK)),
                                  meta={"role": "legend", "bound": bound}))
    for phase in dict.fromkeys(f.phase for f in points):
        entries.append(go.Scatter(x=[None], y=[None], mode="markers", name=PHASE_NAMES.get(phase, phase),
                                  marker=dict(size=12, symbol=PHASE_SYMBOLS.get(phase, "cross") + "-open",
                                              color=BLACK),
                                  meta={"role": "legend", "phase": phase}))
    return entries


def _fill(rgb_hex: str) -> str:
    r, g, b = (int(rgb_hex[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{REGION_ALPHA})"


def _regions(peak: float, bw: float, factor: float, x_lo: float, x_hi: float, y_lo: float):
    """The three classes as shaded polygons (traces) and their labels (annotation dicts, in the
    log axes' units: log10 of the value). Memory-bound: between roof / factor and the sloped
    roof; compute-bound: the same under the flat roof; overhead-bound: below roof / factor."""
    ridge = peak / bw
    shapes = {
        "memory": ([x_lo, ridge, ridge, x_lo], [x_lo * bw / factor, peak / factor, peak, x_lo * bw]),
        "compute": ([ridge, x_hi, x_hi, ridge], [peak / factor, peak / factor, peak, peak]),
        "overhead": ([x_lo, x_hi, x_hi, ridge, x_lo], [y_lo, y_lo, peak / factor, peak / factor, x_lo * bw / factor]),
    }
    traces = [go.Scatter(x=xs, y=ys, fill="toself", fillcolor=_fill(BOUND_COLORS[bound]), mode="lines",
                         line=dict(width=0), hoverinfo="skip", showlegend=False,
                         meta={"role": "region", "bound": bound})
              for bound, (xs, ys) in shapes.items()]
    traces.append(go.Scatter(x=[x_lo, ridge, x_hi], y=[x_lo * bw / factor, peak / factor, peak / factor],
                             mode="lines", line=dict(color=GREY, width=1.5, dash="dot"), showlegend=False,
                             hoverinfo="skip", meta={"role": "overhead-line"}))
    mem_x = math.sqrt(x_lo * ridge)
    where = {  # (x, y, xanchor) of each label: the middle of its region's height, on the log scale
        "memory": (mem_x, mem_x * bw / math.sqrt(factor), "center"),
        "compute": (x_hi, peak / math.sqrt(factor), "right"),  # flush right: clear of the ridge label
        "overhead": (x_hi, math.sqrt(y_lo * peak / factor), "right"),  # under compute-bound: few passes there
    }
    labels = {"memory": "memory-bound", "compute": "compute-bound",
              "overhead": f"overhead-bound: over {factor:g}x<br>the time the roof allows"}
    notes = [dict(x=math.log10(x), y=math.log10(y), xanchor=anchor, text=f"<b>{labels[bound]}</b>",
                  showarrow=False, font=dict(size=FONT_SIZE - 3, color=BOUND_COLORS[bound]),
                  bgcolor="rgba(255,255,255,0.7)", name=f"region-{bound}")
             for bound, (x, y, anchor) in where.items()]
    return traces, notes


# The note above the plot wraps at NOTE_WIDTH characters of FONT_SIZE - 3 (about 7.5 px each,
# ~430 px): it fits a figure half of a 1366 px wide page, starting NOTE_SHIFT px left of the plot.
NOTE_WIDTH = 58
NOTE_LINE_PX = 18  # its line height at FONT_SIZE - 3
NOTE_SHIFT = -60


def _wrap(text: str, width: int) -> str:
    """Plotly annotations do not wrap: break the (HTML-escaped) text into <br>-joined lines."""
    import html
    import textwrap
    return "<br>".join(html.escape(line) for line in textwrap.wrap(text, width, break_on_hyphens=False))


def roofline_figure(forwards: list[ForwardTiming], ceilings: dict | None) -> go.Figure:
    """Log-log roofline: measured roof solid, datasheet roof dashed, ridge points labelled, the
    memory-, compute- and overhead-bound regions shaded and labelled (ceilings["overhead_factor"],
    default OVERHEAD_FACTOR), and one marker per forward pass with flops > 0 and bytes > 0
    (symbol by phase, colour by class).
    ceilings["note"], when present, is printed above the plot (e.g. app.cpu_regime's verdict
    on whether the knee is visible on this CPU)."""
    ceilings = ceilings or {}
    points = [f for f in forwards if f.flops > 0 and f.bytes > 0 and f.seconds > 0]
    roofs, factor = _roofs(ceilings), float(ceilings.get("overhead_factor") or OVERHEAD_FACTOR)
    x_lo, x_hi = _x_range(points, roofs)
    y_lo, y_hi = _y_range(points, roofs, x_lo, factor)
    fig = go.Figure()
    if roofs:  # the classes, from the roof the run classified by (measured, else the first)
        regions, labels = _regions(*roofs[0][1:3], factor, x_lo, x_hi, y_lo)
        fig.add_traces(regions)
        for label in labels:
            fig.add_annotation(**label)
    for kind, peak, bw, source in roofs:
        fig.add_trace(_roof_line(kind, peak, bw, source, x_lo, x_hi))
        fig.add_trace(_ridge_marker(kind, peak, bw))
    for phase in dict.fromkeys(f.phase for f in points):
        fig.add_trace(_point_trace(phase, [f for f in points if f.phase == phase]))
    fig.add_traces(_legend(points))
    if not points:
        fig.add_annotation(text="no timed forward passes yet", x=0.5, y=0.5, xref="paper",
                           yref="paper", showarrow=False, font=dict(size=FONT_SIZE + 2))
    note = _wrap(str(ceilings["note"]), NOTE_WIDTH) if ceilings.get("note") else ""
    if note:  # above the plot area, in room made for it below the title: never over a roof
        fig.add_annotation(text=note, x=0, y=1, xref="paper", yref="paper", xanchor="left",
                           yanchor="bottom", yshift=6, xshift=NOTE_SHIFT, showarrow=False, align="left",
                           font=dict(size=FONT_SIZE - 3), bgcolor="rgba(255,248,220,0.9)", name="note")
    device = ceilings.get("device_name") or ceilings.get("device") or "unknown device"
    dtype = f", {ceilings['dtype']}" if ceilings.get("dtype") else ""
    # Fixed ranges (the roofs span x exactly) and one labelled tick per decade: 0.1, 1, 10 FLOP/B;
    # 1G, 10G, 100G FLOP/s. The legend goes below the plot, never over a roof.
    fig.update_xaxes(type="log", title_text="arithmetic intensity (FLOP / byte)",
                     range=log_range(x_lo, x_hi), **log_ticks(x_lo, x_hi, decades_only=True))
    fig.update_yaxes(type="log", title_text="performance (FLOP/s)", exponentformat="SI",
                     range=log_range(y_lo, y_hi),
                     **log_ticks(y_lo * 1.5, y_hi, decades_only=True))  # none in the corner
    room = NOTE_LINE_PX * (note.count("<br>") + 1) + 14 if note else 0
    fig = style(fig, f"Roofline — {device}{dtype}", height=560 + room, legend=LEGEND_BELOW)
    return fig.update_layout(margin_t=fig.layout.margin.t + room, legend_font_size=FONT_SIZE - 4)
