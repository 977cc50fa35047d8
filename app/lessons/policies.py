"""Lesson 3 - depth policies side by side: how many tokens to draft at each step.

The policies (fixed, heuristic, confidence, roofline) live in app.policies, beside the engine's
default, with their definitions; this module is the experiment that compares them. The lesson runs every policy (and plain decoding) on the same prompts and seed and reports
tokens/s, alpha, target passes and wasted tokens (drafted - accepted). Under greedy decoding all
outputs must be identical: a policy changes the speed, never the text.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from app.lessons.common import (PROMPTS, Progress, Run, check_float, check_int, decode, encode,
                                keep_fastest, need_draft, pair_label, part, report, require)
# The policies themselves, and the t(q) timing the roofline policy needs (names kept importable
# from here, the lesson's module, where they used to live).
from app.policies import (POLICY_NAMES, ConfidenceStop, FixedDepth, HeuristicDepth,  # noqa: F401
                          RooflineDepth, make_policy, measure_costs)
from app.settings import DecodeSettings

QUICK = {"prompts": PROMPTS[:2], "max_new_tokens": 40}


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
