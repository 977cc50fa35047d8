"""Handlers of the Live tab: the decode event and the small functions around it (the pair
dropdown's choices, stop, error messages safe to show).

`decode` is: parse the inputs (app.runner.parse_request) -> wait for the device's turn
(app.ui.turns) -> app.runner.prepare -> app.runner.start, streamed to the page in a thread
(app.ui.stream) as `View`s (app.ui.views). Everything but `decode` is a plain function of plain
values, testable without a browser.
"""
from __future__ import annotations

import gc
import html
import os
import re
import threading
import time
import traceback
from pathlib import Path

import gradio as gr

from app import runner
from app.models import resolve_device
from app.runner import DecodeRequest
from app.settings import DEFAULTS, InputError, ModelLoadError
from app.trace import Trace
from app.ui import turns
from app.ui.stream import _Run, in_background
from app.ui.turns import device_choices  # the Live tab's device dropdown
from app.ui.views import end_phase

REPO_ROOT = str(Path(__file__).resolve().parents[2])

Loader = runner.Loader  # (preset, device=, dtype=, ngram=, progress=) -> ModelPair


# --------------------------------------------------------------------------- inputs

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
        return (f"Timing plain decoding against speculative, alternating ({DEFAULTS.rounds} runs of "
                "each) for the speed-up and its range…")
    return "Decoding…"


def _failed(state: _Run, trace: Trace | None, req: DecodeRequest, exc: Exception, request=None):
    """End the stream visibly, free what the failed run held, then raise the error."""
    message = safe_message(exc)
    release_memory(exc)
    trace = trace or Trace(prompt=req.prompt, settings={}, prompt_ids=[])
    trace.stopped = f"error: {message}"
    yield state.view(trace, "Error", finished=True)
    raise user_error(f"decoding failed: {message}", request) from None
