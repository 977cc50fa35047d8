"""The Replay tab: a recorded run (the gallery's, or an uploaded trace.json) streamed again with
the Live tab's views, and two recorded runs compared side by side. No model is loaded and no
device turn is taken, so any number of visitors can replay at once.

Every number shown comes from a trace file and says so: `provenance()` names the device (its
measured ceilings), the date, the commit and how loaded the machine was.
The headline numbers are app.metrics' (vLLM's and llama.cpp's definitions). A run's speed-up is
the median of its own interleaved speculative/plain pairs with their range (metrics.speedup_text);
beside it, the spread over the gallery's runs of the same pair, device and settings
(`speedup_spread`: across prompts).

`gpu_fallback(values, message)` is what the Live tab shows when ZeroGPU lends no GPU
(app.spaces.wrap_decode): the recorded run closest to the request, with the reason.
"""
from __future__ import annotations

import html
import re
import time
from dataclasses import replace

import gradio as gr

import visualizations as viz
from app import metrics
from app.lessons.verdict import Spread
from app.recorded import closest_recorded, gallery, gallery_trace, load_trace
from app.trace import Trace
from app.ui import views
from app.ui.stream import position_slider
from app.ui.views import Record, View
from app.validation import InputError

PACES = {"slow motion (10× slower)": 10.0, "recorded pace": 1.0, "instant": 0.0}  # x recorded seconds
MAX_REPLAY_S = 60.0  # a replay is sped up to last at most this long
FRAME_S = 0.1        # at most ten stream updates a second
REPLAYED = "__replayed__"  # the compare dropdowns' value for the run replayed above
CSS = "#sd-replay-stream .sd-stream { font-size: 1.3rem; min-height: 4em; }"


def _md(text) -> str:
    """A string from a trace file, safe in Markdown: HTML escaped, Markdown's marks and table
    bars backslashed, one line, at most 80 characters."""
    text = " ".join(str(text).split())
    text = text if len(text) <= 80 else text[:77] + "..."
    return re.sub(r"([\\`*_{}\[\]()#+!|~>-])", r"\\\1", html.escape(text, quote=False))


def entry_label(e: dict) -> str:
    """A gallery entry as the dropdowns show it: device, pair, gamma, prompt."""
    s = e.get("settings") or {}
    return f"{e.get('device_name') or e.get('device')} · {e.get('pair')} · γ {s.get('gamma')} · {e.get('prompt', '')[:48]!r}"


def choices(with_replayed: bool = False) -> list[tuple[str, str]]:
    return [(entry_label(e), e["file"]) for e in gallery()] + \
        ([("the run replayed above (gallery or upload)", REPLAYED)] if with_replayed else [])


def entry_of(file: str) -> dict:
    for entry in (e for e in gallery() if e["file"] == file):
        return entry
    raise InputError(f"{file!r} is not a run of the gallery: choose one from the list")


def provenance(trace: Trace, source: str) -> str:
    """One Markdown line: which file, recorded where (device, dtype, measured ceilings), when,
    at which commit, on how loaded a machine."""
    d, r = trace.device or {}, trace.recorded or {}
    m = d.get("measured") if isinstance(d.get("measured"), dict) else {}
    where = f"{_md(d.get('device_name') or '?')} ({_md(d.get('device') or '?')}, {_md(d.get('dtype') or '?')})"
    if m.get("bytes_per_s") and m.get("flops_per_s"):
        where += f", measured {m['bytes_per_s'] / 1e9:.1f} GB/s and {m['flops_per_s'] / 1e9:.1f} GFLOP/s"
    when = f"recorded {_md(r['date'])}" if r.get("date") else "date not recorded"
    commit = f"commit {_md(str(r['commit'])[:10])}" + (" (dirty)" if r.get("dirty") else "") if r.get("commit") else "commit not recorded"
    load = f"1-min load {r['load_average_1min']}" if isinstance(r.get("load_average_1min"), (int, float)) else "load not recorded"
    threads = f", {r['threads']} torch thread(s)" if isinstance(r.get("threads"), int) else ""
    return f"**{_md(source)}** · {where} · {when} · {commit} · {load}{threads}"


