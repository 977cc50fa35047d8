"""Speculative sampling as pure tensor functions (no models).

Notation follows Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via
Speculative Decoding" (arXiv 2211.17192), Algorithm 1: p = target, q = draft. (Chen et al. 2023,
arXiv 2302.01318, Alg. 2, and gpt-fast swap the letters; the names p_target / q_draft keep them
straight.)

For each drafted token x_i ~ q_draft(. | prefix):
    draw r_i ~ U(0, 1); accept while r_i < min(1, p_target(x_i) / q_draft(x_i));
    at the first rejection sample the correction from norm(max(0, p_target - q_draft)) and stop;
    if all gamma drafts are accepted, sample a bonus token from p_target at position gamma + 1.
The emitted tokens are then distributed exactly as the target alone would sample them.

Both models' logits go through the same `logits_to_probs` (temperature, top-k, top-p) before
the ratio is taken; transforming only one of them breaks exactness (transformers issue #32867,
fixed in PR #33534). Temperature 0 is greedy: accept iff x_i is the target's argmax, and the
correction / bonus are argmaxes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_TEMPERATURE = 10.0


def logits_to_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                    top_p: float = 1.0) -> torch.Tensor:
    """The one logits -> probabilities transform, for draft and target alike.

    logits: [..., vocab] -> probs: [..., vocab] (float32, rows sum to 1).
    temperature 0 returns a one-hot row at the argmax (greedy). top_k 0 and top_p 1 disable
    those filters. Filters keep at least the most likely token.
    """
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = torch.softmax(sorted_logits, -1).cumsum(-1)
        drop_sorted = cumulative - torch.softmax(sorted_logits, -1) >= top_p  # mass before >= p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocab order
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.softmax(logits, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None, greedy: bool) -> int:
    """One token from a probability row [vocab]: argmax when greedy, else a seeded draw."""
    if greedy:
        return int(probs.argmax())
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


def residual(p_row: torch.Tensor, q_row: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over the vocabulary: [vocab] -> [vocab].

    If p == q exactly the residual is empty; then a rejection has probability 0, but guard
    against rounding by falling back to p."""
    diff = torch.clamp(p_row - q_row, min=0)
    total = diff.sum()
    return diff / total if total > 0 else p_row


@dataclass
class Verdict:
    """The outcome of verifying gamma drafted tokens against one target pass.

    n_accepted: accepted drafts (0..gamma). next_token: the correction (after a rejection) or
    the bonus token (all accepted). r / ratio / accepted: one entry per examined position,
    up to and including the first rejection. residual: norm(max(0, p - q)) at the rejected
    position ([vocab]), None when all were accepted.
    """
    n_accepted: int
    next_token: int
    r: list[float | None]
    ratio: list[float]
    accepted: list[bool]
    residual: torch.Tensor | None

    @property
    def is_bonus(self) -> bool:
        return self.residual is None


def verify(draft_ids: torch.Tensor, q_draft: torch.Tensor, p_target: torch.Tensor,
           generator: torch.Generator | None = None, greedy: bool = False) -> Verdict:
    """Leviathan et al. Algorithm 1, one step.

    draft_ids: [gamma]          the drafted tokens x_1..x_gamma
    q_draft:   [gamma, vocab]   q_draft(. | prefix, x_<i) for each drafted position
    p_target:  [gamma+1, vocab] p_target(. | prefix, x_<i) for i = 1..gamma+1
    Both distributions must come from the same `logits_to_probs`. With greedy=True (T = 0)
    no uniforms are drawn: accept iff x_i == argmax p_target; next token = argmax.
    """
    gamma = draft_ids.shape[0]
    rs, ratios, accepted = [], [], []
    for i in range(gamma):
        x = int(draft_ids[i])
        p_x, q_x = float(p_target[i, x]), float(q_draft[i, x])
        ratio = p_x / q_x if q_x > 0 else float("inf")
        if greedy:
            r, ok = None, x == int(p_target[i].argmax())
        else:
            r = float(torch.rand(1, generator=generator))
            ok = r < min(1.0, ratio)
        rs.append(r), ratios.append(ratio), accepted.append(ok)
        if not ok:
            res = p_target[i] if greedy else residual(p_target[i], q_draft[i])
            return Verdict(i, sample(res, generator, greedy), rs, ratios, accepted, res)
    bonus = sample(p_target[gamma], generator, greedy)
    return Verdict(gamma, bonus, rs, ratios, accepted, None)
