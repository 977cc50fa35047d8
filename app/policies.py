"""Depth policies: how many tokens to draft at each step (gamma), and when to stop early.

A policy is asked `gamma()` before each step, `keep_drafting(q_row)` after each drafted token
(q_row: the draft's distribution [vocab] that token was sampled from), and `update(event)` after
each step. The engine's default is FixedDepth; the Live tab and lesson 3 (app.lessons.policies,
which compares them) choose among all four by name (make_policy):

  * fixed       - always gamma (Leviathan et al. 2023; the default of most engines)
  * heuristic   - transformers' "heuristic" schedule (num_assistant_tokens_schedule): +2 after a
                  step whose drafts were all accepted, -1 otherwise; clamped to [1, gamma_max]
  * confidence  - draft up to gamma_max, stop as soon as the draft's top probability falls below
                  a threshold (the idea of transformers' assistant_confidence_threshold)
  * roofline    - each step pick gamma in [1, gamma_max] maximising expected tokens per second
                      E(gamma) / T(gamma),  E = (1 - a^(gamma+1)) / (1 - a)      (Leviathan eq. 1)
                                            T = gamma * t_draft + t_target(q = gamma + 1)
                  with t(q) measured on this pair (measure_costs) and a running estimate of alpha:
                  a = A / N, A <- decay * A + accepted, N <- decay * N + examined positions.
"""
from __future__ import annotations

from app.settings import InputError

POLICY_NAMES = ("fixed", "heuristic", "confidence", "roofline")


def expected_tokens(alpha: float, gamma: int) -> float:
    """Leviathan et al. eq. (1): E[tokens per target pass] = (1 - alpha^(gamma+1)) / (1 - alpha)."""
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


class FixedDepth:
    """Always draft gamma tokens (Leviathan et al. 2023; the default of most engines)."""
    name = "fixed"

    def __init__(self, gamma: int):
        self.gamma_value = gamma

    def gamma(self) -> int:
        return self.gamma_value

    def keep_drafting(self, q_row) -> bool:
        return True

    def update(self, event) -> None:
        pass


class HeuristicDepth:
    """+2 after all drafts accepted, -1 otherwise, within [1, gamma_max] (transformers'
    AssistedCandidateGenerator.update_candidate_strategy, schedule "heuristic")."""
    name = "heuristic"

    def __init__(self, gamma: int, gamma_max: int):
        self.gamma_max, self.value = gamma_max, min(max(gamma, 1), gamma_max)

    def gamma(self) -> int:
        return self.value

    def keep_drafting(self, q_row) -> bool:
        return True

    def update(self, event) -> None:
        if event.gamma == 0:
            return
        step = 2 if event.n_accepted == event.gamma else -1
        self.value = min(max(self.value + step, 1), self.gamma_max)


class ConfidenceStop:
    """Draft up to gamma_max; stop after a token whose distribution has max q_draft < threshold.

    The engine passes the draft's softmax (at T = 1 under greedy decoding) as q_row."""
    name = "confidence"

    def __init__(self, gamma_max: int, threshold: float):
        self.gamma_max, self.threshold = gamma_max, threshold

    def gamma(self) -> int:
        return self.gamma_max

    def keep_drafting(self, q_row) -> bool:
        return float(q_row.max()) >= self.threshold

    def update(self, event) -> None:
        pass


class RooflineDepth:
    """argmax over gamma of E(gamma) / T(gamma) (module docstring). t_target[q - 1] = t(q)."""
    name = "roofline"

    def __init__(self, t_draft: float, t_target: list[float], gamma_max: int,
                 alpha0: float = 0.5, prior_weight: float = 2.0, decay: float = 0.8):
        if len(t_target) < gamma_max + 1:
            raise InputError("roofline policy: need t(q) for q = 1..gamma_max+1")
        self.t_draft, self.t_target, self.gamma_max = t_draft, t_target, gamma_max
        self.accepted, self.examined, self.decay = alpha0 * prior_weight, prior_weight, decay
        self.history: list[int] = []

    @property
    def alpha(self) -> float:
        return min(self.accepted / self.examined, 0.999)

    def rate(self, gamma: int) -> float:
        """Expected tokens per second at depth gamma under the current alpha estimate."""
        return expected_tokens(self.alpha, gamma) / (gamma * self.t_draft + self.t_target[gamma])

    def gamma(self) -> int:
        best = max(range(1, self.gamma_max + 1), key=self.rate)
        self.history.append(best)
        return best

    def keep_drafting(self, q_row) -> bool:
        return True

    def update(self, event) -> None:
        if event.checks:
            self.accepted = self.decay * self.accepted + event.n_accepted
            self.examined = self.decay * self.examined + len(event.checks)


def measure_costs(pair, gamma_max: int, kv_len: int, repeats: int = 3, fast: bool | None = None,
                  int8: bool = False) -> tuple[float, list[float]]:
    """(t_draft(1), [t_target(q) for q = 1..gamma_max + 1]) on this pair, batch 1, timed on the
    path the decode will run: fast (app.fastpath; default: where the lessons decode on it,
    CUDA) and int8 (the draft's int8 weights, fast path on a CPU) as the decode's settings say."""
    # deferred: this module stays free of torch (app.lessons lists its lessons without loading
    # model code, and app.lessons.common imports expected_tokens from here)
    from app.fastpath import use_by_default
    from app.knee import time_forward

    fast = use_by_default(pair.device) if fast is None else fast
    t_draft = time_forward(pair.draft, device=pair.device, batch=1, q=1, kv_len=kv_len, repeats=repeats,
                           fast=fast, int8=int8)
    t_target = [time_forward(pair.target, device=pair.device, batch=1, q=q, kv_len=kv_len,
                             repeats=repeats, fast=fast) for q in range(1, gamma_max + 2)]
    return t_draft, t_target


def make_policy(name: str, gamma: int, gamma_max: int, threshold: float, costs):
    """The policy called `name` (POLICY_NAMES): gamma is where fixed and heuristic start,
    gamma_max the cap of the others; threshold: the confidence stop's; costs: measure_costs'
    (t_draft, t_target) for the roofline policy (None for the others)."""
    if name == "fixed":
        return FixedDepth(gamma)
    if name == "heuristic":
        return HeuristicDepth(gamma, gamma_max)
    if name == "confidence":
        return ConfidenceStop(gamma_max, threshold)
    if name == "roofline":
        return RooflineDepth(costs[0], costs[1], gamma_max)
    raise ValueError(f"unknown depth policy {name!r}: choose one of {', '.join(POLICY_NAMES)}")