def token_text(trace: Trace) -> dict[int, str]:
    """Text of the token ids the trace's pieces carry (the inspector's labels; other ids show as
    numbers: a replay has no tokenizer)."""
    return {p.token_id: p.text for s in trace.steps for p in s.pieces}


def frames(trace: Trace, pace: float, sleep=time.sleep):
    """(steps shown, trace so far) at the recorded pace x `pace` (0: at once): each step waits
    its share of the run's wall clock (in proportion to its forward passes' seconds), the whole
    replay sped up to last at most MAX_REPLAY_S."""
    total = sum(s.seconds for s in trace.steps)
    wall = max(metrics.wall_seconds(trace)[0], total)
    scale = min(pace * wall, MAX_REPLAY_S) / total if total > 0 else 0.0
    due = 0.0
    for n, step in enumerate(trace.steps, 1):
        due += step.seconds * scale
        if due >= FRAME_S and n < len(trace.steps):
            sleep(due)
            due = 0.0
            yield n, replace(trace, steps=trace.steps[:n], summary=None, baseline=None, stopped="",  # as it stood
                             output_ids=[i for s in trace.steps[:n] for i in s.emitted_ids])
    yield len(trace.steps), trace


def live_view(trace: Trace, status: str) -> View:
    """A finished recorded run as the Live tab's outputs (views.View): the same builders."""
    return View(stream=views.stream_html(trace, finished=True), status=status,
                timeline=viz.step_timeline(trace), roofline=viz.roofline_figure(trace.all_forwards(), trace.device),
                stats=viz.stats_markdown(trace), text=views.plain_text(trace),
                summary=views.summary_json(trace, trace.device) | {"recorded": trace.recorded},
                step=gr.update(maximum=max(len(trace.steps) - 1, 1), value=0), json_file=None, csv_file=None,
                position=position_slider(trace), record=Record(trace, token_text(trace)))


def gpu_fallback(values: tuple, message: str):
    """The Live tab's answer when ZeroGPU lends no GPU: the recorded run closest to the request
    (app.recorded.closest_recorded), or the gallery's first, with why."""
    from app.runner import INPUTS
    v = dict(zip(INPUTS, values))
    gamma = v.get("gamma") if isinstance(v.get("gamma"), int) else 4
    entry = closest_recorded(str(v.get("prompt") or ""), str(v.get("preset") or ""), gamma) or next(iter(gallery()), None)
    if entry is None:
        raise gr.Error(f"no GPU now ({message}) and no recorded run to show instead", print_exception=False)
    trace = gallery_trace(entry)
    yield live_view(trace, f"**No GPU now** ({_md(message)}) · instead, a recorded run: {provenance(trace, entry['file'])}")


def speedup_spread(trace: Trace) -> Spread | None:
    """Speed-ups of the gallery's runs with this trace's pair, device, dtype and settings (gamma,
    fast path, int8 draft): the spread across prompts; None when no gallery run matches."""
    s, d = trace.settings or {}, trace.device or {}
    key = ((trace.recorded or {}).get("pair"), d.get("device"), d.get("device_name"), d.get("dtype"),
           s.get("gamma"), s.get("fast"), s.get("draft_int8"))
    found = [e["speedup"] for e in gallery() if e.get("speedup") and key == (
        e.get("pair"), e.get("device"), e.get("device_name"), e.get("dtype"), e["settings"].get("gamma"),
        e["settings"].get("fast"), e["settings"].get("draft_int8"))]
    return Spread.of(found) if found else None


