"""Drafters: whatever proposes the gamma tokens the target verifies, behind one interface.

    start(ids)                      - see the prompt (prefill); returns the forwards it ran
    propose(ids, gamma, transform)  - up to gamma tokens with q_draft of each
    rollback(n_valid)               - forget everything after the first n_valid tokens

`ModelDrafter` runs a small causal LM autoregressively (one forward per drafted token).
`NgramDrafter` is prompt lookup decoding (Saxena 2023; transformers' `prompt_lookup_num_tokens`):
it copies what followed the latest earlier occurrence of the context's last n tokens. It has no
model, so q_draft is one-hot on its proposal and the acceptance test reduces to r < p_target(x).
`NoDrafter` proposes nothing: speculative decoding with it *is* plain autoregressive decoding.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from app.fastpath import EAGER, Path
from app.kvcache import cache_len, crop_cache, new_cache
from app.timing import timed_forward
from app.trace import ForwardTiming

Transform = Callable[[torch.Tensor], torch.Tensor]  # logits [n, vocab] -> probs [n, vocab]


@dataclass
class Proposal:
    """draft_ids: [g] (g <= gamma, possibly 0); q_draft: [g, vocab] under the run's transform;
    q_display: [g, vocab], what the inspector shows (softmax at T=1 when decoding greedily)."""
    draft_ids: torch.Tensor
    q_draft: torch.Tensor
    q_display: torch.Tensor
    forwards: list[ForwardTiming] = field(default_factory=list)


class NoDrafter:
    name = "none"

    def start(self, ids: list[int]) -> list[ForwardTiming]:
        return []

    def propose(self, ids, gamma, transform, display, sampler, keep_drafting=None) -> Proposal:
        empty = torch.zeros(0, dtype=torch.long)
        return Proposal(empty, torch.zeros(0, 0), torch.zeros(0, 0))

    def rollback(self, n_valid: int) -> None:
        pass


class ModelDrafter:
    """A draft LM with its own KV cache. Its cache holds a prefix of the accepted tokens: after a
    fully accepted step it lacks the last draft token (never fed), so the next propose() feeds
    two tokens in its first pass (gpt-fast feeds it eagerly instead; same result)."""
    name = "model"

    def __init__(self, model, device: str, path: Path = EAGER):
        """path: how the run's passes execute (app.fastpath.Path: eager, or the fast path's
        caches of path.max_len positions; path.int8: the draft's int8 weights, app.lean)."""
        self.model, self.device, self.path = model, device, path
        self.cache = new_cache()

    def start(self, ids: list[int]) -> list[ForwardTiming]:
        self.cache = self.path.new_cache(self.model)
        if len(ids) < 2:
            return []
        prompt = torch.tensor([ids[:-1]], device=self.device)  # [1, n - 1]
        _, timing = timed_forward(self.model, prompt, self.cache, self.device,  # no logits: none is read
                                  model_name="draft", phase="prefill", logits=False)
        return [self._marked(timing)]

    def _marked(self, timing: ForwardTiming) -> ForwardTiming:
        timing.weights = "int8" if self.path.int8 else ""
        return timing

    def propose(self, ids, gamma, transform, display, sampler, keep_drafting=None) -> Proposal:
        """Draft up to gamma tokens, stopping early when keep_drafting(q_row) is False; q_row is
        the displayed distribution (the draft's softmax even when decoding greedily)."""
        tokens, q_rows, shown, forwards = [], [], [], []
        pending = ids[cache_len(self.cache):]  # 1 token, or 2 after a fully accepted step
        for _ in range(gamma):
            x = torch.tensor([pending], device=self.device)  # [1, len(pending)]
            logits, timing = timed_forward(self.model, x, self.cache, self.device,
                                           model_name="draft", phase="draft")
            last = logits[0, -1:]  # [1, vocab]
            q_rows.append(transform(last)[0]), shown.append(display(last)[0])
            tokens.append(sampler(q_rows[-1]))
            forwards.append(self._marked(timing))
            pending = tokens[-1:]
            if keep_drafting is not None and not keep_drafting(shown[-1]):
                break
        if not tokens:
            return NoDrafter().propose(ids, 0, transform, display, sampler)
        return Proposal(torch.tensor(tokens), torch.stack(q_rows).cpu(), torch.stack(shown).cpu(), forwards)

    def rollback(self, n_valid: int) -> None:
        crop_cache(self.cache, min(n_valid, cache_len(self.cache)))


class NgramDrafter:
    """Prompt lookup: match the last n tokens (n = max_n .. 1) earlier in the context and
    propose the tokens that followed the most recent match."""
    name = "ngram"

    def __init__(self, vocab_size: int, max_n: int = 3):
        self.vocab_size, self.max_n = vocab_size, max_n

    def start(self, ids: list[int]) -> list[ForwardTiming]:
        return []

    def lookup(self, ids: list[int], gamma: int) -> list[int]:
        for n in range(min(self.max_n, len(ids) - 1), 0, -1):
            tail = ids[-n:]
            for start in range(len(ids) - n - 1, -1, -1):  # most recent earlier match first
                if ids[start:start + n] == tail:
                    return ids[start + n:start + n + gamma]
        return []

    def propose(self, ids, gamma, transform, display, sampler, keep_drafting=None) -> Proposal:
        tokens = self.lookup(ids, gamma) if gamma > 0 else []
        q = torch.zeros(len(tokens), self.vocab_size)  # [g, vocab], one-hot: q(x) = 1
        if tokens:
            q[torch.arange(len(tokens)), torch.tensor(tokens)] = 1.0
        return Proposal(torch.tensor(tokens, dtype=torch.long), q, q.clone())

    def rollback(self, n_valid: int) -> None:
        pass
