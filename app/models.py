"""Loading a draft/target pair.

A pair is two causal LMs that share one tokenizer. Either side is a local model directory or a
Hugging Face hub id; the embedded pair in `demo_models/tiny/` is loaded by exactly the same
`from_pretrained` calls as a hub pair. `trust_remote_code` is never passed.

The transformers cache API (new_cache, crop_cache, forward, ...) lives in app.kvcache and is
re-exported here, its old home; the memory check before loading (check_params_fit) lives in
app.hardware, next to the free-memory query it compares against.
"""
from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from app.costmodel import param_count
from app.draft_vocab import target_vocab_size
from app.feature_draft import attach_projection
from app.hardware import check_params_fit, detect_device, parse_dtype  # check_params_fit: re-exported
# The cache API's old home was this module: its names stay importable from here.
from app.kvcache import cache_len, crop_cache, fill_cache, forward, new_cache  # noqa: F401
from app.settings import ModelLoadError
from app.shapes import make_shape_model, shape_params
from app.assets import TINY_DRAFT_DIR, TINY_TARGET_DIR

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[\w.\-]{1,96}$")
EMBEDDED_HINT = ("the embedded pair works offline: leave --target/--draft unset "
                 "(or choose 'embedded' in the app)")


@dataclass
class ModelPair:
    """target / draft: causal LMs on `device` in `dtype`; draft is None for n-gram drafting."""
    target: torch.nn.Module
    draft: torch.nn.Module | None
    tokenizer: object
    device: str
    dtype: torch.dtype
    target_id: str
    draft_id: str | None
    info: dict = field(default_factory=dict)

    @property
    def context(self) -> int:
        return int(getattr(self.target.config, "max_position_embeddings", 2048))

    @property
    def vocab(self) -> int:
        """Logit columns both models share. Some families pad lm_head differently per size
        (Qwen2.5-0.5B: 151,936 rows, 7B: 152,064); the tokenizer never emits the padding."""
        sizes = [target_vocab_size(m) for m in (self.target, self.draft) if m is not None]
        return min(sizes)


class ShapeTokenizer:
    """Stands in for a tokenizer beside shape-only models (random weights): prompts are encoded
    with the embedded tokenizer, ids it does not know print as <id>. No EOS: runs go to length,
    and no token is special (Piece.special): random weights end no reply."""
    eos_token_id = None
    all_special_ids: tuple[int, ...] = ()

    def __init__(self, base, vocab_size: int):
        self.base, self.vocab_size = base, vocab_size

    def __call__(self, text, add_special_tokens=False):
        return self.base(text, add_special_tokens=add_special_tokens)

    def decode(self, ids, skip_special_tokens=False):
        known = len(self.base)
        out, run = [], []
        for i in ids:
            if i < known:
                run.append(i)
                continue
            out.append(self.base.decode(run)), out.append(f"<{i}>")
            run = []
        return "".join(out) + self.base.decode(run)


def resolve_device(device: str = "auto") -> str:
    """'auto' -> cuda > mps > cpu; an explicit device must be available (app.hardware)."""
    try:
        return detect_device(device)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from exc


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """'auto' -> float32 on CPU, bfloat16 on CUDA (float16 if unsupported), float16 on MPS."""
    if dtype != "auto":
        try:
            return parse_dtype(dtype)
        except ValueError as exc:
            raise ModelLoadError(f"{exc} (or auto)") from None
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float16 if device == "mps" else torch.float32


