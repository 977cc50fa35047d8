"""Handlers of the Live tab: the decode generator and the small functions around it.

The decode generator turns the engine's growing Trace into a `View` (one value per output
component, in `View._fields` order; live.py wires the components in that order). Everything
but `decode` itself is a plain function of plain values, testable without a browser.

The engine runs in its own thread (`in_background`); the handler renders its newest state
whenever Gradio asks for the next update, so drawing and sending never stall the decode.
Cheap outputs (the token stream, the status line) change with every update; the charts and
the live stats are rebuilt at most every CHART_EVERY_S seconds (and once at the end). Each kind
of update is also paced by its own measured cost (making it here plus Gradio's sending it, the
time from building a View to being asked for the next): at most 1/COST_X of the time goes to
either, because that work holds the GIL the decode thread needs.
"""
from __future__ import annotations

import atexit
import csv
import gc
import html
import os
import re
import shutil
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import gradio as gr

import visualizations as viz
from app.engine import summarize
from app.models import resolve_device
from app.timing import same_threads
from app.trace import Trace
from app import annotate, roofline, runner
from app.ui import turns
from app.ui.turns import device_choices  # the Live tab's device dropdown
from app.runner import DecodeRequest
from app.settings import InputError, ModelLoadError
from app.presets import PRESETS

FRAME_S = 0.25       # at most four updates a second: enough for the eye...
CHART_EVERY_S = 2.0  # charts (and live stats) redrawn at most this often while decoding...
COST_X = 30          # ...and each kind of update takes at most 1/30 of the time (measured)
CSV_FIELDS = ("step", "model", "phase", "batch", "tokens", "kv_len", "seconds", "flops", "bytes", "bound",
              "weights")
KEEP_EXPORTS = 64  # export folders kept on disk (oldest removed first)
REPO_ROOT = str(Path(__file__).resolve().parents[2])

Loader = runner.Loader  # (preset, device=, dtype=, ngram=) -> ModelPair


class View(NamedTuple):
    """The decode event's outputs, in the order live.py wires them."""
    stream: object     # gr.HTML: prompt + coloured tokens (+ end marker when finished)
    status: object     # gr.Markdown: one line on what is happening
    timeline: object   # gr.Plot: step_timeline
    roofline: object   # gr.Plot: roofline_figure
    stats: object      # gr.Markdown: stats_markdown
    text: object       # gr.Textbox: the generated text, plain
    summary: object    # gr.JSON: summary, stop reason, settings
    step: object       # gr.Slider: the inspector's step (its maximum grows)
    json_file: object  # gr.DownloadButton: the trace as JSON
    csv_file: object   # gr.DownloadButton: one row per forward pass
    record: object     # gr.State: Record, for the inspector


@dataclass
class Record:
    """What the inspector needs after a run: the trace and the text of every token it shows."""
    trace: Trace
    token_text: dict[int, str]


# --------------------------------------------------------------------------- choices

def pair_choices() -> list[tuple[str, str]]:
    """(label, preset name) for the model-pair dropdown, in PRESETS order (embedded first)."""
    return [(_label(p), name) for name, p in PRESETS.items()]


def _label(preset) -> str:
    """The preset's label; a plain one when it cannot be computed (e.g. the embedded pair is
    not on disk yet: loading it will then say so)."""
    try:
        return preset.label
    except Exception:  # noqa: BLE001 - a label must never keep the app from starting
        hints = {"hub": "needs a download", "shape": "shape-only: random weights"}
        return f"{preset.name} ({hints.get(preset.kind, 'offline')})"


def fast_path_note(devices: list[str]) -> str:
    from app.fastpath import describe
    return describe("cuda" if "cuda" in devices else devices[-1] if devices[-1] != "auto" else "cpu")


# --------------------------------------------------------------------------- inputs

DRAFT_INT8_NOTE = ("the draft reads a quarter of its fp32 bytes per pass (weight-only int8 per row, "
                   "app.lean.Int8Weight): a cheaper, slightly different draft; the output is "
                   "still exactly the target's")


