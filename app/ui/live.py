"""The Live tab: controls on the left, the streamed tokens and numbers on the right, the step
timeline and the roofline below, then the token inspector and the downloads.

`build(loader, wrap)` must be called inside a gr.Blocks; `loader(preset, device=, dtype=,
ngram=)` returns a ModelPair (app.pairs.get_pair in the app, a tiny pair in tests) and
`wrap` decorates the decode function (ZeroGPU on Spaces, identity elsewhere).
"""
import inspect

import gradio as gr

import visualizations as viz
from app.settings import DEFAULTS as D, MAX_GAMMA, MAX_NEW_TOKENS
from app import runner
from app.ui import handlers, turns, views
from app.ui.views import View
from app.presets import FALLBACK, FLAGSHIP, FLAGSHIP_HINT, PRESETS, default_preset, default_reason

EXAMPLES = [  # questions for the instruction-tuned flagship, openings for the embedded pair
    "What is the capital of France, and what is it famous for?",
    "Explain in three sentences why the sky is blue.",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune",
    "Mr. Darcy walked towards the window and said,",
    "ROMEO:\nBut soft, what light through yonder window breaks?",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "Emma Woodhouse, handsome, clever, and rich,",
]

# The lab's own look on top of visualizations.STYLE: large, readable from the back of a room.
CSS = viz.STYLE + """
.gradio-container { --block-label-text-size: 16px; --block-title-text-size: 16px;
  --block-info-text-size: 14px; --input-text-size: 17px; --checkbox-label-text-size: 16px;
  --button-large-text-size: 20px; --body-text-size: 16px; --prose-text-size: 16px; }
#sd-stream .sd-stream { font-size: 1.45rem; min-height: 6em; }
#sd-stream { padding: 0.6em 0.8em; border: 1px solid #ddd; border-radius: 8px; background: #fff; }
#sd-legend .sd-legend { font-size: 1.1rem; }
#sd-status p { font-size: 1.15rem; }
#sd-stats table { font-size: 1.1rem; }
"""


def _controls(devices: list[str]) -> dict:
    c = {}
    c["prompt"] = gr.Textbox(label="Prompt", value=EXAMPLES[0], lines=3, max_lines=8)
    gr.Examples(EXAMPLES, inputs=c["prompt"], label="Examples: questions (SmolLM2), openings (Austen, Shakespeare)")
    default = default_preset()
    hint = "" if default != FALLBACK or PRESETS[FLAGSHIP].installed else f" · {FLAGSHIP_HINT}"
    c["preset"] = gr.Dropdown(handlers.pair_choices(), value=default, label="Model pair (target / draft)",
                              info="hub pairs need a download; shape-only pairs have random weights" + hint)
    c["prompt_mode"] = gr.Radio([(f"{k}: {v}", k) for k, v in runner.PROMPT_MODES.items()], value=D.prompt_mode,
                                label="Prompt as")
    c["drafter"] = gr.Radio([("draft model", "model"), ("n-gram (prompt lookup)", "ngram")],
                            value=D.drafter, label="Drafter")
    c["gamma"] = gr.Slider(1, MAX_GAMMA, value=D.gamma, step=1, label="γ: draft tokens per target pass")
    c["depth_policy"] = gr.Dropdown(list(runner.DEPTH_POLICIES), value=D.depth_policy, label="Depth policy",
                              info="; ".join(f"{k}: {v}" for k, v in runner.DEPTH_POLICIES.items()))
    with gr.Accordion("Sampling", open=False):
        c["temperature"] = gr.Slider(0, 2, value=D.temperature, step=0.05, label="Temperature (0 = greedy)")
        c["top_p"] = gr.Slider(0.05, 1, value=D.top_p, step=0.05, label="Top-p")
        c["top_k"] = gr.Number(value=D.top_k, precision=0, minimum=0, label="Top-k (0 = off)")
        c["seed"] = gr.Number(value=D.seed, precision=0, minimum=0, label="Seed")
    top = max_new_tokens_for(default)  # the pair's room; changing the pair moves it (_wire)
    c["max_new_tokens"] = gr.Slider(1, top, value=min(D.max_new_tokens, top), step=1, label="Max new tokens")
    c["device"] = gr.Dropdown(devices, value=D.device, label="Device")
    paths = [("auto: on where it measures faster", "auto"), ("on", "on"), ("off", "off")]
    c["fast_path"] = gr.Radio(paths, value=D.fast_path, label="Fast path", info=handlers.fast_path_note(devices))
    c["draft_int8"] = gr.Radio(paths, value=D.draft_int8, label="int8 draft weights (fast path, CPU)",
                               info=handlers.DRAFT_INT8_NOTE)
    c["baseline"] = gr.Checkbox(value=D.baseline, label="Also run the baseline (target alone) to measure the speedup")
    return c


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


