"""The web app: `build_demo() -> gr.Blocks` and `launch()`.

Analytics stay off unless the user set GRADIO_ANALYTICS_ENABLED (the lab must work offline).
On a Space (SPACE_ID set and the `spaces` package importable) the decode function is wrapped in
`spaces.GPU` (app.spaces: on ZeroGPU it runs on a lent GPU); everywhere else it runs unchanged.
"""
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gradio as gr  # noqa: E402  (after the environment above)

from app.ui import handlers, live, replay  # noqa: E402
from app.ui.lessons import build_lesson_tabs  # noqa: E402
from app.presets import default_preset  # noqa: E402

TITLE = "Speculative Decoding Lab"
QUEUE_MAX = 32          # waiting requests beyond this are turned away ("queue is full")
# Gradio keeps every session's state (each component's config, changed values, gr.State) until
# it is evicted, and an API client's session never closes: launch() keeps at most this many,
# the least recently used dropped first
MAX_SESSIONS = int(os.environ.get("SPECLAB_MAX_SESSIONS", "100"))


def zero_gpu(fn):
    """fn in spaces.GPU on a Space (app.spaces.wrap_decode: a recorded run when no GPU is lent)."""
    from app import spaces
    return spaces.wrap_decode(fn, replay.gpu_fallback)


class PairTracker:
    """Wraps the loader so the lessons run on the pair the Live tab used last (the embedded
    pair until then). Shared by all sessions: in a classroom everyone sees the same pair."""

    def __init__(self, loader):
        self.loader, self.last = loader, ((default_preset(),), {"device": "auto", "dtype": "auto", "ngram": False})

    def __call__(self, preset, **kw):
        pair = self.loader(preset, **kw)
        self.last = ((preset,), {**{k: v for k, v in kw.items() if k != "progress"}, "ngram": False})
        return pair

    def current(self):
        args, kw = self.last
        return self.loader(*args, **kw)


class Blocks(gr.Blocks):
    """gr.Blocks whose answer to a request with too few values is one line an API client sees
    (Gradio's own is a multi-line ValueError that clients receive as {"error": null})."""

    def validate_inputs(self, block_fn, inputs):
        if len(inputs) < len(block_fn.inputs):
            name = f"the /{block_fn.api_name} endpoint" if block_fn.api_name else "this event"
            raise gr.Error(f"the request has {len(inputs)} values, {name} takes {len(block_fn.inputs)}",
                           print_exception=False)
        super().validate_inputs(block_fn, inputs)


def build_demo(loader=None) -> gr.Blocks:
    """The whole app. `loader(preset, device=, dtype=, ngram=)` defaults to app.pairs.get_pair."""
    if loader is None:
        from app.pairs import get_pair as loader
    tracker = PairTracker(loader)
    with Blocks(title=TITLE) as demo:
        gr.HTML(f"<style>{live.CSS}</style>", padding=False, elem_id="sd-style")  # here, not launch(css=): tests launch too
        gr.Markdown(f"## {TITLE}\nA small draft model guesses γ tokens, the large target model "
                    "checks them all in one forward pass. Watch every token's fate and every "
                    "pass on this device's roofline.", elem_id="sd-title")
        with gr.Tabs():
            with gr.Tab("Live"):
                live.build(tracker, wrap=zero_gpu)
            with gr.Tab("Replay / Compare"):
                replay.build()
            build_lesson_tabs(tracker.current)
        # a closed tab (its heartbeat gone) stops that session's decode after the current step
        demo.unload(handlers.stop)
    # decodes and lessons share the device queue (app.ui.turns: one run per device at a time,
    # or their timings disturb each other); anything else runs one at a time per event
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_MAX)
    return demo


def launch(demo: gr.Blocks | None = None, **kwargs) -> None:
    """Serve the app; GRADIO_SERVER_NAME / GRADIO_SERVER_PORT apply as usual, SPECLAB_THREADS
    sets torch's CPU threads (1 is steadier on a shared machine; unset: torch's count, capped at a
    container's CPU quota, app.cpu_threads), and at most MAX_SESSIONS
    sessions are kept (SPECLAB_MAX_SESSIONS)."""
    from app.cpu_threads import set_threads
    wanted = os.environ.get("SPECLAB_THREADS", "")
    set_threads(int(wanted) if wanted.isdigit() else None)  # else torch's, capped at a container's CPU quota
    kwargs.setdefault("state_session_capacity", MAX_SESSIONS)
    (demo or build_demo()).launch(**kwargs)