def safe_message(exc: Exception) -> str:
    """The first line of an error message (the last line of a captured traceback), with
    filesystem paths cut down to what a user needs (repository-relative, or a file name):
    nothing of the server's layout leaks.
    Out-of-memory errors say so first, with what to try, then the first sentence of torch's."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback"):  # a captured traceback: keep its last line
        lines = [line for line in lines[1:] if not line[0].isspace()][-1:]
    text = (lines or [type(exc).__name__])[0][:300]
    # installed packages (a virtualenv may sit inside the repository): just the file name
    text = re.sub(r"(?<![\w.])/[^\s:'\"]*/(?:site|dist)-packages/(?:[^\s:'\"]*/)?([^\s/:'\"]+)", r"\1", text)
    text = text.replace(REPO_ROOT + os.sep, "").replace(REPO_ROOT, ".")
    text = re.sub(r"(?<![\w.])(/[^\s/:'\"]+)+/([^\s/:'\"]+)", r"\2", text)
    if is_out_of_memory(exc):
        return ("out of memory: try a smaller model pair, fewer max new tokens, a smaller γ or "
                f"the CPU ({text.split('. ')[0][:120]})")
    return text


def user_error(message: str, request=None) -> gr.Error:
    """gr.Error with `message` (which may quote user input, e.g. an unknown preset name): HTML
    escaped for the app's page, whose toast renders HTML; plain for an API client, which reads
    it as text (an install command quoted in it stays runnable). `request`: the event's
    gr.Request; without one the message is escaped."""
    return gr.Error(html.escape(message, quote=False) if from_page(request) else message,
                    print_exception=False)


def from_page(request) -> bool:
    """Whether `request` (a gr.Request, or None when unknown) comes from the app's page: Gradio's
    front end sends the header x-gradio-user: app, gradio_client "api", MCP "mcp", plain HTTP
    none. Unknown (no request, or no headers) counts as the page: escaping is the safe side."""
    headers = None if request is None else getattr(request, "headers", None)
    return headers is None or headers.get("x-gradio-user") == "app"


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA (torch.OutOfMemoryError), MPS and CPU allocator failures, and MemoryError."""
    import torch
    if isinstance(exc, (MemoryError, getattr(torch, "OutOfMemoryError", MemoryError))):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def release_memory(exc: BaseException | None = None) -> None:
    """After a failed run: drop what the exception's frames still hold (KV caches, logits),
    collect, and hand cached accelerator memory back (torch.cuda.empty_cache)."""
    import torch
    seen = set()
    while exc is not None and id(exc) not in seen:  # the exception and its causes
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    mps = getattr(torch, "mps", None)
    if mps is not None and torch.backends.mps.is_available():
        mps.empty_cache()


# --------------------------------------------------------------------------- pure views

def stream_html(trace: Trace, finished: bool) -> str:
    """The prompt and every decided token so far, escaped by the visualization builders."""
    pieces = [p for s in trace.steps for p in s.pieces]
    return viz.prompt_html(trace.prompt) + viz.token_stream_html(pieces, finished=finished)


def plain_text(trace: Trace) -> str:
    """The output text: the tokenizer's decode once finished, the emitted pieces before."""
    if trace.stopped:  # set last, after output_text
        return trace.output_text
    return "".join(p.text for s in trace.steps for p in s.pieces if p.fate != "rejected")


def live_trace(trace: Trace, seconds: float) -> Trace:
    """The trace with a provisional summary, so stats can be shown while decoding."""
    if trace.summary is not None:
        return trace
    return replace(trace, summary=summarize(trace.steps, seconds))


def csv_rows(trace: Trace) -> list[dict]:
    """One row per forward pass (speculative run, then baseline) with CSV_FIELDS."""
    runs = [("speculative", trace.steps)] + ([("baseline", trace.baseline.steps)] if trace.baseline else [])
    rows = []
    for name, steps in runs:
        for step in steps:
            for f in step.forwards:
                rows.append({"run": name, "step": step.index, "model": f.model, "phase": f.phase,
                             "batch": f.batch, "tokens": f.tokens, "kv_len": f.kv_len,
                             "seconds": f.seconds, "flops": f.flops, "bytes": f.bytes, "bound": f.bound,
                             "weights": f.weights or "model dtype"})
    return rows


