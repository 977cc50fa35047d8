"""The Live tab: the prompt, the pair, γ, Run and Stop on the left with the other settings folded
below them, the status, the streamed tokens and the numbers on the right, the step timeline and
the roofline side by side below, then the token inspector and the downloads.

`build(loader, wrap)` must be called inside a gr.Blocks; `loader(preset, device=, dtype=,
ngram=)` returns a ModelPair (app.pairs.get_pair in the app, a tiny pair in tests) and
`wrap` decorates the decode function (ZeroGPU on Spaces, identity elsewhere).
"""
import inspect

import gradio as gr

import visualizations as viz
from app import examples, runner, spaces
from app.presets import PRESETS, default_preset, default_reason
from app.settings import DEFAULTS as D, MAX_GAMMA, MAX_NEW_TOKENS
from app.ui import handlers, turns, views, words
from app.ui.views import View

DEFAULT_POLICY = D.depth_policy

# The lab's own look on top of visualizations.STYLE: large, readable from the back of a room, and
# laid out so that a 1366x768 screen shows the prompt, the pair, γ, Run and Stop, then the
# status and the stream beside them, without scrolling.
CSS = viz.STYLE + """
.gradio-container { --block-label-text-size: 15px; --block-title-text-size: 15px;
  --block-info-text-size: 13px; --input-text-size: 16px; --checkbox-label-text-size: 15px;
  --button-large-text-size: 20px; --body-text-size: 15px; --prose-text-size: 15px; }
#sd-style { display: none; }  /* its <style> applies all the same; no empty row */
#sd-title h2 { margin: 0; } #sd-title p { margin: 0.1em 0 0; }
#sd-stream .sd-stream { font-size: 1.3rem; line-height: 1.8; min-height: 6em; }
#sd-stream { padding: 0.5em 0.8em; border: 1px solid #ddd; border-radius: 8px; background: #fff; }
#sd-legend .sd-legend { font-size: 0.95rem; display: grid; grid-template-columns: 1fr 1fr; gap: 0.2em 1.0em; }
#sd-status { min-height: 4.2em; }
#sd-status .wrap.translucent { background: var(--block-background-fill); opacity: 1; }
#sd-status .pending { visibility: hidden; }  /* the loading stage replaces the old line */
#sd-status .progress-level-inner { font-family: var(--font); font-size: 1.05rem; color: #222; }
#sd-status p { font-size: 1.1rem; margin: 0; }
#sd-stats table { font-size: 1.05rem; }
#sd-pair input { padding-right: 2.2em; text-overflow: ellipsis; }
#sd-examples button { font-size: 0.85rem; }
"""


PROMPT_ROOM = 64  # prompt tokens the max-new-tokens slider leaves room for in the pair's context


def pair_context(preset: str) -> int | None:
    """The target's context length from its stored config (no model loaded), or None when it
    cannot be read (e.g. the embedded pair is not on disk yet)."""
    import json
    from pathlib import Path

    from app.shapes import load_shape_json
    shape = PRESETS[preset].target_shape
    try:
        path = Path(shape)
        config = json.loads((path / "config.json").read_text()) if path.is_dir() else load_shape_json(shape)
    except (OSError, ValueError):
        return None
    return int(config.get("max_position_embeddings") or config.get("n_positions") or 0) or None


def max_new_tokens_for(preset: str) -> int:
    """The max-new-tokens slider's maximum for a pair: what its context holds beside a prompt of
    PROMPT_ROOM tokens and a verify pass (validation.prompt_ids refuses what does not fit), at
    most MAX_NEW_TOKENS."""
    context = pair_context(preset) if preset in PRESETS else None
    if context is None:
        return MAX_NEW_TOKENS
    return max(1, min(MAX_NEW_TOKENS, context - PROMPT_ROOM - MAX_GAMMA - 1))


def bound_max_new_tokens(preset: str, value) -> dict:
    """The slider's update when the pair changes: its maximum, and its value kept below it."""
    top = max_new_tokens_for(preset)
    return gr.update(maximum=top, value=min(value, top) if isinstance(value, (int, float)) else top)


