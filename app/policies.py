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
  * roofline    - each step pick gamma in [gamma_min, gamma_max] maximising expected tokens per
                  second  E(gamma) / T(gamma),  E = (1 - a^(gamma+1)) / (1 - a)  (Leviathan eq. 1)
                                                T = gamma * t_draft + t_target(q = gamma + 1)
                  with t(q) measured on this pair (measure_costs) and a running estimate of alpha:
                  a = A / N, A <- decay * A + accepted, N <- decay * N + examined positions.
                  gamma_min = 0 (the Live tab's and the CLI's default) lets it choose plain
                  decoding, E(0) / T(0) = 1 / t_target(1), when no gamma >= 1 is predicted to beat
                  it; ties go to the smaller gamma. A step of gamma 0 examines no draft, so there
                  alpha relaxes toward the prior alpha0 (A <- decay * A + (1 - decay) * alpha0 * w,
                  N likewise with w): after a few plain steps the policy tries drafting again
                  where drafting pays at alpha0. Where it does not, it never drafts.
                  t_draft and t(q) are the probe's (measure_costs, before the run) until the run
                  has timed SEEN_MIN passes of that kind; from then on the median of its last
                  SEEN_WINDOW. Inside a decode a pass need not cost what it costs repeated alone:
                  on a CPU the target's pass streams its weights through the caches and the
                  draft's next pass reloads its own, slower than back to back. The run also
                  times what a step costs besides its passes (sampling, the acceptance test,
                  the record of the step), o, a drafting step's and a plain one's apart, and
                  adds it: T = gamma * t_draft + t_target(gamma + 1) + o
                  (research/RESULTS.md, "The draft's pass inside a decode").
