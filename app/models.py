"""Loading a draft/target pair, and the only code that touches the transformers cache API.

A pair is two causal LMs that share one tokenizer. Either side is a local model directory or a
Hugging Face hub id; the embedded pair in `demo_models/tiny/` is loaded by exactly the same
`from_pretrained` calls as a hub pair. `trust_remote_code` is never passed.

transformers 5.x cache churn lives here: the forward keyword is `cache` (was
`past_key_values`), the output field is `.cache`, and `DynamicCache.crop(n)` takes a *negative*
n, the number of tokens to drop.
"""
from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, DynamicCache

from app.assets import TINY_DRAFT_DIR, TINY_TARGET_DIR
from app.draft_vocab import DraftVocab, target_vocab_size

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[\w.\-]{1,96}$")
EMBEDDED_HINT = ("the embedded pair works offline: leave --target/--draft unset "
                 "(or choose 'embedded' in the app)")


class ModelLoadError(ValueError):
    """A pair could not be loaded; the message says why in one line."""


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
    with the embedded tokenizer, ids it does not know print as <id>. No EOS: runs go to length."""
    eos_token_id = None

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
    from app.hardware import detect_device
    try:
        return detect_device(device)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from exc


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """'auto' -> float32 on CPU, bfloat16 on CUDA (float16 if unsupported), float16 on MPS."""
    if dtype != "auto":
        from app.hardware import parse_dtype
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
    from app.costmodel import param_count
    return param_count(_from_pretrained(AutoConfig, name))


def check_fits(names: list[str], device: str, dtype: torch.dtype) -> None:
    """Read only the configs and refuse, before any weights are downloaded, a pair whose weights
    exceed the device's free memory (check_params_fit)."""
    check_params_fit([(n, model_params(n)) for n in names], device, dtype)


def check_params_fit(params: list[tuple[str, int]], device: str, dtype: torch.dtype) -> None:
    """Refuse, before anything is allocated, models ([(name, parameter count)], counted from their
    configs) whose weights (parameters x bytes per parameter) exceed the memory free on `device`
    now (app.hardware.free_memory_bytes: MemAvailable on a CPU, free device memory on CUDA / MPS).
    Weights only: the KV cache and activations come on top, so a pair that barely fits may still
    run out of memory while decoding."""
    from app.hardware import free_memory_bytes
    free = free_memory_bytes(device)
    if free is None:
        return
    per_param = torch.finfo(dtype).bits // 8
    need = sum(count for _, count in params) * per_param
    if need > free:
        smaller = "a smaller pair" + (" or bfloat16 (half the bytes)" if per_param == 4 else "")
        raise ModelLoadError(f"{' + '.join(name for name, _ in params)} need {need / 1e9:.1f} GB of weights in "
                             f"{str(dtype).replace('torch.', '')}, but {device} has {free / 1e9:.1f} GB free: "
                             f"choose {smaller}")


def load_model(name: str, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """from_pretrained on `device` in `dtype`, eval mode; a feature draft (app.feature_draft)
    also gets its feature projection from the same directory."""
    model = _from_pretrained(AutoModelForCausalLM, name, dtype=dtype).to(device).eval()
    if getattr(model.config, "feature_draft", False):
        from app.feature_draft import attach_projection
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
    from app.shapes import make_shape_model, shape_params
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


# --- the transformers cache API, in one place -------------------------------------------

def new_cache(model: torch.nn.Module | None = None, max_len: int | None = None, batch: int = 1,
              int8: bool = False):
    """A DynamicCache; with a model and max_len, the fast path's cache of max_len positions
    (app.fastpath: a StaticCache, or app.lean's LeanCache on a CPU; both have fixed addresses
    and roll back by moving a position counter). int8: the model runs with int8 weights
    (app.lean.Int8Weight; the fast path on a CPU only)."""
    if model is None or max_len is None:
        if int8:
            from app.validation import InputError
            raise InputError("int8 draft weights need the fast path (turn it on)")
        return DynamicCache()
    from app.fastpath import new_cache as fast_cache
    return fast_cache(model, max_len, batch, int8)


def cache_len(cache) -> int:
    return int(cache.get_seq_length())


def crop_cache(cache, keep: int) -> None:
    """Keep the first `keep` positions (transformers 5.x: crop takes -tokens_to_remove; a
    StaticCache only moves its counter, the next pass overwrites the stale entries)."""
    drop = cache_len(cache) - keep
    if drop > 0:
        cache.crop(-drop)


@torch.inference_mode()
def forward(model: torch.nn.Module, input_ids: torch.Tensor, cache, hidden: bool = False):
    """input_ids: [batch, q] new tokens after the cached ones -> logits [batch, q, vocab].
    A DynamicCache runs transformers eagerly; a fast-path cache runs app.fastpath.forward.
    A draft over part of the vocabulary gets target ids and returns target-vocabulary logits.
    hidden=True (a feature draft's target, app/feature_draft.py): (logits, the final-normed
    hidden states [batch, q, hidden] the output layer read)."""
    vocab = DraftVocab.of(model)  # a draft over part of the vocabulary (app.draft_vocab), or None
    if vocab is not None:
        input_ids = vocab.draft_input(input_ids)
    if hidden:
        return _forward_hidden(model, input_ids, cache)
    if isinstance(cache, DynamicCache):
        logits = model(input_ids=input_ids, cache=cache, use_cache=True).logits
    else:
        from app.fastpath import forward as fast_forward
        logits = fast_forward(model, input_ids, cache)
    return logits if vocab is None else vocab.target_logits(logits)  # [batch, q, target vocab]


@torch.inference_mode()
def fill_cache(model: torch.nn.Module, input_ids: torch.Tensor, cache) -> None:
    """input_ids [batch, q] after the cached ones -> their keys and values in `cache`, and no
    logits: a prefill whose logits nobody reads skips the output layer (as generate's
    logits_to_keep does). The cache ends exactly as forward() leaves it. SmolLM2's output layer
    is 28M of its 135M weights, so a fifth of a prefill's FLOPs."""
    from app.lean import LeanCache
    vocab = DraftVocab.of(model)
    if vocab is not None:
        input_ids = vocab.draft_input(input_ids)
    if isinstance(cache, LeanCache):
        cache.model.forward(input_ids, cache, logits=False)
    else:  # eager, over a DynamicCache or a StaticCache (the base model: no lm_head)
        model.base_model(input_ids=input_ids, cache=cache, use_cache=True)


def _forward_hidden(model, input_ids: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [batch, q, vocab], final-normed hidden [batch, q, hidden]) of a *ForCausalLM:
    its base model's last_hidden_state and its lm_head (what its own forward computes); the
    lean decoder for a LeanCache, transformers eagerly otherwise (no CUDA graph)."""
    from app.lean import LeanCache
    if isinstance(cache, LeanCache):
        return cache.model.forward(input_ids, cache, hidden=True)
    h = model.base_model(input_ids=input_ids, cache=cache, use_cache=True).last_hidden_state
    return model.get_output_embeddings()(h), h
