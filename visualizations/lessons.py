"""Figures of the lessons (app.lessons), one builder per experiment.

Each builder takes the experiment's `to_dict()` - plain values, no torch - and returns a plotly
Figure, so a saved result redraws without a model. Measured values are markers, predictions
are lines, and every figure says where its numbers came from.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .colors import (BLACK, BLUE, BLUISH_GREEN, GREY, ORANGE, REDDISH_PURPLE, SKY_BLUE,
                     VERMILLION)
from .layout import FONT_SIZE, LEGEND_BELOW, empty_figure, log_ticks, style

ARM_COLORS = {"target": GREY, "exact": BLUISH_GREEN, "greedy_draft": VERMILLION,
              "no_residual": REDDISH_PURPLE}
POLICY_COLORS = {"plain": GREY, "fixed": BLUE, "heuristic": ORANGE, "confidence": REDDISH_PURPLE,
                 "roofline": BLUISH_GREEN}
PART_COLORS = {"draft": ORANGE, "verify_used": BLUE, "verify_wasted": VERMILLION, "plain_decode": SKY_BLUE}
PART_LABELS = {"draft": "draft passes", "verify_used": "verify: used positions",
               "verify_wasted": "verify: wasted positions", "plain_decode": "plain decode passes"}


def _subtitle(title: str, note: str) -> str:
    return f"{title}<br><sup>{note}</sup>" if note else title


def _bars(spreads: list[dict], scale: float = 1.0) -> tuple[list[float], dict]:
    """(medians, error_y) of Spread dicts {min, median, max, n}: bars from min to max."""
    med = [s["median"] * scale for s in spreads]
    return med, dict(type="data", symmetric=False, array=[s["max"] * scale - m for s, m in zip(spreads, med)],
                     arrayminus=[m - s["min"] * scale for s, m in zip(spreads, med)], thickness=2, width=6)


def knee_lesson_figure(d: dict) -> go.Figure:
    """t(q) / t(1) against tokens per pass q (log x): medians with min-max bars, 1 and the bend
    threshold drawn; the verdict is in the text, not the title."""
    title = "t(q) / t(1) against tokens per pass q"
    if not d.get("qs"):
        return empty_figure(title, "no measurements yet")
    ys, error = _bars(d["ratios"])
    fig = go.Figure(go.Scatter(
        x=d["qs"], y=ys, error_y=error, mode="lines+markers", name="measured (median, min–max)",
        line=dict(color=BLACK, width=3), marker=dict(size=11),
        customdata=[[s["median"] * 1e3, r["bound"]] for s, r in zip(d["seconds"], d["rows"])],
        hovertemplate="q=%{x}: %{y:.2f}× t(1)<br>%{customdata[0]:.3f} ms, %{customdata[1]}<extra></extra>"))
    fig.add_hline(y=1, line=dict(color=BLUISH_GREEN, dash="dash"), annotation_text="cost of one token",
                  annotation_position="bottom left")
    fig.add_hline(y=d["bend_ratio"], line=dict(color=GREY, dash="dot"),
                  annotation_text=f"bend threshold {d['bend_ratio']}×", annotation_position="top left")
    if d.get("bend"):  # on a log axis a shape takes the data value, an annotation its log10
        fig.add_shape(type="line", x0=d["bend"], x1=d["bend"], y0=0, y1=1, yref="paper",
                      line=dict(color=VERMILLION, dash="dot", width=2))
        lo, hi = math.log10(min(d["qs"])), math.log10(max(d["qs"]))
        right = hi > lo and (math.log10(d["bend"]) - lo) / (hi - lo) < 0.7
        fig.add_annotation(x=math.log10(d["bend"]), y=0.02, yref="paper",
                           text=f" median above {d['bend_ratio']}×: q = {d['bend']} ",
                           showarrow=False, xanchor="left" if right else "right", yanchor="bottom",
                           font=dict(color=VERMILLION))
    if d.get("ratio_at_5") is not None:
        fig.add_annotation(x=math.log10(5), y=d["ratio_at_5"], text=f"5 tokens: {d['ratio_at_5']:.2f}×",
                           showarrow=True, arrowhead=2, ax=30, ay=50, font=dict(size=FONT_SIZE))
    fig.update_xaxes(type="log", title_text="tokens per forward pass q (log scale)",
                     **log_ticks(min(d["qs"]), max(d["qs"])))
    fig.update_yaxes(title_text="time relative to one token", rangemode="tozero")
    n = d["seconds"][0].get("n", 1)
    return style(fig, _subtitle(title, f"{d.get('model', '')} · measured, {n} rounds"), height=500)


def _lose_line(d: dict) -> go.Scatter:
    """A staircase along cell edges: in each gamma column, below the first batch that loses."""
    xs, ys, top = [], [], len(d["batches"]) - 0.5
    for j, b in enumerate(d["lose_from_batch"]):
        if d["gammas"][j] == 0:
            continue
        y = top if b is None else d["batches"].index(b) - 0.5
        xs += [j - 0.5, j + 0.5]
        ys += [y, y]
    return go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=BLACK, width=4, shape="hv"),
                      name="speculation starts to lose above this line (speedup < 1)", hoverinfo="skip",
                      showlegend=True)


def batch_depth_figure(d: dict) -> go.Figure:
    """Heatmap of speedup (rows batch, columns gamma; medians, the min-max range in each cell),
    coloured by log2(speedup) so 1 is white, 2x and 0.5x equally strong; cells above the
    Leviathan bound blank and marked ✗; the line where speculation starts to lose."""
    title = "Batch size against depth: speedup over plain decoding"
    if not d.get("speedup"):
        return empty_figure(title, "no measurements yet")
    bad = d.get("impossible") or [[False] * len(row) for row in d["speedup"]]
    ranges = d.get("speedup_range") or [[{"min": s, "max": s} for s in row] for row in d["speedup"]]
    z = [[None if x else math.log2(max(s, 1e-9)) for s, x in zip(row, flags)] for row, flags in zip(d["speedup"], bad)]
    reach = max([0.25] + [abs(v) for row in z for v in row if v is not None])
    ticks = [t for t in (0.25, 0.5, 0.71, 1, 1.41, 2, 4) if abs(math.log2(t)) <= reach]
    text = [["✗ above the bound" if x else f"{s:.2f}×<br>{r['min']:.2f}–{r['max']:.2f}"
             for s, x, r in zip(row, flags, rrow)] for row, flags, rrow in zip(d["speedup"], bad, ranges)]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(len(d["gammas"]))), y=list(range(len(d["batches"]))), zmin=-reach, zmax=reach,
        colorscale=[[0, VERMILLION], [0.5, "#FFFFFF"], [1, BLUISH_GREEN]],
        text=text, texttemplate="%{text}",
        customdata=[[[b, g] for g in d["gammas"]] for b in d["batches"]],
        colorbar=dict(title="speedup", tickvals=[math.log2(t) for t in ticks], ticktext=[f"{t:g}×" for t in ticks]),
        hovertemplate="batch %{customdata[0]}, γ = %{customdata[1]}: %{text}<extra></extra>"))
    fig.add_trace(_lose_line(d))
    if d.get("disable_at_batch"):  # a line named in the legend: no note beside the colorbar
        y = d["batches"].index(d["disable_at_batch"]) - 0.5
        fig.add_trace(go.Scatter(x=[-0.5, len(d["gammas"]) - 0.5], y=[y, y], mode="lines", hoverinfo="skip",
                                 line=dict(color=BLACK, width=2, dash="dash"), showlegend=True,
                                 name=f"from b={d['disable_at_batch']} no γ ≥ 1 above 1× (medians)"))
    fig.update_xaxes(title_text="draft tokens per step γ", tickvals=list(range(len(d["gammas"]))),
                     ticktext=[f"γ={g}" for g in d["gammas"]])
    fig.update_yaxes(title_text="batch size", tickvals=list(range(len(d["batches"]))),
                     ticktext=[f"b={b}" for b in d["batches"]])
    return style(fig, _subtitle(title, d.get("source", "")), height=520, legend=LEGEND_BELOW)


def _median(spread) -> float:
    """A Spread dict's median (a plain number passes through: results saved before Spreads)."""
    return spread["median"] if isinstance(spread, dict) else spread