def _top(devices: list[str]) -> dict:
    """The first screen: the controls a lesson needs (left), the status and the stream (right);
    every other setting in a folded accordion."""
    c, default = {}, default_preset()
    with gr.Row(equal_height=False):
        with gr.Column(scale=5, min_width=420):
            c["prompt"] = gr.Textbox(label="Prompt", value=examples.default_prompt(default), lines=2, max_lines=6)
            c["preset"] = gr.Dropdown(_pair_choices(), value=default, label="Model pair (target / draft)",
                                      info=examples.pair_info(default), elem_id="sd-pair")
            with gr.Row():
                c["gamma"] = gr.Slider(1, MAX_GAMMA, value=D.gamma, step=1,
                                       label=words.GAMMA, info=words.GAMMA_INFO, min_width=200, scale=3)
                c["depth_policy"] = gr.Dropdown(list(runner.DEPTH_POLICIES), value=DEFAULT_POLICY,
                                                label=words.POLICY, info=runner.DEPTH_POLICIES[DEFAULT_POLICY],
                                                min_width=160, scale=2)
            with gr.Row():
                c["run"] = gr.Button("Run", variant="primary", size="lg")
                c["stop"] = gr.Button("Stop", variant="stop", size="lg")
            c["examples"] = gr.Dataset(components=[c["prompt"]], samples=_samples(default), label="Examples",
                                       elem_id="sd-examples", samples_per_page=5)
            _settings(c, devices, default)
        with gr.Column(scale=7):
            o = _outputs()
    return c, o


def _settings(c: dict, devices: list[str], default: str) -> None:
    """The folded settings: Sampling, Speed, Advanced."""
    with gr.Accordion("Sampling", open=False):
        c["temperature"] = gr.Slider(0, 2, value=D.temperature, step=0.05, label="Temperature (0 = greedy)")
        c["top_p"] = gr.Slider(0.05, 1, value=D.top_p, step=0.05, label="Top-p")
        with gr.Row():
            c["top_k"] = gr.Number(value=D.top_k, precision=0, minimum=0, label="Top-k (0 = off)")
            c["seed"] = gr.Number(value=D.seed, precision=0, minimum=0, label="Seed")
        top = max_new_tokens_for(default)  # the pair's room; changing the pair moves it (_wire)
        c["max_new_tokens"] = gr.Slider(1, top, value=min(D.max_new_tokens, top), step=1, label="Max new tokens")
    with gr.Accordion("Speed", open=False):
        # measured ("auto"); off on ZeroGPU (app.spaces)
        c["fast_path"] = gr.Radio(words.PATH_CHOICES, value=spaces.fast_path_default(), label=words.FAST_PATH,
                                  info=words.fast_path_info(devices))
        c["draft_int8"] = gr.Radio(words.PATH_CHOICES, value=D.draft_int8, label=words.DRAFT_INT8,
                                   info=words.DRAFT_INT8_INFO)
        c["baseline"] = gr.Checkbox(value=D.baseline, label=words.BASELINE)
        c["device"] = gr.Dropdown(devices, value=D.device, label="Device", info=words.DEVICE_INFO)
    with gr.Accordion("Advanced", open=False):
        c["prompt_mode"] = gr.Radio(words.PROMPT_MODES, value=D.prompt_mode, label=words.PROMPT_AS)
        c["drafter"] = gr.Radio(words.DRAFTER_CHOICES, value=D.drafter, label=words.DRAFTER)


def _pair_choices() -> list[tuple[str, str]]:
    """(what the menu shows, preset name): the name and what the pair is for."""
    return [(_safe(examples.choice_label, name, name), name) for name in PRESETS]


def _safe(fn, preset: str, fallback: str) -> str:
    try:
        return fn(preset)
    except Exception:  # noqa: BLE001 - a label must never keep the app from starting
        return fallback


def _samples(preset: str) -> list[list[str]]:
    return [[text] for text in examples.examples_for(preset)]


def pair_changed(preset: str, prompt: str, max_new_tokens):
    """The pair menu moved: its help line, the example prompts, the prompt (when it is still an
    example or empty: never the user's own text) and the max-new-tokens slider follow it."""
    keep = prompt and prompt.strip() and prompt not in examples.ALL_EXAMPLES
    return (gr.update(info=_safe(examples.pair_info, preset, "")), gr.Dataset(samples=_samples(preset)),
            gr.skip() if keep else examples.default_prompt(preset), bound_max_new_tokens(preset, max_new_tokens))


def _outputs() -> dict:
    o = {}
    o["status"] = gr.Markdown(f"{words.START} {default_reason()}", label="status", elem_id="sd-status")
    o["stream"] = gr.HTML(views.stream_html(_empty_trace(), finished=False), label="token stream",
                          elem_id="sd-stream", max_height=400, js_on_load=FOLLOW_JS)
    gr.HTML(viz.legend_html(), elem_id="sd-legend")
    o["stats"] = gr.Markdown(label="stats", elem_id="sd-stats")
    o["text"] = gr.Textbox(label="Generated text", lines=3, interactive=False, buttons=["copy"])
    return o


# The stream box follows the newest token unless the reader scrolled up in it (Gradio's own
# autoscroll left the box at its top when the whole HTML is replaced each update).
FOLLOW_JS = """
const box = element.closest('.html-container') || element.parentElement;
let follow = true;
box.addEventListener('scroll', () => { follow = box.scrollTop + box.clientHeight >= box.scrollHeight - 48; });
watch('value', () => { if (follow || box.scrollHeight <= box.clientHeight) box.scrollTop = box.scrollHeight; });
"""


