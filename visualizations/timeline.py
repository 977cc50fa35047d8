"""Step timeline: where the time of each step went, and how many tokens it bought."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.trace import StepEvent, Trace

from .colors import BLACK, phase_color
from .layout import LEGEND_BELOW, empty_figure, nice_step, style

PHASE_ORDER = ("prefill", "draft", "verify", "decode")
PHASE_LABELS = {"prefill": "prefill", "draft": "draft passes", "verify": "verify pass",
                "decode": "decode pass"}


def _phase_ms(step: StepEvent, phase: str) -> tuple[float, int]:
    """Milliseconds and number of this step's forward passes in `phase`."""
    passes = [f for f in step.forwards if f.phase == phase]
    return 1e3 * sum(f.seconds for f in passes), len(passes)


def _phase_bar(steps: list[StepEvent], phase: str) -> go.Bar:
    ms_and_n = [_phase_ms(s, phase) for s in steps]
    return go.Bar(
        x=[s.index for s in steps], y=[ms for ms, _ in ms_and_n],
        customdata=[n for _, n in ms_and_n], name=PHASE_LABELS.get(phase, phase),
        marker_color=phase_color(phase), meta={"role": "phase", "phase": phase},
        hovertemplate=f"step %{{x}}<br>{phase}: %{{y:.2f}} ms in %{{customdata}} pass(es)"
                      "<extra></extra>")


def _tokens_line(steps: list[StepEvent]) -> go.Scatter:
    return go.Scatter(
        x=[s.index for s in steps], y=[len(s.emitted_ids) for s in steps],
        name="tokens emitted", mode="lines+markers",
        line=dict(color=BLACK, width=2, dash="dot"), marker=dict(size=11, symbol="star"),
        meta={"role": "tokens"},
        hovertemplate="step %{x}<br>%{y} token(s) emitted<extra></extra>")


def step_timeline(trace: Trace | list[StepEvent]) -> go.Figure:
    """Stacked bars of each step's forward time by phase (ms) and tokens emitted per step
    on a secondary axis. Works for speculative traces (draft + verify) and the baseline
    (one decode pass per step); also accepts a plain list of steps (a run in progress)."""
    steps = trace if isinstance(trace, list) else trace.steps
    speculative = any(f.phase in ("draft", "verify") for s in steps for f in s.forwards)
    title = ("Time per step: draft passes + verify pass" if speculative
             else "Time per step: autoregressive decoding")
    if not steps:
        return empty_figure(title, "no steps yet")
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    present = {f.phase for s in steps for f in s.forwards}
    phases = [p for p in PHASE_ORDER if p in present] + sorted(present - set(PHASE_ORDER))
    for phase in phases:
        fig.add_trace(_phase_bar(steps, phase), secondary_y=False)
    fig.add_trace(_tokens_line(steps), secondary_y=True)
    fig.update_layout(barmode="stack", bargap=0.25)
    # An integer axis that starts at the first step (no empty "-1" slot): one slot per step,
    # labelled every 1, 2, 5, 10, ... steps so there are at most ~15 labels.
    first, last = min(s.index for s in steps), max(s.index for s in steps)
    fig.update_xaxes(title_text="step (one target pass each)", range=[first - 0.5, last + 0.5],
                     tickmode="linear", tick0=first, dtick=nice_step(last - first + 1),
                     showgrid=False, zeroline=False)
    tallest = max(1e3 * sum(f.seconds for f in s.forwards) for s in steps)
    fig.update_yaxes(title_text="time (ms)", range=[0, tallest * 1.08 or 1.0], secondary_y=False)
    top = max(len(s.emitted_ids) for s in steps)
    fig.update_yaxes(title_text="tokens emitted", range=[0, top + 1],
                     dtick=1 if top <= 10 else None, showgrid=False, secondary_y=True)
    # the legend below the plot: above it, it wrapped into the title on a narrow figure
    return style(fig, title, legend=LEGEND_BELOW)