"""
from __future__ import annotations

import statistics
import time
from collections import deque

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
    """argmax over gamma in [gamma_min, gamma_max] of E(gamma) / T(gamma) (module docstring).
    t_target[q - 1] = t(q) in seconds; t_draft: one draft pass of one token; both as probed
    before the run, replaced by the run's own passes as it times them, and the rest of a step
    added once timed (in_run=True; in_run=False: the probe's alone). clock: seconds (tests)."""
    name = "roofline"
    SEEN_MIN, SEEN_WINDOW = 3, 9

    def __init__(self, t_draft: float, t_target: list[float], gamma_max: int,
                 alpha0: float = 0.5, prior_weight: float = 2.0, decay: float = 0.8,
                 gamma_min: int = 1, in_run: bool = True, clock=time.perf_counter):
        if len(t_target) < gamma_max + 1:
            raise InputError("roofline policy: need t(q) for q = 1..gamma_max+1")
        self.t_draft, self.t_target, self.gamma_max = t_draft, t_target, gamma_max
        self.gamma_min = min(max(gamma_min, 0), gamma_max)
        self.accepted, self.examined, self.decay = alpha0 * prior_weight, prior_weight, decay
        self.alpha0, self.prior_weight, self.in_run = alpha0, prior_weight, in_run
        self.history: list[int] = []
        # ("draft", 1), ("target", q): a pass; ("step", 1 | 0): the rest of a drafting | plain step
        self.seen: dict[tuple[str, int], deque] = {}
        self.clock, self.started = clock, None

    @property
    def alpha(self) -> float:
        return min(self.accepted / self.examined, 0.999)

    def cost(self, model: str, q: int) -> float:
        """Seconds of one pass ("draft" or "target", q tokens) or of the rest of a step ("step",
        q = 1 drafting, 0 plain): the median of the run's last SEEN_WINDOW once it has SEEN_MIN
        of them (and in_run); else a pass's probe, and a step's rest as the other kind's (0 if
        neither is known yet: the probe times passes only)."""
        for key in ((model, q), (model, 1 - q)) if model == "step" else ((model, q),):
            seen = self.seen.get(key, ())
            if self.in_run and len(seen) >= self.SEEN_MIN:
                return statistics.median(seen)
        if model == "step":
            return 0.0
        return self.t_draft if model == "draft" else self.t_target[q - 1]

    def best(self, alpha: float) -> int:
        """The gamma of the highest expected rate at `alpha` (the smallest on ties)."""
        return max(range(self.gamma_min, self.gamma_max + 1), key=lambda g: self.rate(g, alpha))

    def rate(self, gamma: int, alpha: float | None = None) -> float:
        """Expected tokens per second at depth gamma under `alpha` (default: the current
        estimate); gamma 0: plain decoding, one token per target pass of one token."""
        alpha = self.alpha if alpha is None else alpha
        return expected_tokens(alpha, gamma) / (gamma * self.cost("draft", 1) + self.cost("target", gamma + 1)
                                                + self.cost("step", int(gamma > 0)))

    def gamma(self) -> int:
        best = self.best(self.alpha)
        self.history.append(best)
        self.started = self.clock()  # the step starts: update() times the rest of it
        return best

    @property
    def drafts_nothing(self) -> bool:
        """True when it will choose gamma 0 at every step: 0 is best at the current alpha and at
        the prior alpha0, between which alpha moves while nothing is drafted (module docstring;
        E(gamma) grows with alpha, so 0 best at the larger of the two is best at both)."""
        return self.gamma_min == 0 and self.best(max(self.alpha, self.alpha0)) == 0

    def note(self) -> str:
        """One sentence: what it chose per step and the pass times it chose by, or that it chose
        plain decoding and why."""
        if self.history and not any(self.history):
            t = self.t_target
            return (f"plain decoding: with the measured pass times (draft {self.t_draft * 1e3:.2f} ms, "
                    f"target {t[0] * 1e3:.2f} ms for 1 token, {t[1] * 1e3:.2f} ms for 2) no γ ≥ 1 is "
                    f"predicted to beat it at α ≈ {self.alpha:.2f}") + self.in_run_note()
        counts = {g: self.history.count(g) for g in sorted(set(self.history))}
        t = self.t_target[:self.gamma_max + 1]
        return "γ per step: " + ", ".join(f"{g} ({n}×)" for g, n in counts.items()) \
            + f"; final α estimate {self.alpha:.2f}; timed before the run: draft {self.t_draft * 1e3:.2f} ms, target " \
            + ", ".join(f"{x * 1e3:.1f}" for x in t) + f" ms for 1–{len(t)} tokens" + self.in_run_note()

    def in_run_note(self) -> str:
        """The costs the run itself measured, where they replaced the probe's ("" if none)."""
        used = sorted(k for k, v in self.seen.items() if len(v) >= self.SEEN_MIN) if self.in_run else []
        ms = lambda key: f"{self.cost(*key) * 1e3:.2f}"  # noqa: E731
        parts = [f"draft {ms(k)} ms" for k in used if k[0] == "draft"]
        qs = [q for m, q in used if m == "target"]
        if qs:
            parts.append(f"target {' / '.join(ms(('target', q)) for q in qs)} ms for {' / '.join(map(str, qs))} "
                         f"token{'s' if qs != [1] else ''}")
        rest = [f"{ms(('step', k))} ms a {kind} step" for k, kind in ((1, "drafting"), (0, "plain"))
                if ("step", k) in used]
        if rest:
            parts.append("besides the passes " + ", ".join(rest))
        return f"; then the run's own (median of its last {self.SEEN_WINDOW}): " + ", ".join(parts) if parts else ""

    def keep_drafting(self, q_row) -> bool:
        return True

    def update(self, event) -> None:
        relax = not event.checks  # nothing examined: drift back toward the prior
        seen = self.alpha0 * self.prior_weight * (1 - self.decay) if relax else event.n_accepted
        self.accepted = self.decay * self.accepted + seen
        self.examined = self.decay * self.examined + (self.prior_weight * (1 - self.decay) if relax
                                                      else len(event.checks))
        self.observe(event.forwards)
        if self.started is not None:  # the step's wall time less its passes (a prefill ran before it)
            passes = sum(f.seconds for f in event.forwards if f.phase != "prefill")
            rest = max(self.clock() - self.started - passes, 0.0)
            self.keep(("step", int(event.gamma > 0)), rest)
            self.started = None

    def observe(self, forwards) -> None:
        """Keep the seconds of the step's one-token draft passes and its target pass (not the
        prefills, nor a draft pass of two tokens after a fully accepted step)."""
        for f in forwards:
            drafted = f.model == "draft" and f.phase == "draft" and f.tokens == 1
            verified = f.model == "target" and f.phase in ("verify", "decode")
            if f.batch == 1 and (drafted or verified):
                self.keep((f.model, f.tokens), f.seconds)

    def keep(self, key: tuple[str, int], seconds: float) -> None:
        """Add one timing to seen[key], which holds the last SEEN_WINDOW."""
        self.seen.setdefault(key, deque(maxlen=self.SEEN_WINDOW)).append(seconds)


def measure_costs(pair, gamma_max: int, kv_len: int, repeats: int = 3, fast: bool | None = None,
                  int8: bool = False, samples: bool = False) -> tuple:
    """(t_draft(1), [t_target(q) for q = 1..gamma_max + 1]) on this pair, batch 1, timed on the
    path the decode will run: fast (app.fastpath; default: where the lessons decode on it,
    CUDA) and int8 (the draft's int8 weights, fast path on a CPU) as the decode's settings say.
    Medians of `repeats` interleaved passes; samples=True: each one's `repeats` seconds instead
    (a list, and a list of lists), so that a lesson can show their spread."""
    # deferred: this module stays free of torch (app.lessons lists its lessons without loading
    # model code, and app.lessons.common imports expected_tokens from here)
    from app.fastpath import use_by_default
    from app.knee import time_passes

    fast = use_by_default(pair.device) if fast is None else fast
    timing = dict(device=pair.device, batch=1, kv_len=kv_len, repeats=repeats, fast=fast, samples=samples)
    if pair.draft is None:  # no draft model: lookup (n-gram), ~free
        t_draft = [0.0] * repeats if samples else 0.0
    else:
        t_draft = time_passes(pair.draft, qs=[1], int8=int8, **timing)[0]
    t_target = time_passes(pair.target, qs=list(range(1, gamma_max + 2)), **timing)
    return t_draft, t_target


def make_policy(name: str, gamma: int, gamma_max: int, threshold: float, costs, gamma_min: int = 1):
    """The policy called `name` (POLICY_NAMES): gamma is where fixed and heuristic start,
    gamma_max the cap of the others; threshold: the confidence stop's; costs: measure_costs'
    (t_draft, t_target) for the roofline policy (None for the others), whose smallest choice is
    gamma_min (0: plain decoding allowed)."""
    if name == "fixed":
        return FixedDepth(gamma)
    if name == "heuristic":
        return HeuristicDepth(gamma, gamma_max)
    if name == "confidence":
        return ConfidenceStop(gamma_max, threshold)
    if name == "roofline":
        return RooflineDepth(costs[0], costs[1], gamma_max, gamma_min=gamma_min)
    raise ValueError(f"unknown depth policy {name!r}: choose one of {', '.join(POLICY_NAMES)}")