def locate(name: str | os.PathLike) -> str:
    """A local model directory, or a syntactically valid hub id; anything else is an error."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{name}: directory holds no model (no config.json)")
        return str(path)
    if HUB_ID.match(str(name)) and not str(name).startswith((".", "/", "~")):
        return str(name)
    raise ModelLoadError(f"{name}: no model directory there, and not a hub id like 'org/name'")


def hub_reachable(timeout: float = 3.0) -> bool:
    """Can we open a TCP connection to the hub endpoint? (huggingface_hub would otherwise retry
    for half a minute before giving up when there is no network.)"""
    from urllib.parse import urlparse

    from huggingface_hub import constants
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _from_pretrained(loader, name: str, **kw):
    """Call a transformers loader; turn download/offline failures into one clear line."""
    local = Path(name).is_dir()
    if not local and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ModelLoadError(f"{name}: needs a download but HF_HUB_OFFLINE=1; {EMBEDDED_HINT}")
    if not local and not _cached_on_disk(name) and not hub_reachable():
        raise ModelLoadError(f"{name}: needs a download and the hub cannot be reached (offline?); {EMBEDDED_HINT}")
    try:
        return loader.from_pretrained(name, trust_remote_code=False, **kw)
    except (OSError, ValueError) as exc:  # hub errors subclass OSError; bad files ValueError
        where = "could not be loaded" if local else "could not be downloaded (no internet?)"
        first = str(exc).strip().splitlines()[0][:200].rstrip(".") if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"{name} {where}: {first}. {EMBEDDED_HINT if not local else ''}".strip()) from exc


def _cached_on_disk(name: str) -> bool:
    """Whether a hub model's config is already in the local hub cache (loads without network)."""
    from huggingface_hub import try_to_load_from_cache
    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def model_params(name: str) -> int:
    """Parameters of a model directory or hub id, from its config alone (nothing allocated)."""
    return param_count(_from_pretrained(AutoConfig, name))


def check_fits(names: list[str], device: str, dtype: torch.dtype) -> None:
    """Read only the configs and refuse, before any weights are downloaded, a pair whose weights
    exceed the device's free memory (check_params_fit)."""
    check_params_fit([(n, model_params(n)) for n in names], device, dtype)


def load_model(name: str, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """from_pretrained on `device` in `dtype`, eval mode; a feature draft (app.feature_draft)
    also gets its feature projection from the same directory."""
    model = _from_pretrained(AutoModelForCausalLM, name, dtype=dtype).to(device).eval()
    if getattr(model.config, "feature_draft", False):
        attach_projection(model, name)
    return model


def same_tokenizer(a, b) -> bool:
    """Two tokenizers are interchangeable when they map every string to the same ids."""
    return a.get_vocab() == b.get_vocab() and a.eos_token_id == b.eos_token_id


def load_pair(target: str | None = None, draft: str | None = None, *, device: str = "auto",
              dtype: str = "auto", ngram: bool = False) -> ModelPair:
    """Load a pair (defaults: the embedded pair). With ngram=True no draft model is loaded."""
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    target_id = locate(target or TINY_TARGET_DIR)
    if not ngram and draft is None and target is not None:
        raise ModelLoadError("a custom target needs a draft (--draft DIR_OR_ID) or --drafter ngram")
    draft_id = None if ngram else locate(draft or TINY_DRAFT_DIR)
    t0 = time.perf_counter()
    tokenizer = _from_pretrained(AutoTokenizer, target_id)
    if draft_id is not None and draft_id != target_id:
        draft_tok = _from_pretrained(AutoTokenizer, draft_id)
        if not same_tokenizer(tokenizer, draft_tok):
            raise ModelLoadError(f"the tokenizers of {target_id} and {draft_id} differ: "
                                 "speculative decoding needs one shared vocabulary")
    check_fits([n for n in (target_id, draft_id) if n is not None], device, torch_dtype)
    target_model = load_model(target_id, device, torch_dtype)
    draft_model = None if draft_id is None else load_model(draft_id, device, torch_dtype)
    info = {"target_params": target_model.num_parameters(),
            "draft_params": draft_model.num_parameters() if draft_model is not None else 0,
            "load_seconds": round(time.perf_counter() - t0, 2)}
    return ModelPair(target_model, draft_model, tokenizer, device, torch_dtype,
                     target_id, draft_id, info)


def load_shape_pair(target_shape: str, draft_shape: str, *, device: str = "auto",
                    dtype: str = "auto") -> ModelPair:
    """Real architectures with random weights, built on the device (no download): timing only.
    Refused before either is built when their weights exceed the free memory (check_params_fit)."""
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    check_params_fit([(f"shape:{n}", shape_params(n)) for n in (target_shape, draft_shape)], device, torch_dtype)
    target = make_shape_model(target_shape, device, torch_dtype).eval()
    draft = make_shape_model(draft_shape, device, torch_dtype).eval()
    base = _from_pretrained(AutoTokenizer, str(TINY_TARGET_DIR))
    info = {"target_params": target.num_parameters(), "draft_params": draft.num_parameters(),
            "shape_only": True}
    return ModelPair(target, draft, ShapeTokenizer(base, target.config.vocab_size), device,
                     torch_dtype, f"shape:{target_shape}", f"shape:{draft_shape}", info)
