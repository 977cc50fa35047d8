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
from transformers import DynamicCache

from app import fastpath
from app.draft_vocab import DraftVocab
from app.lean import LeanCache
from app.settings import InputError


def new_cache(model: torch.nn.Module | None = None, max_len: int | None = None, batch: int = 1,
              int8: bool = False):
    """A DynamicCache; with a model and max_len, the fast path's cache of max_len positions
    (app.fastpath: a StaticCache, or app.lean's LeanCache on a CPU; both have fixed addresses
    and roll back by moving a position counter). int8: the model runs with int8 weights
    (app.lean.Int8Weight; the fast path on a CPU only)."""
    if model is None or max_len is None:
        if int8:
            raise InputError("int8 draft weights need the fast path (turn it on)")
        return DynamicCache()
    return fastpath.new_cache(model, max_len, batch, int8)


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
        logits = fastpath.forward(model, input_ids, cache)
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
    if isinstance(cache, LeanCache):
        cache.model.forward(input_ids, cache, logits=False)
    else:  # eager, over a DynamicCache or a StaticCache (the base model: no lm_head)
        model.base_model(input_ids=input_ids, cache=cache, use_cache=True)


def _forward_hidden(model, input_ids: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [batch, q, vocab], final-normed hidden [batch, q, hidden]) of a *ForCausalLM:
    its base model's last_hidden_state and its lm_head (what its own forward computes); the
    lean decoder for a LeanCache, transformers eagerly otherwise (no CUDA graph)."""
    if isinstance(cache, LeanCache):
        return cache.model.forward(input_ids, cache, hidden=True)
    h = model.base_model(input_ids=input_ids, cache=cache, use_cache=True).last_hidden_state
    return model.get_output_embeddings()(h), h