def summary_json(trace: Trace, ceilings: dict | None = None) -> dict:
    """Plain values for the API: summary, stop reason, settings, device, baseline."""
    out = {"output_text": plain_text(trace), "new_tokens": len(trace.output_ids),
           "stopped": trace.stopped, "settings": trace.settings, "device": trace.device,
           "summary": asdict(trace.summary) if trace.summary else None, "baseline": None,
           "speedup": viz.speedup(trace)}
    if trace.baseline is not None:
        b = trace.baseline
        out["baseline"] = {"tokens_per_s": b.tokens_per_s, "seconds": b.seconds,
                           "identical": b.identical, "new_tokens": len(b.output_ids)}
    if ceilings:
        out["ceilings"] = ceilings
    return out


def token_texts(trace: Trace, tokenizer) -> dict[int, str]:
    """Text of every token id the inspector may show (drafted, top-k, residual, emitted)."""
    ids = set()
    for step in trace.steps:
        ids.update(step.draft_ids, step.emitted_ids)
        for c in step.checks:
            ids.update(c.top_ids, c.residual_ids)
    return {i: tokenizer.decode([i]) for i in sorted(ids)}


def status_line(trace: Trace, req: DecodeRequest, phase: str) -> str:
    """One Markdown line: what is running where, and how far it got (no user text in it)."""
    where = f"{trace.device.get('device', '?')}, {trace.device.get('dtype', '?')}"
    done = f"{len(trace.output_ids)} tokens in {len(trace.steps)} steps"
    from app.fastpath import label
    note = f" · fast path: {label(trace.device['device'])}" if req.settings.fast and trace.device.get("device") else ""
    note += " · draft: int8 weights" if req.settings.draft_int8 else ""
    return f"**{phase}** · {where} · {done}{note}"


def end_phase(trace: Trace) -> str:
    return {"eos": "Finished (end of text)", "max_new_tokens": "Finished (max new tokens)",
            "cancelled": "Stopped"}.get(trace.stopped, "Finished")


# --------------------------------------------------------------------------- exports

_export_root: Path | None = None


def export_root() -> Path:
    """The app's own folder for downloads (created once per process, removed at exit; Gradio
    serves its own copies of the files it was handed, and nothing else from here)."""
    global _export_root
    if _export_root is None:
        _export_root = Path(tempfile.mkdtemp(prefix="speclab-exports-"))
        atexit.register(shutil.rmtree, _export_root, ignore_errors=True)
    return _export_root


def write_exports(trace: Trace, root: Path | None = None) -> tuple[str, str]:
    """trace.json and forwards.csv in a new folder under the export root; old ones pruned."""
    root = root or export_root()
    folder = root / uuid.uuid4().hex[:12]
    folder.mkdir(parents=True)
    json_path, csv_path = folder / "trace.json", folder / "forwards.csv"
    json_path.write_text(trace.to_json())
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=("run",) + CSV_FIELDS)
        writer.writeheader()
        writer.writerows(csv_rows(trace))
    _prune(root)
    return str(json_path), str(csv_path)


def _prune(root: Path) -> None:
    folders = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for old in folders[:-KEEP_EXPORTS]:
        shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- stop

_cancels: dict[str, threading.Event] = {}


def stop(request: gr.Request | None = None) -> None:
    """Ask this session's running decode to end after its current step."""
    key = getattr(request, "session_hash", None)
    if key in _cancels:
        _cancels[key].set()


def _cancel_flag(request) -> tuple[str | None, threading.Event]:
    key, flag = getattr(request, "session_hash", None), threading.Event()
    if key is not None:
        _cancels[key] = flag
    return key, flag


# --------------------------------------------------------------------------- inspector

def inspect(record: Record | None, step: float, position: float):
    """The verification inspector for one step and draft position (1-based, clamped)."""
    if record is None or not record.trace.steps:
        return viz.inspector_figure(_empty_step(), None)
    steps = record.trace.steps
    event = steps[min(max(int(step or 0), 0), len(steps) - 1)]
    pos = None if not event.checks else min(max(int(position or 1), 1), len(event.checks)) - 1
    return viz.inspector_figure(event, pos, token_text=record.token_text)


