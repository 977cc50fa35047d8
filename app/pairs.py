"""One model cache shared by every session of the app: loads are serialised, a failed load
leaves the previously loaded pair in place, and at most MAX_PAIRS pairs stay in memory."""
from __future__ import annotations

import threading
from collections import OrderedDict

from app.models import ModelPair, load_pair, load_shape_pair
from app.settings import ModelLoadError
from app.presets import PRESETS

MAX_PAIRS = 2
_lock = threading.Lock()
_cache: "OrderedDict[tuple, ModelPair]" = OrderedDict()


def get_pair(preset: str, device: str = "auto", dtype: str = "auto", ngram: bool = False,
             progress=None) -> ModelPair:
    """The loaded pair for a preset name (see app.presets), loading it if needed.
    progress(message) hears the stages of a GGUF load (the first one dequantises, ~30 s)."""
    if preset not in PRESETS:
        raise ModelLoadError(f"unknown model pair {preset!r}: choose one of {', '.join(PRESETS)}")
    p = PRESETS[preset]
    ngram = ngram and p.kind != "shape"  # with n-gram drafts no draft model is loaded
    key = (preset, device, dtype, ngram)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
        if p.kind == "shape":
            pair = load_shape_pair(p.target, p.draft, device=device, dtype=dtype)
        elif p.kind == "gguf":  # the packaged GGUF target and its distilled draft
            from app.gguf import load_gguf_pair
            pair = load_gguf_pair(device=device, dtype=dtype, progress=progress,
                                  draft=None if ngram else p.draft)
        else:
            pair = load_pair(p.target, p.draft, device=device, dtype=dtype, ngram=ngram)
        _cache[key] = pair
        while len(_cache) > MAX_PAIRS:
            _cache.popitem(last=False)
        return pair


def loaded() -> list[str]:
    return [k[0] for k in _cache]
