"""Streaming one decode to the page: the engine runs in its own thread (`in_background`) and
the handler renders its newest state whenever Gradio asks for the next update, so drawing and
sending never stall the decode.

Cheap outputs (the token stream, the status line) change with every update; the charts and
the live stats are rebuilt at most every CHART_EVERY_S seconds (and once at the end). Each kind
of update is also paced by its own measured cost (making it here plus Gradio's sending it, the
time from building a View to being asked for the next): at most 1/COST_X of the time goes to
either, because that work holds the GIL the decode thread needs.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterator

import gradio as gr

import visualizations as viz
from app import annotate, roofline
from app.runner import DecodeRequest
from app.timing import same_threads
from app.trace import Trace
from app.ui.views import (Record, View, live_trace, plain_text, status_line, stream_html, summary_json,
                          token_texts, write_exports)

FRAME_S = 0.25       # at most four updates a second: enough for the eye...
CHART_EVERY_S = 2.0  # charts (and live stats) redrawn at most this often while decoding...
COST_X = 30          # ...and each kind of update takes at most 1/30 of the time (measured)


class _Run:
    """The state of one decode in progress: what to draw, and when. Charts are first drawn
    CHART_EVERY_S seconds in (a short decode draws them once, at the end), then again at most
    every CHART_EVERY_S seconds; text updates come at most every FRAME_S seconds. Each kind
    waits at least COST_X times what its last update cost (sent(): built and sent), so drawing
    (plotly is slow) and sending never take more than 1/COST_X of the decode's time each."""

    def __init__(self, req: DecodeRequest, pair, ceilings, regime=None):
        self.req, self.pair, self.ceilings = req, pair, ceilings
        self.annotate = annotate.Annotator(pair, ceilings)
        # what the roofline figure and the API show; the factor shades the overhead band
        self.roof = ceilings.to_dict() | {"overhead_factor": roofline.OVERHEAD_FACTOR}
        self.warned = False  # whether the note already says the ceilings are too low
        if regime is not None:  # app.cpu_regime: is the knee visible on this CPU?
            self.roof |= {"note": regime.explanation, "cpu_regime": regime.to_dict()}
        self.start = time.perf_counter()
        self.next_charts = self.start + CHART_EVERY_S
        self.frame_s = FRAME_S       # the pause before the next text update (in_background)
        self.charted = False         # whether the last View carried charts

    def view(self, trace: Trace, phase: str, finished: bool = False, charts: bool | None = None) -> View:
        """The stream, status and text; the charts too when finished or due (charts=None), or
        as `charts` says."""
        skip = gr.skip()
        if charts is None:
            charts = finished or time.perf_counter() >= self.next_charts
        self.charted = charts
        # the downloads are emptied, never skipped: Gradio answers a skip (an update) with a new
        # component for the session, whose cached files views.expire_downloads() would never see
        view = View(stream=stream_html(trace, finished), status=status_line(trace, self.req, phase),
                    timeline=skip, roofline=skip, stats=skip, text=plain_text(trace),
                    summary=skip, step=skip, position=skip, json_file=None, csv_file=None, record=skip)
        return self._with_charts(view, trace) if charts else view

    def _with_charts(self, view: View, trace: Trace) -> View:
        began = time.perf_counter()
        self.annotate.trace(trace)
        warning = None if self.warned else roofline.forwards_warning(trace.all_forwards(), self.annotate.ceilings)
        if warning:  # stale ceilings: say so on the plot, once
            self.roof["note"], self.warned = " ".join(filter(None, (self.roof.get("note"), warning))), True
        view = view._replace(
            timeline=viz.step_timeline(trace),
            roofline=viz.roofline_figure(trace.all_forwards(), self.roof),
            stats=viz.stats_markdown(live_trace(trace, began - self.start)))
        return view

    def sent(self, seconds: float) -> None:
        """The last View took `seconds` from building it to Gradio asking for the next one:
        pace the next update of its kind by that cost."""
        if self.charted:
            self.next_charts = time.perf_counter() + max(CHART_EVERY_S, COST_X * seconds)
        else:
            self.frame_s = max(FRAME_S, COST_X * seconds)

    def final(self, trace: Trace, phase: str) -> View:
        note = self.annotate.trace(trace, settle=True)  # the decode is over: re-measure ceilings a pass beat
        if note:  # replaces the live charts' "too low" warning; keeps the CPU-regime verdict
            regime = self.roof.get("cpu_regime", {}).get("explanation")
            self.roof |= self.annotate.ceilings.to_dict() | {"note": " ".join(filter(None, (regime, note)))}
            self.warned = True
        view = self.view(trace, phase, finished=True)
        json_path, csv_path = write_exports(trace)
        record = Record(trace, token_texts(trace, self.pair.tokenizer))
        return view._replace(summary=summary_json(trace, self.roof),
                             step=gr.update(maximum=max(len(trace.steps) - 1, 1), value=0),
                             position=position_slider(trace),
                             json_file=json_path, csv_file=csv_path, record=record)

def position_slider(trace: Trace) -> dict:
    """The inspector's draft-position slider spans 1..the run's largest γ (a slider needs
    minimum < maximum: with γ = 1 it spans 1..2 and is locked at 1)."""
    gamma = max((s.gamma for s in trace.steps), default=1)
    return gr.update(maximum=max(gamma, 2), value=1, interactive=gamma > 1)


def in_background(iterator: Iterator, min_interval: Callable[[], float] = lambda: 0.0):
    """Run `iterator` in its own thread and yield its newest item when the consumer is ready,
    at most once per min_interval() seconds (asked after each item): a slow consumer (drawing,
    the network) skips items instead of slowing the producer, and a fast one does not fight it
    for the GIL (a thread that keeps the GIL busy makes every torch op of the producer wait to
    get it back).
    Re-raises the producer's exception; ends when the producer does."""
    ready, box = threading.Condition(), {"item": None, "new": False, "done": False, "error": None}

    def produce():
        try:
            same_threads()  # a new thread: apply torch's thread count to it (app.timing)
            for item in iterator:
                with ready:
                    box.update(item=item, new=True)
                    ready.notify()
        except BaseException as exc:  # handed to the consumer, raised there
            box["error"] = exc
        finally:
            with ready:
                box["done"] = True
                ready.notify()

    threading.Thread(target=produce, daemon=True, name="speclab-decode").start()
    last, next_at = None, 0.0
    while True:
        with ready:
            ready.wait_for(lambda: box["done"], timeout=max(0.0, next_at - time.perf_counter()))
            ready.wait_for(lambda: box["new"] or box["done"])
            item, new, done, box["new"] = box["item"], box["new"], box["done"], False
        if box["error"] is not None:
            raise box["error"]
        if new and (not done or item is not last):
            yield item
            last, next_at = item, time.perf_counter() + min_interval()
        if done:
            return
