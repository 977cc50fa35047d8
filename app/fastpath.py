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

On CPU and MPS there are no CUDA graphs: the fast path is the static cache alone, run eagerly,
and the app says so. Its effect is measured, never assumed (`python -m app knee --fast` and
`python -m app bench --fast` time eager and fast side by side).
"""
from __future__ import annotations

import weakref

import torch

COMPILED_MAX_Q = 17  # the widest verify pass (MAX_GAMMA + 1); longer passes (prefills) run eagerly
_compiled: "weakref.WeakKeyDictionary[torch.nn.Module, object]" = weakref.WeakKeyDictionary()


def graphs_available(device: str) -> bool:
    """CUDA graphs need a CUDA device (and torch.compile's inductor backend)."""
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def use_by_default(device: str) -> bool:
    """The lessons and the walkthrough take the fast path where it replays CUDA graphs; on CPU
    and MPS (static cache only, measured no faster) they stay eager."""
    return graphs_available(device)


def describe(device: str) -> str:
    """One line: what the fast path does on this device."""
    if graphs_available(device):
        return ("static KV cache + CUDA graphs (torch.compile mode=reduce-overhead); the first "
                "pass of each size compiles (tens of seconds), later passes replay")
    return (f"static KV cache only: {torch.device(device).type} has no CUDA graphs, so passes "
            "still launch from Python (measure it: python -m app knee --fast)")


def enable(model: torch.nn.Module, device: str) -> None:
    """Compile `model`'s forward for graph replay on CUDA (once per model); no-op elsewhere."""
    if graphs_available(device) and model not in _compiled:
        _compiled[model] = torch.compile(model, mode="reduce-overhead", fullgraph=True, dynamic=False)


def runner(model: torch.nn.Module, q: int, static: bool):
    """The callable for a q-token pass: the compiled model for a static cache and q up to
    COMPILED_MAX_Q when enable() compiled it, else the eager model."""
    if static and q <= COMPILED_MAX_Q:
        return _compiled.get(model, model)
    return model
