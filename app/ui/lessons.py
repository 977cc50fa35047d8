"""The lesson tabs: a numbered Walkthrough for a class, then one tab per experiment.

    with gr.Blocks():
        with gr.Tabs():
            build_lesson_tabs(get_pair)     # get_pair() -> the currently loaded ModelPair

Handlers are thin: parse the controls (`parse_*`, pure), call `run_lesson` (lesson function +
figure + Markdown), and turn bad input into gr.Error. Formulas are LaTeX in gr.Markdown; gradio
6 renders only $$...$$ by default, so LATEX adds inline $...$.
"""
from __future__ import annotations

from typing import NamedTuple

import gradio as gr

import visualizations.lessons as figures
from app.hardware import DATASHEET
from app.lessons import LESSONS, MIN_REPEATS, LessonError
from app.lessons.lossless import VARIANT_LABELS
from app.lessons.memory_wall import BANDWIDTH, BYTES_PER_PARAM, LLAMA3_70B_KV, PARAMS, PEAK, in_unit
from app.ui import turns

LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]
MEASURED_DEVICE = "this device (measured)"
CUSTOM_DEVICE = "custom bandwidth"


# --------------------------------------------------------------------------- pure helpers

def parse_ints(text, name: str) -> tuple[int, ...]:
    """"1, 2,4" -> (1, 2, 4); anything else -> LessonError naming the field."""
    try:
        values = tuple(int(v) for v in str(text).replace(" ", "").split(",") if v)
    except ValueError:
        raise LessonError(f"{name}: expected comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise LessonError(f"{name}: give at least one number")
    return values


def parse_prompts(text, empty_ok: bool = False) -> tuple[str, ...] | None:
    """One prompt per line; empty_ok: an empty box is None (the lesson takes the pair's own
    prompts: chat questions for an instruct target, app.lessons.common.prompts_for)."""
    prompts = tuple(line for line in str(text or "").splitlines() if line.strip())
    if not prompts and not empty_ok:
        raise LessonError("give at least one prompt (one per line)")
    return prompts or None


def lead(result) -> str:
    """The result's headline with its verdict in plain words first ("Held on this device: …",
    "Did not hold here: …", "Inconclusive: …", app.lessons.verdict.Verdict.text)."""
    head, verdict = result.headline(), getattr(result, "verdict", None)
    if verdict is not None and not head.startswith(verdict.text()):
        head = f"{verdict.text()}\n\n{head}"
    return head


def result_markdown(result) -> str:
    """The verdict and headline, then the summary table."""
    lines = result.summary()[:-1]
    return lead(result) + "\n\n```\n" + "\n".join(lines) + "\n```"


def lesson_figure(lesson, data: dict):
    """The lesson's figure (visualizations.lessons.<lesson.figure_name>) of its result's to_dict()."""
    return getattr(figures, lesson.figure_name)(data)


class Shown(NamedTuple):  # what a lesson run puts on screen
    figure: object
    markdown: str
    data: dict
    headline: str


def run_lesson(name: str, get_pair, kwargs: dict, progress=None, request=None) -> Shown:
    """Run one lesson and render it; bad input (or a failed load) raises gr.Error (one line, no
    paths, escaped for the page: app.ui.handlers.user_error, as the decode's errors)."""
    lesson = LESSONS[name]
    report = (lambda f, m: progress(f, desc=m)) if progress is not None else None
    waiting = (lambda message: report(0.0, message)) if report else None
    try:
        if lesson.needs_pair:
            pair = get_pair()
            with turns.turn(pair.device, waiting):  # timings must not share the device
                result = lesson.function(pair, progress=report, **kwargs)
        else:
            result = lesson.function(**kwargs)
    except (ValueError, OSError, RuntimeError) as exc:  # LessonError, InputError, ModelLoadError, ...
        raise _error(exc, request) from None
    data = result.to_dict()
    return Shown(lesson_figure(lesson, data), result_markdown(result), data, lead(result))


def run_tab(name: str, get_pair, to_kwargs, values: list, request=None, progress=None) -> Shown:
    """A lesson tab's Run: its controls' values -> `to_kwargs` -> run_lesson. Bad values raise
    gr.Error like run_lesson's (TypeError too: the values arrive as an API client sent them)."""
    try:
        kwargs = to_kwargs(*values)
    except (ValueError, TypeError, OSError, RuntimeError) as exc:
        raise _error(exc, request) from None
    return run_lesson(name, get_pair, kwargs, progress, request)


def _error(exc: Exception, request) -> gr.Error:
    """A lesson's failure as the decode's are shown: one line, no paths, escaped for the page
    only (app.ui.handlers)."""
    from app.ui.handlers import safe_message, user_error
    return user_error(safe_message(exc), request)


def memory_wall_kwargs(params_b, dtype, batch, q, device, bandwidth_tb, peak_tf, context=0, kv_kib=0.0,
                       here=False) -> dict:
    """Controls of the memory-wall tab -> memory_wall() keywords (measures if asked). Numbers
    are checked in the units the tab shows (billions, TB/s, TFLOP/s, KiB per cached token)."""
    kw = {"params": in_unit("parameters", params_b, 1e9, "billion", PARAMS), "dtype": dtype, "batch": batch, "q": q,
          "context": context, "kv_bytes_per_token": in_unit("KV per token", kv_kib, 1024, "KiB", (0.0, 1e12)),
          "this_device": bool(here)}
    if device == MEASURED_DEVICE:
        from app.hardware import detect_device, measure_ceilings
        device = detect_device("auto")
        with turns.turn(device):
            c = measure_ceilings(device, "fp32" if dtype == "fp32" else "fp16")
        return {**kw, "bytes_per_s": c.measured_bytes_per_s, "flops_per_s": c.measured_flops_per_s,
                "source": f"{c.device_name} (measured)"}
    if device == CUSTOM_DEVICE:
        peak = in_unit("peak", peak_tf, 1e12, "TFLOP/s", (0.0, PEAK[1])) if peak_tf is not None else 0.0
        return {**kw, "bytes_per_s": in_unit("bandwidth", bandwidth_tb, 1e12, "TB/s", BANDWIDTH),
                "flops_per_s": peak or None}
    return {**kw, "device": device}


def device_choices() -> list[str]:
    return [CUSTOM_DEVICE, MEASURED_DEVICE] + [r.name for r in DATASHEET if r.bytes_per_s]


# --------------------------------------------------------------------------- layout

def _outputs():
    plot = gr.Plot(label="figure")
    md = gr.Markdown(latex_delimiters=LATEX)
    with gr.Accordion("result (JSON)", open=False):
        js = gr.JSON()
    return [plot, md, js]


def _header(lesson, number: int | None = None) -> gr.Markdown:
    n = f"{number}. " if number else ""
    formula = f"\n\n{lesson.formula}" if lesson.formula else ""
    return gr.Markdown(f"### {n}{lesson.title}\n{lesson.claim}{formula}", latex_delimiters=LATEX)


def _walkthrough(get_pair) -> None:
    gr.Markdown("Seven short lessons, each a claim, an experiment on **this** device with small "
                "sizes, and what to notice. Press a button; each runs in seconds to a minute on a "
                "laptop CPU with the embedded pair. On a CUDA GPU the lessons time and decode on "
                "the fast path (static KV cache + CUDA graphs); on a CPU or Apple GPU they run "
                "eagerly.", latex_delimiters=LATEX)
    for number, (name, lesson) in enumerate(LESSONS.items(), 1):
        with gr.Group():
            _header(lesson, number)
            button = gr.Button(f"Run lesson {number} on this device" if lesson.needs_pair else f"Calculate lesson {number}", variant="secondary")
            result = gr.Markdown(latex_delimiters=LATEX)
            plot = gr.Plot(show_label=False, visible=False)

            button.click(_walk_handler(name, get_pair), None, [result, plot], **turns.queue())


def _walk_handler(name: str, get_pair):
    lesson = LESSONS[name]

    def handler(request: gr.Request = None, progress=gr.Progress()):
        shown = run_lesson(name, get_pair, lesson.quick_kwargs, progress, request)
        # the notice is what the claim predicts; the verdict above says whether this run showed it
        return (f"{shown.headline}\n\n*What the claim predicts:* {lesson.notice}",
                gr.Plot(value=shown.figure, visible=True))
    return handler


def _tab(name: str, get_pair, controls: list, to_kwargs) -> None:
    """A run button under the controls; the figure, Markdown and JSON below."""
    button = gr.Button("Run", variant="primary")
    outputs = _outputs()

    def handler(values: dict, request: gr.Request = None, progress=gr.Progress()):  # a set of inputs: one dict
        return tuple(run_tab(name, get_pair, to_kwargs, [values[c] for c in controls], request, progress)[:3])
    # preprocess=False: the values arrive as sent and the lesson judges them, so a bad one gets
    # one line naming it, not Gradio's generic error
    button.click(handler, set(controls), outputs, preprocess=False, **turns.queue())


def _knee_tab(get_pair):
    with gr.Row():
        qs = gr.Textbox("1,2,3,4,5,6,8,16,32,64,128", label="tokens per pass q (comma-separated)")
        kv = gr.Number(64, precision=0, label="KV cache length")
        reps = gr.Slider(MIN_REPEATS, 20, value=5, step=1, label="repeats (median and spread)")
    _tab("knee", get_pair, [qs, kv, reps],
         lambda q, k, r: {"qs": parse_ints(q, "q"), "kv_len": k, "repeats": r})


def _batch_tab(get_pair):
    with gr.Row():
        batches = gr.Textbox("1,2,4,8,16,32,64", label="batch sizes")
        gammas = gr.Textbox("0,1,2,3,4,5,6,7,8", label="γ values (0 = plain decoding, always included)")
    with gr.Row():
        measure = gr.Checkbox(True, label="measure α on the loaded pair (off: use the slider)")
        alpha = gr.Slider(0, 1, value=0.7, step=0.01, label="α (chosen)")
        steps = gr.Number(200, precision=0, label="simulated steps per cell")
        reps = gr.Slider(MIN_REPEATS, 10, value=MIN_REPEATS, step=1, label="repeats per timing")
    _tab("batch_depth", get_pair, [batches, gammas, measure, alpha, steps, reps],
         lambda b, g, m, a, st, r: {"batches": parse_ints(b, "batch sizes"), "gammas": parse_ints(g, "γ values"),
                                    "alpha": None if m else a, "steps": st, "repeats": r})


OWN_PROMPTS = ("empty: the loaded pair's own prompts (chat questions for an instruction-tuned target, "
               "else Austen and Shakespeare openings)")


def _policies_tab(get_pair):
    prompts = gr.Textbox("", lines=3, label="prompts (one per line)", placeholder=OWN_PROMPTS)
    with gr.Row():
        gamma = gr.Slider(1, 16, value=4, step=1, label="γ where the heuristic starts")
        gamma_max = gr.Slider(1, 16, value=8, step=1, label="γ max (fixed depth is swept over 1…γ max)")
        threshold = gr.Slider(0, 1, value=0.4, step=0.05, label="confidence threshold")
        new = gr.Slider(4, 256, value=64, step=1, label="new tokens per prompt")
        temp = gr.Slider(0, 2, value=0, step=0.05, label="temperature (0 = greedy)")
        rounds = gr.Slider(MIN_REPEATS, 5, value=MIN_REPEATS, step=1, label="rounds (interleaved repeats: the spread)")
    _tab("policies", get_pair, [prompts, gamma, gamma_max, threshold, new, temp, rounds],
         lambda p, g, gm, th, n, t, r: {"prompts": parse_prompts(p, True), "gamma": g, "gamma_max": gm,
                                        "threshold": th, "max_new_tokens": n, "temperature": t, "rounds": r})


def _theory_tab(get_pair):
    prompts = gr.Textbox("", lines=2, label="measured prompts (one per line; α and c come from another)",
                         placeholder=OWN_PROMPTS)
    with gr.Row():
        gammas = gr.Textbox("1,2,3,4,5,6,7,8", label="γ values")
        new = gr.Slider(4, 256, value=64, step=1, label="new tokens per prompt")
        temp = gr.Slider(0, 2, value=0, step=0.05, label="temperature (0 = greedy)")
        rounds = gr.Slider(MIN_REPEATS, 5, value=MIN_REPEATS, step=1, label="rounds (interleaved repeats: the spread)")
    _tab("theory", get_pair, [prompts, gammas, new, temp, rounds],
         lambda p, g, n, t, r: {"prompts": parse_prompts(p, True), "gammas": parse_ints(g, "γ values"),
                                "max_new_tokens": n, "temperature": t, "rounds": r})


def _lossless_tab(get_pair):
    prompt = gr.Textbox("", label="prompt", placeholder=OWN_PROMPTS)
    with gr.Row():
        n = gr.Number(2000, precision=0, label="N samples per arm (the noise floor shrinks as 1/√N)")
        k = gr.Slider(1, 4, value=1, step=1, label="k tokens per sample")
        gamma = gr.Slider(1, 8, value=3, step=1, label="γ")
        temp = gr.Slider(0.05, 2, value=1.0, step=0.05, label="temperature")
    broken = gr.CheckboxGroup([(VARIANT_LABELS[v], v) for v in ("greedy_draft", "no_residual")],
                              value=["greedy_draft", "no_residual"], label="break it")
    _tab("lossless", get_pair, [prompt, n, k, gamma, temp, broken],
         lambda p, nn, kk, g, t, b: {"prompt": (p if str(p or "").strip() else None), "n": nn, "k": kk, "gamma": g, "temperature": t,
                                     "variants": ("exact", *b)})


def _flops_tab(get_pair):
    prompt = gr.Textbox("", label="prompt", placeholder=OWN_PROMPTS)
    with gr.Row():
        gamma = gr.Slider(1, 16, value=4, step=1, label="γ")
        new = gr.Slider(4, 256, value=64, step=1, label="new tokens")
    _tab("flops", get_pair, [prompt, gamma, new],
         lambda p, g, n: {**({"prompt": p} if str(p or "").strip() else {}), "gamma": g, "max_new_tokens": n})


def _memory_tab(get_pair):
    with gr.Row():
        params = gr.Number(70, label="parameters (billions)")
        dtype = gr.Dropdown(list(BYTES_PER_PARAM), value="fp16", label="weights dtype")
        batch = gr.Number(1, precision=0, label="batch")
        q = gr.Number(1, precision=0, label="tokens per pass q (γ + 1 when verifying)")
    with gr.Row():
        device = gr.Dropdown(device_choices(), value=CUSTOM_DEVICE, label="device")
        bandwidth = gr.Number(2.0, label="bandwidth TB/s (custom)")
        peak = gr.Number(300, label="peak TFLOP/s (custom, 0 = unknown)")
    with gr.Row():
        context = gr.Number(1024, precision=0, label="cached tokens read per pass (KV cache)")
        kv = gr.Number(LLAMA3_70B_KV / 1024, label="KV KiB per cached token (Llama-3-70B, fp16: 320)")
        here = gr.Checkbox(True, label="also measure this device's ridge (a few seconds)")
    _tab("memory_wall", get_pair, [params, dtype, batch, q, device, bandwidth, peak, context, kv, here],
         memory_wall_kwargs)


TABS = {"knee": _knee_tab, "batch_depth": _batch_tab, "policies": _policies_tab, "theory": _theory_tab,
        "lossless": _lossless_tab, "flops": _flops_tab, "memory_wall": _memory_tab}


def build_lesson_tabs(get_pair) -> None:
    """Inside a gr.Tabs(): a Walkthrough tab, then one tab per lesson."""
    with gr.Tab("Walkthrough"):
        _walkthrough(get_pair)
    for name, lesson in LESSONS.items():
        with gr.Tab(lesson.tab_label):
            _header(lesson)
            TABS[name](get_pair)
