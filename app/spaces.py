"""Hugging Face Spaces and ZeroGPU: what changes when the app runs on a Space, in one place.

Off a Space (no SPACE_ID) nothing here does anything. On a Space:

  * `on_zero_gpu()`: ZeroGPU is the `spaces` package's own test, `spaces.config.Config.zero_gpu`
    (SPACES_ZERO_GPU = 1 / t / true), with the package importable. There the GPU exists only
    inside a function decorated with `spaces.GPU`, and the quota is charged by the duration the
    decorator *declares*, not the time used.
  * `wrap_decode(fn, fallback)`: the Live tab's decode, decorated once with
    `spaces.GPU(duration=gpu_seconds_of_request)`. Outside ZeroGPU `spaces.GPU` returns the
    function unchanged (spaces/zero/decorator.py: `if not Config.zero_gpu: return task`), so the
    wrapper is a pass-through there. When ZeroGPU refuses the request (quota exhausted, no GPU
    free, queue timeout: a gr.Error titled "ZeroGPU ..."), `fallback(values, message)` streams
    a recorded run instead (app.ui.replay.gpu_fallback), saying why.
  * `preload(loader, preset)`: the models are loaded at start-up, in the main process, so on
    ZeroGPU they are placed on CUDA before the first request (ZeroGPU's rule: move models to
    "cuda" at module scope; the package packs them and maps them onto the GPU it lends).
  * `fast_path_default()`: the Fast path starts on "auto" (on where it measures faster, as on a
    dedicated GPU Space: static KV cache + CUDA graphs); on ZeroGPU "off", since a graph
    captured in one lent GPU process is not there in the next and capture time would be
    charged to the quota.

`gpu_seconds(max_new_tokens, baseline)` is the declared duration, the smallest that a decode of
that length needs with margin (see its docstring); `calls` counts decodes that went through the
wrapper (the tests check that a decode does and a replay never does).
"""
from __future__ import annotations

import functools
import importlib.util
import math
import os
from typing import Callable, Iterator

BASE_SECONDS = 15        # loading the prompt, the prefill, the device's ceilings (once), the charts
TOKENS_PER_SECOND = 10   # the slowest decode rate declared for (see gpu_seconds)
MAX_SECONDS = 120        # ZeroGPU refuses durations above the account's cap; 120 s is within a free one's
calls = {"decode": 0}    # decodes that went through wrap_decode's wrapper (one process)


def on_space() -> bool:
    """Whether this process runs on a Hugging Face Space (the platform sets SPACE_ID)."""
    return bool(os.environ.get("SPACE_ID"))


def spaces_package():
    """The `spaces` package when on a Space and importable, else None (never imported off a
    Space: on ZeroGPU importing it patches torch, which must happen before CUDA starts)."""
    if not on_space() or importlib.util.find_spec("spaces") is None:
        return None
    import spaces
    return spaces


def on_zero_gpu() -> bool:
    """On a Space with ZeroGPU: the `spaces` package's own flag (Config.zero_gpu, read from
    SPACES_ZERO_GPU when the package is imported)."""
    package = spaces_package()
    if package is None:
        return False
    from spaces.config import Config
    return bool(Config.zero_gpu)


def gpu_seconds(max_new_tokens: int, baseline: bool = True) -> int:
    """The GPU time to declare for one decode: BASE_SECONDS, plus one second per
    TOKENS_PER_SECOND tokens decoded (max_new_tokens, twice with the baseline run), rounded up,
    at most MAX_SECONDS.

    Why these numbers: a speculative step costs one target pass plus gamma draft passes and
    yields at least one token; the baseline costs one target pass per token. At batch 1 with
    eager transformers a pass is launch-bound, tens of milliseconds for these models on a GPU
    (an estimate: no ZeroGPU run was timed for it), so 10 tokens a second (0.1 s each) leaves
    room for a step that yields only one token at gamma 4. Declaring more costs the visitor
    quota (ZeroGPU charges the declared duration); past it ZeroGPU warns that the task "might be
    aborted" (spaces/zero/client.py), so the margin is on the side of finishing. A run longer
    than MAX_SECONDS allows is the price of the cap: keep max new tokens moderate there."""
    tokens = max(1, int(max_new_tokens)) * (2 if baseline else 1)
    return min(MAX_SECONDS, BASE_SECONDS + math.ceil(tokens / TOKENS_PER_SECOND))


def gpu_seconds_of_request(*args, **_) -> int:
    """gpu_seconds for the decode's arguments as Gradio passes them (the Live tab's inputs in
    app.runner.INPUTS order, then the request and the progress tracker; spaces.GPU calls a
    callable duration with the decorated function's arguments). Values the decode will refuse
    get BASE_SECONDS: it ends before decoding anything."""
    from app.runner import INPUTS
    values = dict(zip(INPUTS, args))
    n, baseline = values.get("max_new_tokens"), values.get("baseline", True)
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not 1 <= n <= 1024:
        return BASE_SECONDS
    return gpu_seconds(int(n), baseline is not False)


def gpu_unavailable(exc: BaseException) -> str | None:
    """The message when `exc` is ZeroGPU refusing to lend a GPU (its gr.Error titles: "ZeroGPU
    quota exceeded", "ZeroGPU queue timeout", "ZeroGPU client error" for "No GPU was
    available", "ZeroGPU illegal duration", ...; spaces/zero/client.py), else None. An error
    raised inside the decode ("ZeroGPU worker error") is the decode's own and stays one."""
    title = str(getattr(exc, "title", "") or "")
    if not title.startswith("ZeroGPU") or title == "ZeroGPU worker error":
        return None
    return f"{title}: {getattr(exc, 'message', exc)}".splitlines()[0][:300]  # gr.Error's str() is a repr


def wrap_decode(fn: Callable[..., Iterator], fallback: Callable[[tuple, str], Iterator]) -> Callable:
    """fn itself off a Space or without the `spaces` package; on a Space, fn decorated with
    spaces.GPU (a pass-through outside ZeroGPU) inside a generator that counts the call and, when
    ZeroGPU lends no GPU, yields from fallback(args, message) instead."""
    package = spaces_package()
    if package is None:
        return fn
    on_gpu = package.GPU(duration=gpu_seconds_of_request)(fn)

    @functools.wraps(fn)
    def decode(*args):
        calls["decode"] += 1
        try:
            yield from on_gpu(*args)
        except Exception as exc:
            message = gpu_unavailable(exc)
            if message is None:
                raise
            yield from fallback(args, message)

    decode.gpu_seconds = gpu_seconds_of_request  # what spaces.GPU was given (the tests read it)
    return decode


def preload(loader: Callable, preset: str) -> str | None:
    """On a Space, load `preset` the way the Live tab's first request will (device "auto": CUDA
    on a GPU or ZeroGPU Space) so that the first decode finds it loaded; on ZeroGPU this is the
    models' move to CUDA at start-up. Returns None when loaded or off a Space, else the one line
    that says why not (the app starts anyway; the first decode then loads the pair)."""
    if not on_space():
        return None
    try:
        loader(preset, device="auto", dtype="auto", ngram=False)
    except Exception as exc:  # noqa: BLE001 - a failed preload must not keep the Space down
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return f"could not preload {preset}: {first}"
    return None


def fast_path_default() -> str:
    """The Fast path choice the Live tab starts with: "off" on ZeroGPU (see the module
    docstring), else app.settings.DEFAULTS.fast_path ("auto": on where a pass measures faster,
    as on a Space with a CUDA GPU of its own)."""
    from app.settings import DEFAULTS
    return "off" if on_zero_gpu() else DEFAULTS.fast_path