def _error_bars(spreads: list) -> dict:
    """Plotly error_y from Spread dicts {min, median, max}: the whole range of the repeats."""
    spreads = [s if isinstance(s, dict) else {"min": s, "median": s, "max": s} for s in spreads]
    return dict(type="data", symmetric=False, array=[s["max"] - s["median"] for s in spreads],
                arrayminus=[s["median"] - s["min"] for s in spreads], color=BLACK, thickness=1.5)


def policies_figure(d: dict) -> go.Figure:
    """tokens/s (median, bars from min to max over the rounds), alpha and wasted drafted tokens
    for plain decoding, every fixed γ of the sweep and each adaptive policy."""
    title = "Depth policies on the same prompts and seed"
    rows = d.get("rows") or []
    if not rows:
        return empty_figure(title, "no runs yet")
    sweep = d.get("sweep") or []
    shown = [rows[0], *sweep, *(r for r in rows[1:] if r["policy"] != "fixed")]
    names = [r.get("name", r["policy"]) for r in shown]
    best = d.get("best_fixed_gamma")
    colors = [(BLUE if r.get("gamma") == best else SKY_BLUE) if r["policy"] == "fixed"
              else POLICY_COLORS.get(r["policy"], GREY) for r in shown]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("tokens / s (median, min–max)", "acceptance α",
                                                         "wasted drafts"))
    for col, key, fmt in ((1, "tokens_per_s", ".0f"), (2, "alpha", ".2f"), (3, "wasted", "d")):
        values = [r[key] for r in shown]
        fig.add_trace(go.Bar(x=names, y=[None if v is None else _median(v) for v in values], marker_color=colors,
                             showlegend=False, error_y=_error_bars(values) if col == 1 else None,
                             text=["—" if v is None else format(_median(v), fmt) for v in values],
                             textposition="inside" if col == 1 else "outside",
                             customdata=[[r["target_passes"], r["drafted"], r["mean_gamma"]] for r in shown],
                             hovertemplate="%{x}: %{y}<br>target passes %{customdata[0]}, drafted "
                                           "%{customdata[1]}, mean γ %{customdata[2]:.2f}<extra></extra>"),
                      row=1, col=col)
    same = {True: "greedy outputs identical", False: "OUTPUTS DIFFER", None: "sampling"}[d.get("identical")]
    rounds = d.get("settings", {}).get("rounds")
    note = f"{d.get('model', '')} · {same}" + (f" · {rounds} interleaved rounds" if rounds else "")
    return style(fig, _subtitle(title, note), height=500)


