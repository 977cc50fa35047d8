"""One model cache shared by every session of the app: loads are serialised, a failed load
leaves the previously loaded pair in place, and at most MAX_PAIRS pairs stay in memory.

A hub pair whose files are not in the local hub cache (HF_HOME) is downloaded first, saying so:
"downloading <repo> (N MB)" with the bytes done, to progress(message) (the CLI prints it) and
as a tqdm bar (the Live tab's progress shows it). The size is the hub's, of the files still
missing. Offline (HF_HUB_OFFLINE=1, or the hub unreachable) nothing is fetched and the load
fails with app.models' one-line message, as before.
"""
from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from pathlib import Path

from app.models import ModelPair, load_pair, load_shape_pair
from app.settings import ModelLoadError
from app.presets import PRESETS

MAX_PAIRS = 2
_lock = threading.Lock()
_cache: "OrderedDict[tuple, ModelPair]" = OrderedDict()


def get_pair(preset: str, device: str = "auto", dtype: str = "auto", ngram: bool = False,
             progress=None) -> ModelPair:
    """The loaded pair for a preset name (see app.presets), loading it if needed.
    progress(message) hears the stages of a GGUF load (the first one dequantises, ~30 s) and a
    hub pair's download (fetch)."""
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
            if p.kind == "hub":
                fetch(p.target if ngram else (p.target, p.draft), device, dtype, progress)
            pair = load_pair(p.target, p.draft, device=device, dtype=dtype, ngram=ngram)
        _cache[key] = pair
        while len(_cache) > MAX_PAIRS:
            _cache.popitem(last=False)
        return pair


def loaded() -> list[str]:
    return [k[0] for k in _cache]


# --------------------------------------------------------------------------- downloads

ALLOW = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]  # config, tokenizer, weights


def in_cache(repo: str) -> bool:
    """Whether a hub model loads from the local hub cache alone: its config and all its
    safetensors weights (one file, or every shard its index lists) are there."""
    from huggingface_hub import try_to_load_from_cache

    def cached(name: str) -> str | None:
        found = try_to_load_from_cache(repo, name)
        return found if isinstance(found, str) else None
    if not cached("config.json"):
        return False
    if cached("model.safetensors"):
        return True
    index = cached("model.safetensors.index.json")
    if not index:
        return False
    shards = set(json.loads(Path(index).read_text()).get("weight_map", {}).values())
    return bool(shards) and all(cached(shard) for shard in shards)


def needs_download(repos) -> list[str]:
    """The repositories of `repos` (a hub id or several) that are not in the local hub cache."""
    return [r for r in ([repos] if isinstance(repos, str) else repos) if not in_cache(r)]


def fetch(repos, device: str = "auto", dtype: str = "auto", progress=None) -> None:
    """Download the repositories not in the local cache, saying "downloading <repo> (N MB)"
    and the megabytes done. First the pair's configs are read and a pair that does not fit the
    device is refused before any weights move (app.models.check_fits). Offline: nothing
    happens here, and the load that follows fails with its one-line message."""
    missing = needs_download(repos)
    if not missing or os.environ.get("HF_HUB_OFFLINE") == "1":
        return
    from huggingface_hub import snapshot_download

    from app.models import check_fits, hub_reachable, resolve_device, resolve_dtype
    if not hub_reachable():
        return
    where = resolve_device(device)
    check_fits([repos] if isinstance(repos, str) else list(repos), where, resolve_dtype(dtype, where))
    say = progress or (lambda message: None)
    for repo in missing:
        try:
            files = snapshot_download(repo, allow_patterns=ALLOW, dry_run=True)
            size = sum(f.file_size or 0 for f in files if f.will_download)
            label = f"downloading {repo} ({size / 1e6:.0f} MB)"
            say(label)
            snapshot_download(repo, allow_patterns=ALLOW, tqdm_class=progress_bar(label, say))
        except (OSError, ValueError) as exc:  # hub errors subclass OSError
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"{repo} could not be downloaded: {first}") from exc


def progress_bar(label: str, say):
    """A tqdm class for snapshot_download: every bar it makes is named `label` (the Live tab's
    progress shows tqdm bars), and a bar of bytes tells say() each tenth it gets through. It
    counts for itself: on a server without a terminal huggingface_hub disables its bars, and a
    disabled tqdm counts nothing."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class Bar(hf_tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs | {"desc": label})
            self.done, self.said, self.bytes = 0, 0, kwargs.get("unit") == "B"

        def update(self, n=1):
            super().update(n)
            self.done += n or 0
            tenths = int(10 * self.done / self.total) if self.bytes and self.total else 0
            if tenths > self.said:
                self.said = tenths
                say(f"{label}: {self.done / 1e6:.0f} of {self.total / 1e6:.0f} MB")
    return Bar
