"""Figures and HTML for the Speculative Decoding Lab, built from trace data alone.

Imports only plotly, the standard library and `app.trace` -- never torch, never gradio -- so
every figure can be drawn and tested from a saved trace (`Trace.from_json`).
"""
from .inspector import inspector_figure
from .knee import batch_figure, knee_figure
from .roofline import roofline_figure
from .stats import speedup, stats_markdown
from .timeline import step_timeline
from .tokens import STYLE, legend_html, prompt_html, token_span, token_stream_html

__all__ = [
    "STYLE", "batch_figure", "inspector_figure", "knee_figure", "legend_html", "prompt_html",
    "roofline_figure", "speedup", "stats_markdown", "step_timeline", "token_span",
    "token_stream_html",
]