def theory_figure(d: dict) -> go.Figure:
    """Tokens per target pass, speed-up (prediction and its range from the calibration runs;
    measured median with min–max bars) and acceptance by draft position against α^k."""
    title = "Theory against measurement"
    if not d.get("gammas"):
        return empty_figure(title, "no runs yet")
    g = d["gammas"]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("tokens per target pass", "speed-up over plain",
                                                         "P(first k drafts accepted)"))
    line = lambda x, y, name, color, dash="solid", show=True: go.Scatter(
        x=x, y=y, mode="lines", name=name, line=dict(color=color, width=3, dash=dash), showlegend=show)
    dots = lambda x, y, name, color, show=True, **kw: go.Scatter(
        x=x, y=y, mode="markers", name=name, marker=dict(color=color, size=12), showlegend=show, **kw)
    fig.add_trace(line(g, d["predicted_tokens_per_pass"], "predicted (Leviathan, calibration α)", BLUE), row=1, col=1)
    fig.add_trace(dots(g, d["measured_tokens_per_pass"], "measured (separate runs)", BLACK), row=1, col=1)
    if d.get("predicted_low"):
        fig.add_trace(go.Scatter(x=g + g[::-1], y=d["predicted_high"] + d["predicted_low"][::-1], fill="toself",
                                 fillcolor="rgba(0,114,178,0.15)", line=dict(width=0), hoverinfo="skip",
                                 name="predicted range (α ± 2 s.e., c min–max)"), row=1, col=2)
    fig.add_trace(line(g, d["predicted_speedup"], "predicted", BLUE, show=False), row=1, col=2)
    fig.add_trace(line(g, d["predicted_speedup_verify"], "predicted with measured verify time", SKY_BLUE, "dash"),
                  row=1, col=2)
    measured = d["measured_speedup"]
    fig.add_trace(dots(g, [_median(m) for m in measured], "measured", BLACK, show=False,
                       error_y=_error_bars(measured)), row=1, col=2)
    fig.add_hline(y=1, line=dict(color=GREY, dash="dot"), row=1, col=2)
    if d.get("position_acceptance"):
        k = list(range(1, len(d["position_acceptance"]) + 1))
        fig.add_trace(line(k, [d["alpha"] ** i for i in k], "i.i.d. assumption α^k", ORANGE), row=1, col=3)
        fig.add_trace(dots(k, d["position_acceptance"], "measured by position", VERMILLION,
                           customdata=d.get("position_steps"),
                           hovertemplate="k=%{x}: %{y:.2f} of %{customdata} steps<extra></extra>"), row=1, col=3)
        fig.update_xaxes(title_text="draft position k", row=1, col=3)
    fig.update_xaxes(title_text="γ", dtick=1)
    c = _median(d["c"])
    note = f"α = {d['alpha']:.3f}, c = {c:.3f} (measured on calibration runs) · {d.get('model', '')}"
    return style(fig, _subtitle(title, note), height=520, legend=LEGEND_BELOW)