def _empty_step():
    from app.trace import StepEvent
    return StepEvent(index=0, gamma=0, draft_ids=[], q_draft=[], checks=[], n_accepted=0,
                     emitted_ids=[], pieces=[], forwards=[])


# --------------------------------------------------------------------------- decode

class _Run:
    """The state of one decode in progress: what to draw, and when. Charts are first drawn
    CHART_EVERY_S seconds in (a short decode draws them once, at the end), then again at most
    every CHART_EVERY_S seconds; text updates come at most every FRAME_S seconds. Each kind
    waits at least COST_X times what its last update cost (sent(): built and sent), so drawing
    (plotly is slow) and sending never take more than 1/COST_X of the decode's time each."""

    def __init__(self, req: DecodeRequest, pair, ceilings, regime=None):
        self.req, self.pair, self.ceilings = req, pair, ceilings
        self.annotate = annotate.Annotator(pair, ceilings)
        self.roof = ceilings.to_dict()  # what the roofline figure and the API show
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
        view = View(stream=stream_html(trace, finished), status=status_line(trace, self.req, phase),
                    timeline=skip, roofline=skip, stats=skip, text=plain_text(trace),
                    summary=skip, step=skip, json_file=skip, csv_file=skip, record=skip)
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
                             json_file=json_path, csv_file=csv_path, record=record)


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


def decode(inputs: tuple, *, loader: Loader, request=None, progress=None):
    """Generator: validate, wait for the device's turn (app.ui.turns), load, decode; yields a
    View after every step and a final one with the end marker. Bad input raises gr.Error
    before anything is yielded."""
    if progress is None:  # not `progress or ...`: a gr.Progress with nothing tracked is falsy
        progress = lambda *a, **k: None  # noqa: E731
    try:
        req = runner.parse_request(*inputs, devices=device_choices())
        device = resolve_device(req.device)
    except (InputError, ModelLoadError, ValueError) as exc:  # bad input, no such device
        raise user_error(safe_message(exc), request) from None
    with turns.turn(device, waiting=lambda message: progress(0.0, desc=message)):
        yield from _decode(req, loader, request, progress)


def _decode(req: DecodeRequest, loader: Loader, request, progress):
    try:
        prepared = runner.prepare(req, loader, progress)
    except (InputError, ModelLoadError, ValueError) as exc:  # bad input, missing model
        raise user_error(safe_message(exc), request) from None
    except Exception as exc:  # e.g. out of memory while loading: say so, stay up  # noqa: BLE001
        message = safe_message(exc)
        release_memory(exc)
        raise user_error(f"could not start: {message}", request) from None
    key, flag = _cancel_flag(request)
    state, trace = _Run(req, prepared.pair, prepared.ceilings, prepared.regime), None
    frames = in_background(runner.start(prepared, req, cancel=flag.is_set), min_interval=lambda: state.frame_s)
    try:
        for trace in frames:
            began = time.perf_counter()
            yield state.view(trace, _phase(trace, req))
            state.sent(time.perf_counter() - began)
        # the finished text first (the end marker: every token is on the page), then the final
        # charts, stats and exports, which take a few hundred ms to draw and write
        yield state.view(trace, end_phase(trace) + " · drawing the charts", finished=True, charts=False)
        yield state.final(trace, end_phase(trace))
    except Exception as exc:  # a failure mid-run: end the stream visibly, then say why
        yield from _failed(state, trace, req, exc, request)
    finally:
        flag.set()  # if the consumer went away mid-run, the decode thread stops after its step
        if key is not None and _cancels.get(key) is flag:
            del _cancels[key]


def _phase(trace: Trace, req: DecodeRequest) -> str:
    if trace.summary is not None and req.baseline and trace.baseline is None:
        return "Running the baseline (target only)…"
    return "Decoding…"


def _failed(state: _Run, trace: Trace | None, req: DecodeRequest, exc: Exception, request=None):
    """End the stream visibly, free what the failed run held, then raise the error."""
    message = safe_message(exc)
    release_memory(exc)
    trace = trace or Trace(prompt=req.prompt, settings={}, prompt_ids=[])
    trace.stopped = f"error: {message}"
    yield state.view(trace, "Error", finished=True)
    raise user_error(f"decoding failed: {message}", request) from None