def _empty_trace():
    from app.trace import Trace
    return Trace(prompt="", settings={}, prompt_ids=[])


def _charts() -> dict:
    with gr.Row(equal_height=False):
        timeline = gr.Plot(None, label="Time per step", show_label=False)  # drawn by the first run
        roofline = gr.Plot(None, label="Roofline", show_label=False)
    return {"timeline": timeline, "roofline": roofline}


def _inspector() -> dict:
    gr.Markdown("### Token inspector: why was a draft token accepted or rejected?")
    with gr.Row():
        step = gr.Slider(0, 1, value=0, step=1, label="Step")
        position = gr.Slider(1, D.gamma, value=1, step=1, label="Draft position in the step")
    plot = gr.Plot(views.inspect(None, 0, 1), show_label=False)
    return {"step": step, "position": position, "inspector": plot}


def _exports() -> dict:
    gr.Markdown("### Export this run\nThe files and the inspector's data are kept for "
                f"{views.KEEP_S / 60:g} minutes after the run, then deleted.")
    with gr.Row():
        json_file = gr.DownloadButton("Trace (JSON)", value=None, interactive=True)
        csv_file = gr.DownloadButton("Forward passes (CSV)", value=None, interactive=True)
    views.expire_downloads([json_file, csv_file])
    with gr.Accordion("Summary as JSON (what the API returns)", open=False):
        summary = gr.JSON(label="Summary")
    return {"json_file": json_file, "csv_file": csv_file, "summary": summary}


def build(loader, wrap=lambda fn: fn) -> None:
    """Lay out the Live tab and wire its events (decode is the API endpoint "decode")."""
    c, o = _top(turns.device_choices())
    o |= _charts()
    o |= _inspector()
    o |= _exports()
    o["record"] = gr.State(None, time_to_live=views.KEEP_S)  # the inspector's data, then freed
    _wire(c, o, loader, wrap)


def _wire(c, o, loader, wrap) -> None:
    inputs = [c[name] for name in runner.INPUTS]
    outputs = [o[name] for name in View._fields]

    def decode(*args):
        """Decode `prompt` speculatively; streams the tokens, charts and stats."""
        *values, request, progress = args  # the inputs, then what Gradio adds (_signature)
        yield from handlers.decode(tuple(values), loader=loader, request=request, progress=progress)

    decode.__signature__, decode.__annotations__ = _signature(runner.INPUTS), {"request": gr.Request}
    # preprocess=False: the values arrive as sent and parse_request judges them all, so a bad
    # one (gamma="abc") gets one line naming it, not Gradio's generic error. The loading stages
    # (app.runner.prepare's progress) show on the status line, beside the controls.
    event = c["run"].click(wrap(decode), inputs, outputs, api_name="decode", show_progress="full",
                           show_progress_on=[o["status"]], preprocess=False, **turns.queue())
    private = dict(api_visibility="private", queue=False, show_progress="hidden")
    c["preset"].change(pair_changed, [c["preset"], c["prompt"], c["max_new_tokens"]],
                       [c["preset"], c["examples"], c["prompt"], c["max_new_tokens"]], **private)
    c["depth_policy"].change(lambda name: gr.update(info=runner.DEPTH_POLICIES.get(name, "")),
                             c["depth_policy"], c["depth_policy"], **private)
    c["examples"].click(lambda sample: sample[0], c["examples"], c["prompt"], **private)
    event.then(views.inspect, [o["record"], o["step"], o["position"]], o["inspector"],
               api_visibility="private")
    c["stop"].click(handlers.stop, None, None, api_name="stop", concurrency_limit=None, queue=False)
    for slider in (o["step"], o["position"]):
        slider.release(views.inspect, [o["record"], o["step"], o["position"]], o["inspector"],
                       api_visibility="private", concurrency_limit=None)


def _signature(names) -> inspect.Signature:
    """decode's signature as Gradio reads it: one parameter per input, named as the /decode API
    shows them (the optional ones defaulted, runner.OPTIONAL), then the gr.Request and the
    progress tracker, which Gradio passes after the inputs."""
    P = inspect.Parameter
    params = [P(name, P.POSITIONAL_OR_KEYWORD,
                **({"default": runner.OPTIONAL[name]} if name in runner.OPTIONAL else {})) for name in names]
    params += [P("request", P.POSITIONAL_OR_KEYWORD, default=None, annotation=gr.Request),
               P("progress", P.POSITIONAL_OR_KEYWORD, default=gr.Progress(track_tqdm=True))]  # downloads' bars
    return inspect.Signature(params)
