"""The transformers KV-cache API, in one place: make a cache, measure and crop it, and run one
forward pass of a model over it (eagerly, or on the fast path).

transformers 5.x cache churn lives here: the forward keyword is `cache` (was
`past_key_values`), the output field is `.cache`, and `DynamicCache.crop(n)` takes a *negative*
n, the number of tokens to drop. Split from app.models (which re-exports these names) so that
the drafters, the timing code and the feature draft use a cache without importing the model
loader, which itself imports the feature draft.
"""
from __future__ import annotations

import torch

from app import fastpath
from app.draft_vocab import DraftVocab


def new_cache(model: torch.nn.Module | None = None, max_len: int | None = None, batch: int = 1,
              int8: bool = False):
    """A cache for `model` on the path app.fastpath.Path(max_len, int8) names: a DynamicCache
    (max_len None), else the fast path's cache of max_len positions (a StaticCache, or app.lean's
    LeanCache on a CPU; both have fixed addresses and roll back by moving a position counter).
    int8: the model runs with int8 weights (app.lean.Int8Weight; the fast path on a CPU only)."""
    return fastpath.Path(max_len, int8).new_cache(model, batch)


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
    The cache's path runs it (app.fastpath.runner: transformers eagerly, a compiled model over a
    StaticCache, or app.lean).
    A draft over part of the vocabulary gets target ids and returns target-vocabulary logits.
    hidden=True (a feature draft's target, app/feature_draft.py): (logits, the final-normed
    hidden states [batch, q, hidden] the output layer read)."""
    vocab = DraftVocab.of(model)  # a draft over part of the vocabulary (app.draft_vocab), or None
    if vocab is not None:
        input_ids = vocab.draft_input(input_ids)
    run = fastpath.runner(cache)  # how this cache's path runs a pass (eager, static or lean)
    if hidden:
        return run.hidden(model, input_ids, cache)
    logits = run.logits(model, input_ids, cache)
    return logits if vocab is None else vocab.target_logits(logits)  # [batch, q, target vocab]


@torch.inference_mode()
def fill_cache(model: torch.nn.Module, input_ids: torch.Tensor, cache) -> None:
    """input_ids [batch, q] after the cached ones -> their keys and values in `cache`, and no
    logits: a prefill whose logits nobody reads skips the output layer (as generate's
    logits_to_keep does). The cache ends exactly as forward() leaves it. SmolLM2's output layer
    is 28M of its 135M weights, so a fifth of a prefill's FLOPs."""
    vocab = DraftVocab.of(model)
    if vocab is not None:
        input_ids = vocab.draft_input(input_ids)
    fastpath.runner(cache).fill(model, input_ids, cache)


