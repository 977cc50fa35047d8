"""A draft that predicts only part of the target's vocabulary (frequency-ranked drafting).

A small draft on a large vocabulary spends most of its forward in the output layer: SmolLM2's
49,152 rows x 256 are 12.6M of a 16M-parameter draft, and at batch 1 every weight is read once
per token. A draft may instead keep the K target tokens that carry nearly all of the target's
probability in practice (FR-Spec, Zhao et al. 2025, "Frequency-Ranked Speculative Sampling"),
plus one extra row that stands for "any other token" on the input side.

This stays exact: speculative sampling accepts any proposal distribution q_draft (Leviathan et al.
2023, Theorem 1). Tokens outside the K get q_draft = 0, so they are never drafted, and the
target's correction (residual max(0, p_target - q_draft)) can still produce them.

A draft declares it in its config.json, so the usual `from_pretrained` loads it anywhere:
    draft_vocab_ids:   [K] target token ids; row i of the draft's embedding is token ids[i]
    target_vocab_size: V, the target's vocabulary; the draft's vocab_size is K + 1
`app.kvcache.forward` applies it: target ids -> draft rows on the way in, draft logits
[.., K + 1] -> target logits [.., V] on the way out (-inf outside the K).
"""
from __future__ import annotations

import weakref

import torch

_maps: "weakref.WeakKeyDictionary[torch.nn.Module, DraftVocab | None]" = weakref.WeakKeyDictionary()


class DraftVocab:
    """ids: [K] target ids kept by the draft; target_vocab: V."""

    def __init__(self, ids: list[int], target_vocab: int, device):
        self.ids = torch.tensor(ids, dtype=torch.long, device=device)         # [K]
        self.target_vocab = int(target_vocab)
        self.other = len(ids)                                                  # the extra row
        to_draft = torch.full((self.target_vocab,), self.other, dtype=torch.long)
        to_draft[self.ids.cpu()] = torch.arange(len(ids))
        self.to_draft = to_draft.to(device)                                    # [V] -> row

    @classmethod
    def of(cls, model: torch.nn.Module) -> DraftVocab | None:
        """The model's map, or None for an ordinary model (cached per model)."""
        if model not in _maps:
            ids = getattr(model.config, "draft_vocab_ids", None)
            _maps[model] = None if ids is None else cls(
                ids, model.config.target_vocab_size, next(model.parameters()).device)
        return _maps[model]

    def draft_input(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[batch, q] target ids -> [batch, q] draft rows (unknown tokens -> the extra row)."""
        return self.to_draft[input_ids]

    def target_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """[batch, q, K + 1] draft logits -> [batch, q, V]: the K kept columns in place, -inf
        elsewhere (the extra row is an input, never a proposal)."""
        out = logits.new_full((*logits.shape[:-1], self.target_vocab), float("-inf"))
        out[..., self.ids] = logits[..., :self.other]
        return out


def target_vocab_size(model: torch.nn.Module) -> int:
    """The vocabulary the model's logits cover after app.kvcache.forward."""
    return int(getattr(model.config, "target_vocab_size", None) or model.config.vocab_size)
