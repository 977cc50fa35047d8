"""Lesson 4 - theory against measurement.

Leviathan, Kalman & Matias 2023 (arXiv 2211.17192), with acceptance rate alpha and cost ratio
c = t_draft / t_target:
    expected tokens per target pass   E(gamma) = (1 - alpha^(gamma+1)) / (1 - alpha)     (eq. 1)
    expected walltime speedup         S(gamma) = E(gamma) / (gamma c + 1)              (Thm 3.8)
Measured here: real speculative runs at each gamma and plain runs on the same prompts; alpha is
the pooled estimate accepted / examined positions over all speculative runs (app.lessons.common),
c the ratio of the median single-token forward times (draft passes of 1 token; the target's
plain-decoding passes). Thm 3.8 assumes a verify pass of gamma + 1 tokens costs one target pass;
`predicted_speedup_verify` replaces that with the measured median verify time at each gamma:
    S'(gamma) = E(gamma) t_target / (gamma t_draft + t_verify(gamma)).
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from app.lessons.common import (PROMPTS, Progress, alpha_hat, check_float, check_int, check_ints,
                                decode, encode, expected_tokens, keep_fastest, leviathan_speedup, need_draft,
                                pair_label, part, require)
from app.settings import DecodeSettings

QUICK = {"gammas": (1, 2, 3, 4, 6, 8), "prompts": PROMPTS[:1], "max_new_tokens": 48}


@dataclass
class TheoryResult:
    model: str
    settings: dict
    alpha: float
    c: float
    t_draft: float
    t_target: float
    gammas: list[int]
    predicted_tokens_per_pass: list[float]
    measured_tokens_per_pass: list[float]
    predicted_speedup: list[float]
    predicted_speedup_verify: list[float]
    measured_speedup: list[float]
    measured_alpha: list[float]
    plain_tokens_per_s: float
    spec_tokens_per_s: list[float]
    optimal_gamma_predicted: int
    optimal_gamma_measured: int

    def headline(self) -> str:
        i = self.gammas.index(self.optimal_gamma_measured)
        j = self.gammas.index(self.optimal_gamma_predicted)
        return (f"α = {self.alpha:.2f}, c = {self.c:.2f}. Predicted best γ = **{self.optimal_gamma_predicted}** "
                f"({self.predicted_speedup[j]:.2f}×); measured best γ = **{self.optimal_gamma_measured}** "
                f"({self.measured_speedup[i]:.2f}×).")

    def summary(self) -> list[str]:
        head = f"{'γ':>3s} {'E pred':>7s} {'E meas':>7s} {'S pred':>7s} {'S pred*':>7s} {'S meas':>7s} {'α meas':>7s}"
        rows = [f"{g:3d} {ep:7.2f} {em:7.2f} {sp:7.2f} {sv:7.2f} {sm:7.2f} {a:7.3f}" for g, ep, em, sp, sv, sm, a in
                zip(self.gammas, self.predicted_tokens_per_pass, self.measured_tokens_per_pass,
                    self.predicted_speedup, self.predicted_speedup_verify, self.measured_speedup,
                    self.measured_alpha)]
        return [head, *rows, "S pred*: Thm 3.8 with the measured verify time", self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        return {"lesson": "theory", **asdict(self)}


def _median(values: list[float], what: str) -> float:
    require(len(values) > 0, f"no {what} were timed: use more new tokens")
    return statistics.median(values)


def _forward_seconds(runs, model: str, phase: str, tokens: int | None = None) -> list[float]:
    return [f.seconds for r in runs for s in r.steps for f in s.forwards
            if f.model == model and f.phase == phase and (tokens is None or f.tokens == tokens)]


def _runs(pair, ids, gammas, settings, rounds, stage):
    """(plain runs, {gamma: speculative runs}), one per prompt, fastest of `rounds`."""
    from dataclasses import replace

    total, best, done = rounds * len(ids) * (len(gammas) + 1), {}, 0
    for r in range(rounds):  # round-major, prompt-major: background load hits all gammas alike
        for k, prompt_ids in enumerate(ids):
            for g in (0, *gammas):  # 0: plain decoding
                stage(done / total, f"round {r + 1}, prompt {k + 1}: " + (f"γ = {g}" if g else "plain decoding"))
                keep_fastest(best, (g, k), decode(pair, prompt_ids, replace(settings, gamma=max(g, 1)), plain=g == 0))
                done += 1
    stage(1.0, "done")
    return [best[(0, k)] for k in range(len(ids))], {g: [best[(g, k)] for k in range(len(ids))] for g in gammas}


def theory_vs_measurement(pair, *, gammas=tuple(range(1, 9)), prompts=PROMPTS[:2],
                          max_new_tokens: int = 64, temperature: float = 0.0, seed: int = 0,
                          rounds: int = 2, progress: Progress | None = None) -> TheoryResult:
    """Leviathan's predictions at the measured alpha and c against real runs at each gamma; each
    run repeated `rounds` times, keeping its fastest (common.keep_fastest)."""

    need_draft(pair)
    gammas = check_ints("gammas", gammas, 1, 16)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 2, 1024)
    temperature = check_float("temperature", temperature, 0.0, 10.0)
    rounds = check_int("rounds", rounds, 1, 20)
    ids = [encode(pair, p, max_new_tokens + gammas[-1] + 1) for p in prompts]
    settings = DecodeSettings(temperature=temperature, seed=seed, max_new_tokens=max_new_tokens)
    plain, spec = _runs(pair, ids, gammas, settings, rounds, part(progress, 0, 1))
    all_spec = [r for g in gammas for r in spec[g]]
    alpha = alpha_hat(all_spec)
    t_draft = _median(_forward_seconds(all_spec, "draft", "draft", 1), "draft passes")
    t_target = _median(_forward_seconds(plain, "target", "decode"), "target passes")
    c = t_draft / t_target
    tps = lambda runs: sum(len(r.ids) for r in runs) / sum(r.seconds for r in runs)
    plain_tps = tps(plain)
    measured_speedup = [tps(spec[g]) / plain_tps for g in gammas]
    pred_speedup = [leviathan_speedup(alpha, g, c) for g in gammas]
    t_verify = [_median(_forward_seconds(spec[g], "target", "verify"), "verify passes") for g in gammas]
    pred_verify = [expected_tokens(alpha, g) * t_target / (g * t_draft + tv) for g, tv in zip(gammas, t_verify)]
    return TheoryResult(
        model=pair_label(pair), settings={"temperature": temperature, "seed": seed,
                                          "max_new_tokens": max_new_tokens, "rounds": rounds,
                                          "prompts": list(prompts)},
        alpha=alpha, c=c, t_draft=t_draft, t_target=t_target, gammas=list(gammas),
        predicted_tokens_per_pass=[expected_tokens(alpha, g) for g in gammas],
        measured_tokens_per_pass=[sum(len(r.ids) for r in spec[g]) / sum(r.target_passes for r in spec[g])
                                  for g in gammas],
        predicted_speedup=pred_speedup, predicted_speedup_verify=pred_verify,
        measured_speedup=measured_speedup, measured_alpha=[alpha_hat(spec[g]) for g in gammas],
        plain_tokens_per_s=plain_tps, spec_tokens_per_s=[tps(spec[g]) for g in gammas],
        optimal_gamma_predicted=gammas[pred_speedup.index(max(pred_speedup))],
        optimal_gamma_measured=gammas[measured_speedup.index(max(measured_speedup))])
