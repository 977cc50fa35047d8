"""Inspector for one verified position: p_target and q_draft side by side, the acceptance
test r < min(1, p/q) (Leviathan et al. 2023, Alg. 1), and the residual norm(max(0, p - q))
the correction was sampled from when the draft token was rejected."""
from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.trace import Check, StepEvent

from .colors import BLACK, DIST_COLORS, GREY, fate_color
from .layout import FONT_SIZE, LEGEND_BELOW, empty_figure, fmt_prob, style

TITLE = "Verification inspector"


def _raw_text(token_id: int, step: StepEvent, token_text: dict[int, str] | None) -> str:
    if token_text and token_id in token_text:
        return token_text[token_id]
    for piece in step.pieces:
        if piece.token_id == token_id:
            return piece.text
    return f"#{token_id}"


def _label(token_id: int, step: StepEvent, token_text: dict[int, str] | None) -> str:
    """A token as an axis label: spaces as ␣, newlines as ↵, escaped for plotly's markup."""
    text = _raw_text(token_id, step, token_text)
    text = text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣") or "∅"
    return html.escape(text, quote=False)


def _distribution_rows(check: Check) -> list[tuple[int, float | None, float | None, float | None]]:
    """(token_id, p, q, residual) over top_ids, the drafted token and residual_ids."""
    rows = {i: [p, q, None] for i, p, q in zip(check.top_ids, check.top_p, check.top_q)}
    rows.setdefault(check.token_id, [check.p, check.q, None])
    for i, r in zip(check.residual_ids, check.residual_p):
        rows.setdefault(i, [None, None, None])[2] = r
    return [(i, *v) for i, v in rows.items()]


def _unique_labels(ids: list[int], step: StepEvent, token_text) -> list[str]:
    labels = [_label(i, step, token_text) for i in ids]
    return [f"{lab} #{i}" if labels.count(lab) > 1 else lab for lab, i in zip(labels, ids)]


def _distribution_bars(fig: go.Figure, check: Check, labels: list[str], rows: list) -> None:
    series = [("p_target (target)", 1, DIST_COLORS["p_target"]),
              ("q_draft (draft)", 2, DIST_COLORS["q_draft"])]
    if check.residual_ids:
        series.append(("residual norm(max(0, p − q))", 3, DIST_COLORS["residual"]))
    for name, col, color in series:
        fig.add_trace(go.Bar(x=labels, y=[r[col] for r in rows], name=name, marker_color=color,
                             meta={"role": "distribution"},
                             hovertemplate="%{x}: %{y:.3f}<extra>" + name + "</extra>"),
                      row=1, col=1)


DRAFTED = "drafted token"  # the one category of the acceptance panel


def _acceptance_panel(fig: go.Figure, check: Check) -> None:
    """Sampling: the bar min(1, p/q) and the uniform draw r; accepted iff r falls under the bar.
    Greedy: no draw and no bar, so the panel states the rule and the verdict, inside itself
    (not above it, where the subplot title is)."""
    if check.r is None:
        verdict = ("✓ accepted" if check.accepted else "✗ rejected")
        color = fate_color("accepted" if check.accepted else "rejected")
        fig.add_annotation(text=("accepted if<br>the drafted<br>token is the<br>target's top<br>choice<br><br>"
                                 f'<b><span style="color:{color}">{verdict}</span></b>'),
                           x=sum(fig.layout.xaxis2.domain) / 2, y=0.6, xref="paper",
                           yref="paper", xanchor="center", yanchor="middle", showarrow=False,
                           font=dict(size=FONT_SIZE - 2))
        fig.update_xaxes(visible=False, row=1, col=2)
        fig.update_yaxes(visible=False, row=1, col=2)
        return
    threshold = min(1.0, check.ratio)
    fig.add_trace(go.Bar(x=[DRAFTED], y=[threshold], name="min(1, p/q)", marker_color=GREY,
                         width=0.5, meta={"role": "threshold"},
                         hovertemplate="min(1, p/q) = %{y:.3f}<extra></extra>"), row=1, col=2)
    fig.add_trace(go.Scatter(x=[DRAFTED], y=[check.r], mode="markers+text", name="uniform draw r",
                             marker=dict(symbol="diamond", size=18, color=BLACK),
                             text=[f"r={check.r:.2f}"], textposition="middle right",
                             textfont=dict(size=FONT_SIZE - 2), cliponaxis=False,
                             meta={"role": "r"}, hovertemplate="r = %{y:.3f}<extra></extra>"),
                  row=1, col=2)
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)


def _title(step: StepEvent, position: int, check: Check, token_text) -> str:
    word = _label(check.token_id, step, token_text)
    verdict = "accepted" if check.accepted else "rejected"
    title = f"Step {step.index}, draft {position + 1} of {step.gamma}: “{word}” {verdict}"
    if not check.accepted and len(step.emitted_ids) > position:
        title += f" → correction “{_label(step.emitted_ids[position], step, token_text)}”"
    rule = ("greedy: accepted if it is the target's top choice" if check.r is None
            else f"r={check.r:.2f} vs min(1, p/q)={min(1.0, check.ratio):.2f}")
    return f"{title}<br><sup>p={fmt_prob(check.p)}, q={fmt_prob(check.q)}, {rule}</sup>"


def inspector_figure(step: StepEvent, position: int | None = None, *,
                     token_text: dict[int, str] | None = None) -> go.Figure:
    """p and q over the target's top tokens at one checked position (default: the last
    checked one), the acceptance test for the drafted token, and the residual if rejected.
    `token_text` maps ids to their text; ids not in it fall back to the step's pieces, then
    to '#id'. Raises IndexError for a position that was not checked."""
    if not step.checks:
        return empty_figure(TITLE, f"step {step.index} checked no drafted tokens<br>"
                                   "(autoregressive baseline or γ = 0)")
    position = len(step.checks) - 1 if position is None else position
    if not 0 <= position < len(step.checks):
        raise IndexError(f"step {step.index} checked positions 0..{len(step.checks) - 1}, "
                         f"not {position}")
    check = step.checks[position]
    rows = _distribution_rows(check)
    labels = _unique_labels([r[0] for r in rows], step, token_text)
    # Short subplot titles: the right one must fit over a narrow panel (the rule goes on two lines).
    test = "greedy test" if check.r is None else "accepted if<br>r < min(1, p/q)"
    fig = make_subplots(rows=1, cols=2, column_widths=[0.8, 0.2], horizontal_spacing=0.08,
                        subplot_titles=("next-token probabilities", test))
    _distribution_bars(fig, check, labels, rows)
    drafted = labels[[r[0] for r in rows].index(check.token_id)]
    fig.add_annotation(x=drafted, y=max(v for v in (check.p, check.q) if v is not None),
                       text="drafted", showarrow=True, arrowhead=2, ay=-40, row=1, col=1)
    _acceptance_panel(fig, check)
    fig.update_layout(barmode="group")
    # Headroom above the tallest bar for the "drafted" arrow, below the subplot title.
    top = max(v for r in rows for v in r[1:] if v is not None)
    fig.update_yaxes(title_text="probability", range=[0, min(1.0, top) * 1.3 or 1.0], row=1, col=1)
    fig.update_xaxes(title_text="token", row=1, col=1)
    return style(fig, _title(step, position, check, token_text), height=520,
                 legend=LEGEND_BELOW)
