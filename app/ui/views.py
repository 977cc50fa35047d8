"""The Live tab's outputs as plain values: the `View` a decode yields (one value per output
component, in the order live.py wires them), the pure functions that build its parts from a
Trace, the downloads (trace.json, forwards.csv) and the token inspector's figure. Nothing here
runs a model or a thread: every function is testable without a browser.
"""
from __future__ import annotations

import atexit
import csv
import os
import shutil
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import NamedTuple

import visualizations as viz
from app import metrics
from app.engine import summarize
from app.runner import DecodeRequest
from app.trace import Trace, shown_text

CSV_FIELDS = ("step", "model", "phase", "batch", "tokens", "kv_len", "seconds", "flops", "bytes", "bound",
              "weights")
KEEP_EXPORTS = 64  # export folders kept on disk (oldest removed first)
# how long a run's downloads (the app's files and Gradio's copies) and its inspector data are kept
KEEP_S = max(1.0, float(os.environ.get("SPECLAB_KEEP_S", "3600")))
SWEEP_S = min(60.0, KEEP_S / 2)  # downloads older than KEEP_S are looked for this often

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
    position: object   # gr.Slider: the inspector's draft position (its maximum: the run's largest γ)
    record: object     # gr.State: Record, for the inspector


@dataclass
class Record:
    """What the inspector needs after a run: the trace and the text of every token it shows."""
    trace: Trace
    token_text: dict[int, str]

# --------------------------------------------------------------------------- pure views

def stream_html(trace: Trace, finished: bool) -> str:
    """The prompt and every decided token so far, escaped by the visualization builders."""
    pieces = [p for s in trace.steps for p in s.pieces]
    return viz.prompt_html(trace.prompt) + viz.token_stream_html(pieces, finished=finished)


def plain_text(trace: Trace) -> str:
    """The output text: the tokenizer's decode once finished, the emitted pieces before (special
    tokens left out, as the decode leaves them)."""
    if trace.stopped:  # set last, after output_text
        return trace.output_text
    return shown_text(p for s in trace.steps for p in s.pieces)


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
    m = metrics.summary(trace)  # the serving engines' terms and the interleaved speed-up's spread
    out |= {k: m[k] for k in ("mean_acceptance_length", "per_position_acceptance", "speedup_spread",
                              "speedup_notes")}
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
_served: list[set[str]] = []  # Gradio's copies of the exports: the download buttons' temp_files
_sweeper: threading.Thread | None = None


def export_root() -> Path:
    """The app's own folder for downloads (created once per process, removed at exit; Gradio
    serves its own copies of the files it was handed, and nothing else from here)."""
    global _export_root
    if _export_root is None:
        _export_root = Path(tempfile.mkdtemp(prefix="speclab-exports-"))
        atexit.register(shutil.rmtree, _export_root, ignore_errors=True)
    return _export_root


def expire_downloads(buttons) -> None:
    """Delete the exports and Gradio's copies of them (those these gr.DownloadButtons served)
    once older than KEEP_S: one thread per process looks every SWEEP_S seconds; the copies left
    at exit go then. Not Gradio's delete_cache: its sweep iterates the same sets in a worker
    thread, and the first file cached meanwhile ends it for good ("Set changed size during
    iteration"). The buttons must never get an update (gr.skip() included): Gradio answers
    one with a new component per session, whose copies these sets never see."""
    global _sweeper
    _served.extend(button.temp_files for button in buttons)
    if _sweeper is None:
        _sweeper = threading.Thread(target=_sweep_forever, daemon=True, name="speclab-downloads")
        _sweeper.start()
        atexit.register(sweep, 0.0)


def _sweep_forever() -> None:
    while True:
        time.sleep(SWEEP_S)
        try:
            sweep()
        except Exception:  # noqa: BLE001 - one failed sweep must not end the next ones
            traceback.print_exc()


def sweep(keep_s: float | None = None) -> None:
    """Delete export folders, and Gradio's copies of exports, older than keep_s (KEEP_S)."""
    keep_s = KEEP_S if keep_s is None else keep_s
    if _export_root is not None and _export_root.is_dir():  # at exit, it may be gone already
        _prune(_export_root, keep_s)
    expired = time.time() - keep_s
    for paths in list(_served):
        for path in tuple(paths):  # a copy: Gradio adds paths from its event loop meanwhile
            try:
                if os.stat(path).st_mtime >= expired:
                    continue
                os.remove(path)
                os.rmdir(os.path.dirname(path))  # Gradio's folder for this copy, if now empty
            except OSError:  # gone already, or its folder holds other files
                pass
            paths.discard(path)


def write_exports(trace: Trace, root: Path | None = None) -> tuple[str, str]:
    """trace.json and forwards.csv in a new folder under the export root; old ones pruned.
    Gradio serves its own copies of these (deleted KEEP_S after they were made: sweep())."""
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


def _prune(root: Path, keep_s: float | None = None) -> None:
    """Remove export folders older than keep_s (KEEP_S), and all but the newest KEEP_EXPORTS."""
    folders = []
    for folder in root.iterdir():
        try:
            folders.append((folder.stat().st_mtime, folder))
        except FileNotFoundError:  # pruned by a run on another device meanwhile
            continue
    folders.sort()
    expired = time.time() - (KEEP_S if keep_s is None else keep_s)
    for i, (made, folder) in enumerate(folders):
        if i < len(folders) - KEEP_EXPORTS or made < expired:
            shutil.rmtree(folder, ignore_errors=True)

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