def lossless_figure(d: dict) -> go.Figure:
    """Overlaid histograms of the most frequent outcomes: target alone vs each speculative arm."""
    title = "Lossless: the output distribution of speculative sampling"
    if not d.get("outcomes"):
        return empty_figure(title, "no samples yet")
    labels = [f"'{t}'" for t in d["outcome_texts"]] + ["(other)"]
    fig = go.Figure(go.Bar(x=labels, y=d["target_freqs"], name="target alone", marker_color=ARM_COLORS["target"]))
    for arm in d["arms"]:
        fig.add_trace(go.Bar(x=labels, y=arm["freqs"], marker_color=ARM_COLORS.get(arm["variant"], BLACK),
                             name=f"{arm['label']}: TV {arm['tv']:.3f} (noise ≤ {arm['noise_q95']:.3f}"
                                  + (f"; theory: {arm['predicted_tv']:.3f} from p)" if arm.get("predicted_tv") is not None
                                     else ")")))
    if d.get("exact_p"):
        fig.add_trace(go.Scatter(x=labels, y=d["exact_p"], mode="markers", name="exact p(x | prompt)",
                                 marker=dict(symbol="line-ew-open", size=26, color=BLACK, line=dict(width=3, color=BLACK))))
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text=f"next {d['settings']['k']} token(s)")
    fig.update_yaxes(title_text="frequency")
    s = d["settings"]
    power = f", detectable TV ≥ {d['detectable_tv']:.3f}" if d.get("detectable_tv") is not None else ""
    note = f"N = {s['n']} per arm{power}, T = {s['temperature']}, γ = {s['gamma']} · {d.get('model', '')}"
    return style(fig, _subtitle(title, note), height=520, legend=LEGEND_BELOW)


