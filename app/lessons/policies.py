"""Lesson 3 - depth policies side by side: how many tokens to draft at each step.

Policies (interface of app.policies: gamma(), keep_drafting(q_row), update(event)):
  * fixed       - always gamma (app.policies.FixedDepth; Leviathan et al. 2023)
  * heuristic   - transformers' "heuristic" schedule (num_assistant_tokens_schedule): +2 after a
                  step whose drafts were all accepted, -1 otherwise; clamped here to [1, gamma_max]
  * confidence  - draft up to gamma_max, stop as soon as the draft's top probability falls below
                  a threshold (the idea of transformers' assistant_confidence_threshold)
  * roofline    - each step pick gamma in [1, gamma_max] maximising expected tokens per second
                      E(gamma) / T(gamma),  E = (1 - a^(gamma+1)) / (1 - a)      (Leviathan eq. 1)
                                            T = gamma * t_draft + t_target(q = gamma + 1)
                  with t(q) measured on this pair at the start and a running estimate of alpha:
                  a = A / N, A <- decay * A + accepted, N <- decay * N + examined positions.
The lesson runs every policy (and plain decoding) on the same prompts and seed and reports
tokens/s, alpha, target passes and wasted tokens (drafted - accepted). Under greedy decoding all
outputs must be identical: a policy changes the speed, never the text.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from app.lessons.common import (PROMPTS, Progress, Run, check_float, check_int, decode, encode,
                                expected_tokens, keep_fastest, need_draft, pair_label, part, report,
                                require)
from app.policies import FixedDepth

POLICY_NAMES = ("fixed", "heuristic", "confidence", "roofline")
QUICK = {"prompts": PROMPTS[:2], "max_new_tokens": 40}


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
        require(len(t_target) >= gamma_max + 1, "roofline policy: need t(q) for q = 1..gamma_max+1")
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


@dataclass
class PolicyRow:
    policy: str
    tokens_per_s: float
    alpha: float | None  # None for plain decoding (nothing drafted)
    target_passes: int
    drafted: int
    accepted: int
    wasted: int
    new_tokens: int
    seconds: float
    mean_gamma: float
    outputs: list[list[int]] = field(default_factory=list)


@dataclass
class PoliciesResult:
    model: str
    settings: dict
    t_draft: float
    t_target: list[float]
    rows: list[PolicyRow]
    identical: bool | None  # greedy: every policy's output == plain decoding's

    def headline(self) -> str:
        spec = [r for r in self.rows if r.policy != "plain"]
        best = max(spec, key=lambda r: r.tokens_per_s)
        plain = next(r for r in self.rows if r.policy == "plain")
        same = {True: " All greedy outputs identical.", False: " OUTPUTS DIFFER.", None: ""}[self.identical]
        return (f"Measured: fastest policy **{best.policy}** at {best.tokens_per_s:.0f} tokens/s "
                f"(plain {plain.tokens_per_s:.0f}); it wasted {best.wasted} drafted tokens.{same}")

    def summary(self) -> list[str]:
        head = f"{'policy':11s} {'tok/s':>7s} {'alpha':>6s} {'passes':>6s} {'drafted':>7s} {'wasted':>6s} {'mean γ':>6s}"
        alpha = lambda r: "     —" if r.alpha is None else f"{r.alpha:6.3f}"
        rows = [f"{r.policy:11s} {r.tokens_per_s:7.1f} {alpha(r)} {r.target_passes:6d} "
                f"{r.drafted:7d} {r.wasted:6d} {r.mean_gamma:6.2f}" for r in self.rows]
        return [head, *rows, self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        return {"lesson": "policies", **asdict(self)}


def measure_costs(pair, gamma_max: int, kv_len: int, repeats: int = 3, fast: bool | None = None,
                  int8: bool = False) -> tuple[float, list[float]]:
    """(t_draft(1), [t_target(q) for q = 1..gamma_max + 1]) on this pair, batch 1, timed on the
    path the decode will run: fast (app.fastpath; default: where the lessons decode on it,
    CUDA) and int8 (the draft's int8 weights, fast path on a CPU) as the decode's settings say."""
    from app.fastpath import use_by_default
    from app.knee import time_forward

    fast = use_by_default(pair.device) if fast is None else fast
    t_draft = time_forward(pair.draft, device=pair.device, batch=1, q=1, kv_len=kv_len, repeats=repeats,
                           fast=fast, int8=int8)
    t_target = [time_forward(pair.target, device=pair.device, batch=1, q=q, kv_len=kv_len,
                             repeats=repeats, fast=fast) for q in range(1, gamma_max + 2)]
    return t_draft, t_target


def make_policy(name: str, gamma: int, gamma_max: int, threshold: float, costs):
    if name == "fixed":
        return FixedDepth(gamma)
    if name == "heuristic":
        return HeuristicDepth(gamma, gamma_max)
    if name == "confidence":
        return ConfidenceStop(gamma_max, threshold)
    if name == "roofline":
        return RooflineDepth(costs[0], costs[1], gamma_max)
    raise ValueError(f"unknown depth policy {name!r}: choose one of {', '.join(POLICY_NAMES)}")


def _row(name: str, runs: list[Run]) -> PolicyRow:
    steps = [s for r in runs for s in r.steps]
    examined = sum(r.examined for r in runs)
    drafted, accepted = sum(r.drafted for r in runs), sum(r.accepted for r in runs)
    seconds = sum(r.seconds for r in runs)
    new = sum(len(r.ids) for r in runs)
    return PolicyRow(policy=name, tokens_per_s=new / seconds if seconds else 0.0,
                     alpha=accepted / examined if examined else None,
                     target_passes=sum(r.target_passes for r in runs), drafted=drafted,
                     accepted=accepted, wasted=drafted - accepted, new_tokens=new, seconds=seconds,
                     mean_gamma=drafted / len(steps) if steps else 0.0, outputs=[r.ids for r in runs])


def _runs(pair, ids, names, make, settings, rounds, stage) -> dict[str, list[Run]]:
    """{policy name: one run per prompt, the fastest of `rounds`}; make(name) -> a fresh policy
    (None = plain decoding)."""
    from app.engine import make_drafter

    best: dict[tuple[str, int], Run] = {}
    total = rounds * len(ids) * len(names)
    for r in range(rounds):  # round-major, prompt-major: background load hits every policy alike
        for k, prompt_ids in enumerate(ids):
            for j, name in enumerate(names):
                stage(((r * len(ids) + k) * len(names) + j) / total, f"round {r + 1}, prompt {k + 1}: {name}")
                policy = make(name)
                drafter = None if policy is None else make_drafter(pair, "model")
                keep_fastest(best, (name, k), decode(pair, prompt_ids, settings, policy=policy,
                                                     drafter=drafter, plain=policy is None))
    stage(1.0, "done")
    return {n: [best[(n, k)] for k in range(len(ids))] for n in names}


def compare_policies(pair, *, prompts=PROMPTS, policies=POLICY_NAMES, gamma: int = 4,
                     gamma_max: int = 8, threshold: float = 0.4, max_new_tokens: int = 64,
                     temperature: float = 0.0, seed: int = 0, rounds: int = 2,
                     progress: Progress | None = None) -> PoliciesResult:
    """Every policy, and plain decoding, on the same prompts and seed; each run repeated
    `rounds` times, keeping its fastest (common.keep_fastest)."""
    from app.engine import DecodeSettings

    need_draft(pair)
    gamma_max = check_int("gamma_max", gamma_max, 1, 16)
    gamma = check_int("gamma", gamma, 1, gamma_max)
    threshold = check_float("threshold", threshold, 0.0, 1.0)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1, 1024)
    temperature = check_float("temperature", temperature, 0.0, 10.0)
    rounds = check_int("rounds", rounds, 1, 20)
    for name in policies:
        require(name in POLICY_NAMES, f"unknown depth policy {name!r}: choose from {', '.join(POLICY_NAMES)}")
    ids = [encode(pair, p, max_new_tokens + gamma_max + 1) for p in prompts]
    report(progress)(0.0, "measuring t(q) for the roofline policy")
    costs = measure_costs(pair, gamma_max, kv_len=max(len(i) for i in ids))
    settings = DecodeSettings(gamma=gamma, temperature=temperature, seed=seed, max_new_tokens=max_new_tokens)
    names = ("plain", *policies)
    make = lambda name: (None if name == "plain" else make_policy(name, gamma, gamma_max, threshold, costs))
    runs = _runs(pair, ids, names, make, settings, rounds, part(progress, 0.1, 1.0))
    rows = [_row(n, runs[n]) for n in names]
    identical = all(r.outputs == rows[0].outputs for r in rows) if temperature == 0 else None
    return PoliciesResult(model=pair_label(pair), settings={"gamma": gamma, "gamma_max": gamma_max,
                          "threshold": threshold, "max_new_tokens": max_new_tokens,
                          "temperature": temperature, "seed": seed, "rounds": rounds,
                          "prompts": list(prompts)},
                          t_draft=costs[0], t_target=costs[1], rows=rows, identical=identical)