def _outputs() -> dict:
    o = {}
    gr.HTML(viz.legend_html(), elem_id="sd-legend")
    o["status"] = gr.Markdown(f"Press **Run** to decode. {default_reason()}", label="status", elem_id="sd-status")
    o["stream"] = gr.HTML(views.stream_html(_empty_trace(), finished=False), label="token stream",
                          elem_id="sd-stream", max_height=640, autoscroll=True)
    o["stats"] = gr.Markdown(label="stats", elem_id="sd-stats")
    o["text"] = gr.Textbox(label="Generated text", lines=3, interactive=False, buttons=["copy"])
    return o


def _empty_trace():
    from app.trace import Trace
    return Trace(prompt="", settings={}, prompt_ids=[])


def _charts() -> dict:
    with gr.Row(equal_height=True):
        timeline = gr.Plot(None, label="Time per step", show_label=False)  # drawn by the first run
        roofline = gr.Plot(None, label="Roofline", show_label=False)
    return {"timeline": timeline, "roofline": roofline}


def _inspector() -> dict:
    gr.Markdown("### Token inspector: why was a draft token accepted or rejected?")
    with gr.Row():
        step = gr.Slider(0, 1, value=0, step=1, label="Step")
        position = gr.Slider(1, MAX_GAMMA, value=1, step=1, label="Draft position in the step")
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
    devices = turns.device_choices()
    with gr.Row():
        with gr.Column(scale=1, min_width=340):
            c = _controls(devices)
            with gr.Row():
                run_btn = gr.Button("Run", variant="primary", size="lg")
                stop_btn = gr.Button("Stop", variant="stop", size="lg")
        with gr.Column(scale=2):
            o = _outputs()
    o |= _charts()
    o |= _inspector()
    o |= _exports()
    o["record"] = gr.State(None, time_to_live=views.KEEP_S)  # the inspector's data, then freed
    _wire(c, o, run_btn, stop_btn, loader, wrap)


def _wire(c, o, run_btn, stop_btn, loader, wrap) -> None:
    inputs = [c[name] for name in runner.INPUTS]
    outputs = [o[name] for name in View._fields]

    def decode(*args):
        """Decode `prompt` speculatively; streams the tokens, charts and stats."""
        *values, request, progress = args  # the inputs, then what Gradio adds (_signature)
        yield from handlers.decode(tuple(values), loader=loader, request=request, progress=progress)

    decode.__signature__, decode.__annotations__ = _signature(runner.INPUTS), {"request": gr.Request}
    # preprocess=False: the values arrive as sent and parse_request judges them all, so a bad
    # one (gamma="abc") gets one line naming it, not Gradio's generic error
    event = run_btn.click(wrap(decode), inputs, outputs, api_name="decode", show_progress="full",
                          show_progress_on=o["stream"], preprocess=False, **turns.queue())
    c["preset"].change(bound_max_new_tokens, [c["preset"], c["max_new_tokens"]], c["max_new_tokens"],
                       api_visibility="private", queue=False, show_progress="hidden")
    event.then(views.inspect, [o["record"], o["step"], o["position"]], o["inspector"],
               api_visibility="private")
    stop_btn.click(handlers.stop, None, None, api_name="stop", concurrency_limit=None, queue=False)
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
               P("progress", P.POSITIONAL_OR_KEYWORD, default=gr.Progress())]
    return inspect.Signature(params)