def _f(x, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def compare_rows(trace: Trace) -> list[str]:
    """One run's column of the comparison table, every number with its source."""
    s, st = metrics.summary(trace), trace.settings or {}
    spread = speedup_spread(trace)
    base = s["baseline"]
    mode = "greedy" if st.get("temperature") == 0 else f"T = {st.get('temperature')}"
    fast = ("fast path" if st.get("fast") else "plain") + (", int8 draft" if st.get("draft_int8") else "")
    by_class = ", ".join(f"{k} {v / s['seconds']:.0%}" for k, v in s["time_by_class_s"].items() if v and s["seconds"])
    return [
        _md(trace.prompt),
        f"{_md(s['pair'] or 'not recorded')} · γ {st.get('gamma')} · {mode} · {fast}",
        f"{_f(s['tokens_per_s'], '.1f')} tokens/s ({s['new_tokens']} tokens in {s['seconds']:.2f} s, {s['seconds_from']})",
        f"{base['tokens_per_s']:.1f} tokens/s (target alone, same prompt)" if base else "no baseline run",
        metrics.speedup_text(s) + "".join(f"; {n}" for n in s["speedup_notes"]),
        f"{spread.text('×')} over the gallery's {spread.n} run(s) of this pair, device and settings" if spread else "no gallery runs alike",
        f"{_f(s['mean_acceptance_length'], '.2f')} (1 + {s['accepted']} accepted / {s['drafting_steps']} drafting steps)",
        f"{_f(s['draft_acceptance_rate'], '.1%')} ({s['accepted']} of {s['drafted']} drafted tokens)",
        " · ".join(f"{i + 1}: {x:.2f}" for i, x in enumerate(s["per_position_acceptance"])) or "n/a",
        f"{_f(s['tokens_per_target_pass'], '.2f')} ({s['new_tokens']} tokens / {s['target_passes']} target passes)",
        by_class or "no timed passes",
    ]


ROWS = ("prompt", "pair and settings", "throughput", "baseline", "speed-up, this run", "speed-up, gallery runs alike",
        "mean acceptance length",
        "draft acceptance rate", "acceptance by position", "tokens per target pass", "time by class")


def compare_markdown(a: tuple[str, Trace], b: tuple[str, Trace]) -> str:
    """Two runs side by side: provenance lines, then one row per number (app.metrics)."""
    (name_a, ta), (name_b, tb) = a, b
    lines = [f"Run A: {provenance(ta, name_a)}", "", f"Run B: {provenance(tb, name_b)}", "",
             "| | A | B |", "|---|---|---|"]
    lines += [f"| {r} | {x} | {y} |" for r, x, y in zip(ROWS, compare_rows(ta), compare_rows(tb))]
    ra, rb = metrics.summary(ta)["tokens_per_s"], metrics.summary(tb)["tokens_per_s"]
    if ra and rb:
        lines += ["", f"B's throughput is **{rb / ra:.2f}×** A's (each run's wall clock; its machine "
                      "and load are in the lines above)."]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the tab

def _replay(trace: Trace, source: str, pace: str):
    """(status, stream, stats, text, timeline, roofline, step, record) as the replay goes: the
    stream and text after each frame, the charts, stats and inspector's data at the end."""
    where, skip = provenance(trace, source), gr.skip()
    for n, shown in frames(trace, PACES.get(pace, 0.0)):
        if shown is not trace:
            yield (f"Replaying step {n} of {len(trace.steps)}: {where}", views.stream_html(shown, False), skip,
                   views.plain_text(shown), skip, skip, skip, skip)
    v = live_view(trace, f"Replayed: {where}")
    yield (v.status, v.stream, v.stats, v.text, v.timeline, v.roofline, v.step, v.record)


def replay_gallery(file: str, pace: str):
    """Replay a gallery run (the dropdown's file)."""
    try:
        entry, trace = entry_of(file), gallery_trace(entry_of(file))
    except InputError as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    yield from _replay(trace, entry["file"], pace)


def replay_upload(path: str | None, pace: str):
    """Replay an uploaded trace.json, checked by app.recorded.load_trace first: a bad file gets
    one line and changes nothing."""
    if not path:
        return
    name = re.split(r"[\\/]", str(path))[-1]
    try:
        trace = load_trace(path, name=name)
    except InputError as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    yield from _replay(trace, f"upload {name}", pace)


def _resolve(choice: str, record: Record | None) -> tuple[str, Trace]:
    if choice == REPLAYED:
        if record is None:
            raise InputError("nothing was replayed yet: replay a run (or upload one) first")
        return "the run replayed above", record.trace
    return choice, gallery_trace(entry_of(choice))


def compare(a: str, b: str, record: Record | None):
    """The comparison table, then both runs' rooflines and step timelines."""
    try:
        (na, ta), (nb, tb) = _resolve(a, record), _resolve(b, record)
    except InputError as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    return (compare_markdown((na, ta), (nb, tb)), viz.roofline_figure(ta.all_forwards(), ta.device),
            viz.roofline_figure(tb.all_forwards(), tb.device), viz.step_timeline(ta), viz.step_timeline(tb))


def counterpart(file: str) -> str | None:
    """The gallery run that pairs best with `file` for a comparison: the same prompt on another
    device, else at another gamma, else the same pair on another prompt."""
    me, others = next((e for e in gallery() if e["file"] == file), None), [e for e in gallery() if e["file"] != file]
    if me is None:
        return None
    for alike in (lambda e: e["prompt"] == me["prompt"] and e["device"] != me["device"],
                  lambda e: e["prompt"] == me["prompt"], lambda e: e["pair"] == me["pair"], lambda e: True):
        found = [e["file"] for e in others if alike(e)]
        if found:
            return found[0]
    return None


def build() -> None:
    """Lay out the Replay / Compare tab and wire it (private events: no API endpoints)."""
    runs = choices()
    first = runs[0][1] if runs else None
    gr.HTML(f"<style>{CSS}</style>", padding=False)
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            pick = gr.Dropdown(runs, value=first, label="Recorded run (demo_models/recorded)")
            pace = gr.Radio(list(PACES), value="slow motion (10× slower)", label="Pace")
            play = gr.Button("Replay", variant="primary", size="lg")
            upload = gr.File(label="…or replay your own trace.json (the Live tab's export)",
                             file_types=[".json"], type="filepath")
        with gr.Column(scale=2):
            gr.HTML(viz.legend_html())
            status = gr.Markdown("Pick a recorded run and press **Replay**: no model is loaded.",
                                 elem_id="sd-replay-status")
            stream = gr.HTML(elem_id="sd-replay-stream", max_height=480)
            stats = gr.Markdown(elem_id="sd-replay-stats")
            text = gr.Textbox(label="Generated text", lines=2, interactive=False)
    with gr.Row(equal_height=True):
        timeline, roofline = gr.Plot(None, show_label=False), gr.Plot(None, show_label=False)
    with gr.Row():
        step = gr.Slider(0, 1, value=0, step=1, label="Inspector: step")
        position = gr.Slider(1, 16, value=1, step=1, label="Draft position in the step")
    inspector = gr.Plot(views.inspect(None, 0, 1), show_label=False)
    record = gr.State(None)
    gr.Markdown("### Compare two recorded runs\nEach number comes from its run's trace file; "
                "the lines above the table say where and when each was recorded.")
    with gr.Row():
        run_a = gr.Dropdown(choices(True), value=first, label="Run A")
        run_b = gr.Dropdown(choices(True), value=counterpart(first) if first else None, label="Run B")
        go = gr.Button("Compare", variant="primary")
    table = gr.Markdown(elem_id="sd-compare")
    with gr.Row(equal_height=True, elem_id="sd-compare-rooflines"):
        roof_a, roof_b = gr.Plot(None, label="Run A"), gr.Plot(None, label="Run B")
    with gr.Row(equal_height=True):
        steps_a, steps_b = gr.Plot(None, label="Run A"), gr.Plot(None, label="Run B")
    outputs = [status, stream, stats, text, timeline, roofline, step, record]
    light = {"api_visibility": "private", "concurrency_id": "replay", "concurrency_limit": 16}
    for event in (play.click(replay_gallery, [pick, pace], outputs, **light),
                  upload.upload(replay_upload, [upload, pace], outputs, **light)):
        event.then(views.inspect, [record, step, position], inspector, api_visibility="private")
    for slider in (step, position):
        slider.release(views.inspect, [record, step, position], inspector, api_visibility="private",
                       concurrency_limit=None)
    run_a.change(lambda f: gr.update(value=counterpart(f) or f) if f != REPLAYED else gr.skip(), run_a, run_b,
                 api_visibility="private", queue=False, show_progress="hidden")
    go.click(compare, [run_a, run_b, record], [table, roof_a, roof_b, steps_a, steps_b], **light)