def flops_figure(d: dict) -> go.Figure:
    """Left: FLOPs per part, counted (speculative stacked against plain). Right: wall time,
    measured (median, min-max bars), and the measured time of the wasted work."""
    title = "FLOPs (counted) and time (measured)"
    if not d.get("flops"):
        return empty_figure(title, "no runs yet")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("FLOPs (GFLOP, counted)", "wall time (ms, measured)"))
    for part, label in PART_LABELS.items():
        run = "plain" if part == "plain_decode" else "speculative"
        fig.add_trace(go.Bar(x=[run], y=[d["flops"][part] * 1e-9], name=label, marker_color=PART_COLORS[part],
                             legendgroup=part, hovertemplate=f"{label}: %{{y:.3f}}<extra></extra>"), row=1, col=1)
    runs = ["speculative", "plain"]
    ys, error = _bars([d["seconds"][r] for r in runs], 1e3)
    fig.add_trace(go.Bar(x=runs, y=ys, error_y=error, marker_color=[BLUE, SKY_BLUE], showlegend=False,
                         hovertemplate="%{x}: %{y:.1f} ms (median)<extra></extra>"), row=1, col=2)
    waste = d["waste"]
    fig.add_trace(go.Bar(x=["wasted work"], y=[waste["total_s"] * 1e3], marker_color=VERMILLION,
                         name="wasted work (measured: marginal verify + rejected drafts)",
                         hovertemplate="%{y:.1f} ms<extra></extra>"), row=1, col=2)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(categoryorder="array", categoryarray=runs, row=1, col=1)
    tr = d["time_ratio"]
    note = (f"γ = {d['gamma']} (fastest of the sweep) · {d['flops_ratio']:.2f}× the FLOPs · time ratio "
            f"{tr['median']:.2f} [{tr['min']:.2f}–{tr['max']:.2f}] · {d.get('model', '')}")
    return style(fig, _subtitle(title, note), height=520, legend=LEGEND_BELOW)


def memory_wall_figure(d: dict) -> go.Figure:
    """Time per pass against tokens per pass b·q: the flat memory floor, the rising compute
    floor (when a peak is known), the time per token they imply, and this configuration."""
    title = "The memory wall: time per forward pass"
    bq = [2 ** i for i in range(0, 15)]
    memory = [d.get("weight_bytes", d["params"] * d["bytes_per_param"]) / d["bytes_per_s"] * 1e3 for _ in bq]  # ms
    compute = [2 * d["params"] * n / d["flops_per_s"] * 1e3 if d.get("flops_per_s") else 0.0 for n in bq]
    dashed = lambda color: dict(color=color, width=3, dash="dash")
    fig = go.Figure(go.Scatter(x=bq, y=memory, mode="lines", name="memory floor (weights read once)",
                               line=dashed(BLUE)))
    if d.get("flops_per_s"):
        fig.add_trace(go.Scatter(x=bq, y=compute, mode="lines", line=dashed(VERMILLION),
                                 name="compute floor (2 FLOPs / param / token)"))
    per_token = [max(m, c) / n for m, c, n in zip(memory, compute, bq)]
    fig.add_trace(go.Scatter(x=bq, y=per_token, mode="lines", line=dict(color=BLUISH_GREEN, width=3),
                             name="time per processed token = pass time ÷ (b·q)"))
    y = max(d["memory_floor_s"], d.get("compute_floor_s") or 0) * 1e3
    fig.add_trace(go.Scatter(x=[d["batch"] * d["q"]], y=[y], mode="markers+text", marker=dict(size=16, color=BLACK),
                             name="this configuration (pass time, KV cache included)", text=[f"{y:.3g} ms"],
                             textposition="top center"))
    ys = [v for v in memory + compute + per_token + [y] if v > 0]
    fig.update_xaxes(type="log", title_text="tokens per pass, batch × q (log scale)",
                     **log_ticks(min(bq), max(bq)))
    fig.update_yaxes(type="log", title_text="time (ms, log scale)", **log_ticks(min(ys), max(ys)))
    note = (f"calculated: {d['params'] / 1e9:.3g}B params, {d['dtype']}, {d['bytes_per_s'] / 1e12:.3g} TB/s "
            f"({d['device']}) · intensity {d['intensity']:.3g} FLOP/byte")
    ridges = [(r["device_name"], r["ridge"], r.get("label", "")) for r in (d.get("reference"), d.get("here")) if r]
    if ridges:
        note += " · ridge " + ", ".join(f"{name} {ridge:.3g} ({label})" for name, ridge, label in ridges)
    return style(fig, _subtitle(title, note), height=500, legend=LEGEND_BELOW)
