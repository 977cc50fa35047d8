"""The fast path: a static KV cache, and on CUDA compiled forwards that replay CUDA graphs.

Eager transformers on a GPU spends most of a small forward launching kernels from Python: on an
H200 an 8B-shaped model's single-token pass ran 5-11x above its memory floor
(../shared/anchors/h200_hf_eager.log), while a lean decoder replaying one CUDA graph per pass came
within 1.35x (h200_lean_graph.log). Two things make replay possible:

  1. a static KV cache (transformers StaticCache): tensors allocated once at their final size,
     written in place at the cache's own position counter, so every pass sees the same
     addresses. Rolling back rejected tokens is `crop(-n)`, which only moves the counter: the
     stale entries are overwritten by the next pass and masked until then (app.models);
  2. torch.compile(mode="reduce-overhead"), which captures one CUDA graph per input shape: per
     q = 1 .. gamma + 1 tokens a pass (prefills stay eager: one shape each, run once).

On a CPU there are no CUDA graphs; there the fast path is the lean decoder (app.lean: the same
arithmetic as transformers' Llama-family forward over the model's own weights, with a
preallocated cache and no per-module Python), which halves a small draft's forward (measured in
app/lean.py). Architectures app.lean does not cover, and MPS, get the static cache alone, run
eagerly. The app says which. Effects are measured, never assumed (`python -m app knee --fast`
and `python -m app bench --fast` time eager and fast side by side).
"""
from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass

import torch

from app import lean
from app.settings import MAX_GAMMA, InputError

COMPILED_MAX_Q = MAX_GAMMA + 1  # the widest verify pass; longer passes (prefills) run eagerly
_compiled: "weakref.WeakKeyDictionary[torch.nn.Module, object]" = weakref.WeakKeyDictionary()
failed: list[str] = []  # compiler errors seen (the fast path fell back to eager for that model)
_lean = {False: weakref.WeakKeyDictionary(), True: weakref.WeakKeyDictionary()}  # by int8: LeanModels


def graphs_available(device: str) -> bool:
    """CUDA graphs need a CUDA device (and torch.compile's inductor backend)."""
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def use_by_default(device: str) -> bool:
    """The lessons and the walkthrough take the fast path where it replays CUDA graphs; on a CPU
    (lean decoder) and MPS (static cache) it stays opt-in, and they run eagerly."""
    return graphs_available(device)


def uses_lean(model: torch.nn.Module) -> bool:
    """The fast path runs `model` with app.lean: on a CPU, for the architectures it covers."""
    return next(model.parameters()).device.type == "cpu" and lean.supports(model.config)


_KINDS = {  # what the fast path is on a device: (a few words, one line)
    "graphs": ("static cache + CUDA graphs",
               "static KV cache + CUDA graphs (torch.compile mode=reduce-overhead); the first pass "
               "of each size compiles (tens of seconds), later passes replay"),
    "lean": ("lean decoder",
             "lean decoder (app.lean: the same Llama arithmetic without transformers' per-module "
             "Python, preallocated KV cache); no CUDA graphs on a CPU"),
    "static": ("static cache, no CUDA graphs",
               "static KV cache only: no CUDA graphs on this device, so passes still launch from "
               "Python (measure it: python -m app knee --fast)"),
}


def _kind(device: str) -> str:
    if graphs_available(device):
        return "graphs"
    return "lean" if torch.device(device).type == "cpu" else "static"


def describe(device: str) -> str:
    """One line: what the fast path does on this device."""
    return _KINDS[_kind(device)][1]


def label(device: str) -> str:
    """A few words for a status line: what the fast path is on this device."""
    return _KINDS[_kind(device)][0]


@dataclass(frozen=True)
class Path:
    """How one run's forward passes execute, chosen once per run (app.engine) and carried by
    every cache it makes. max_len None: transformers eagerly over a DynamicCache. max_len set: the
    fast path, caches of max_len positions with fixed addresses (app.lean's LeanCache where it
    runs the model, a StaticCache otherwise). int8: the model runs with int8 weights
    (app.lean.Int8Weight; a draft on the lean decoder only)."""
    max_len: int | None = None
    int8: bool = False

    @property
    def fast(self) -> bool:
        return self.max_len is not None

    def new_cache(self, model: torch.nn.Module | None = None, batch: int = 1):
        """A cache for `model` on this path; app.settings.InputError for int8 where app.lean
        does not run the model."""
        if self.int8 and (not self.fast or model is None or not uses_lean(model)):
            raise InputError("int8 draft weights run on the lean decoder only: a Llama-family draft "
                             "on a CPU, with the fast path on")
        if not self.fast or model is None:
            from transformers import DynamicCache
            return DynamicCache()
        if uses_lean(model):
            runner = _runner(model, self.int8)
            return runner.new_cache(batch, min(self.max_len, runner.max_positions))
        from transformers import StaticCache
        return StaticCache(config=model.config, max_cache_len=self.max_len)


EAGER = Path()


def _runner(model: torch.nn.Module, int8: bool) -> lean.LeanModel:
    """The LeanModel that runs `model` (built once per model and int8 setting, then reused)."""
    runners = _lean[int8]
    if model not in runners:
        runners[model] = lean.LeanModel(model, int8=int8)
    return runners[model]


def prepare(model: torch.nn.Module, device: str, int8: bool = False) -> None:
    """Build now what the fast path will run `model` with, so that a timed run does not pay
    for it: the LeanModel (its int8 weights quantised, the output matrix transposed) or the
    compiled wrapper: a first run that built them inside its clock measured about half the speed
    of the same run repeated (research/RESULTS.md). (A compiled model still compiles on its first
    pass of each size.)"""
    enable(model, device)
    if uses_lean(model):
        _runner(model, int8)


def enable(model: torch.nn.Module, device: str) -> None:
    """Compile `model`'s forward for graph replay on CUDA (once per model); no-op elsewhere."""
    if graphs_available(device) and model not in _compiled:
        _compiled[model] = torch.compile(model, mode="reduce-overhead", fullgraph=True, dynamic=False)


class _Eager:
    """transformers' own forward over a DynamicCache (or a StaticCache: the cache decides)."""

    def logits(self, model, input_ids: torch.Tensor, cache) -> torch.Tensor:
        return model(input_ids=input_ids, cache=cache, use_cache=True).logits

    def fill(self, model, input_ids: torch.Tensor, cache) -> None:
        model.base_model(input_ids=input_ids, cache=cache, use_cache=True)  # no output layer

    def hidden(self, model, input_ids: torch.Tensor, cache, extra: torch.Tensor | None = None):
        """(logits, final-normed hidden [batch, q, hidden]); extra [batch, q, hidden] is added to
        the token embeddings (a feature draft's input, app.feature_draft)."""
        if extra is None:
            h = model.base_model(input_ids=input_ids, cache=cache, use_cache=True).last_hidden_state
        else:
            embeds = model.get_input_embeddings()(input_ids) + extra
            h = model.base_model(inputs_embeds=embeds, cache=cache, use_cache=True).last_hidden_state
        return model.get_output_embeddings()(h), h


class _Static(_Eager):
    """A StaticCache: the compiled model (CUDA graph replay, q up to COMPILED_MAX_Q, once
    enable() compiled it) for logits; eager for the rest (prefills run once per shape)."""

    def logits(self, model, input_ids: torch.Tensor, cache) -> torch.Tensor:
        compiled = _compiled.get(model) if input_ids.shape[1] <= COMPILED_MAX_Q else None
        if compiled is not None:
            try:
                return compiled(input_ids=input_ids, cache=cache, use_cache=True).logits
            except Exception as exc:  # noqa: BLE001 - a compiler failure must not end the decode
                failed.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
                _compiled.pop(model, None)  # run this model eagerly from now on (static cache kept)
                print(f"speclab: torch.compile failed, the fast path continues without CUDA graphs: "
                      f"{failed[-1]}", file=sys.stderr)
        return super().logits(model, input_ids, cache)


class _Lean:
    """A LeanCache: the LeanModel that made it (fp32 or int8 weights) runs every pass."""

    def logits(self, model, input_ids: torch.Tensor, cache) -> torch.Tensor:
        return cache.model(input_ids, cache)

    def fill(self, model, input_ids: torch.Tensor, cache) -> None:
        cache.model.forward(input_ids, cache, logits=False)

    def hidden(self, model, input_ids: torch.Tensor, cache, extra: torch.Tensor | None = None):
        return cache.model.forward(input_ids, cache, extra=extra, hidden=True)


_RUNNERS = (_Eager(), _Static(), _Lean())


def runner(cache):
    """What runs a pass over `cache`, as its Path made it: the one place the path is read back.
    Each has logits(model, ids, cache), fill(model, ids, cache) and hidden(model, ids, cache,
    extra=None), ids [batch, q] after the cached positions."""
    from transformers import StaticCache
    if isinstance(cache, lean.LeanCache):
        return _RUNNERS[2]
    return _RUNNERS[1] if isinstance(cache, StaticCache) else _RUNNERS[0]
