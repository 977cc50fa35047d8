"""Lesson 4 - theory against measurement.

Leviathan, Kalman & Matias 2023 (arXiv 2211.17192), with acceptance rate alpha and cost ratio
c = t_draft / t_target:
    expected tokens per target pass   E(gamma) = (1 - alpha^(gamma+1)) / (1 - alpha)     (eq. 1)
    expected walltime speedup         S(gamma) = E(gamma) / (gamma c + 1)              (Thm 3.8)

The prediction must not see what it predicts: alpha and c are measured on CALIBRATION runs (other
prompts: plain decoding, and speculation at the deepest gamma), and the speed-up on separate
MEASURED runs (plain and every gamma). Every run is repeated `rounds` times, interleaved (one
of each per round), so each timing is a Spread (app.lessons.verdict):
  * t_draft, t_target: per round, the median 1-token draft pass and plain target pass;
  * the predicted range: S at alpha +- 2 standard errors (binomial, over the examined positions)
    and c over its spread; the measured speed-up: tokens/s of each gamma over plain, per round.
The verdict holds when the measured range overlaps the predicted one at every gamma.
Per-position acceptance tests the i.i.d. assumption behind eq. 1: P(first k drafts all
accepted) should be alpha^k. `predicted_speedup_verify` (a diagnosis) replaces Thm 3.8's "a
verify pass costs one target pass" with the measured verify time:
    S'(gamma) = E(gamma) t_target / (gamma t_draft + t_verify(gamma)).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, replace

from app.lessons.common import (Progress, alpha_hat, check_float, check_int, check_ints, decode,
                                encode, expected_tokens, leviathan_speedup, need_draft, pair_label, part,
                                prompts_for, require)
from app.lessons.verdict import (SPREAD_BOUND, Spread, Verdict, check_leviathan_bound, check_load,
                                 fired)
from app.lessons.policies import collect, noisiest
from app.settings import DecodeSettings

QUICK = {"gammas": (1, 2, 3, 4, 6), "max_new_tokens": 40, "rounds": 3}
CLAIM = ("Leviathan's formula, fed α and c measured on separate runs, predicts the measured "
         "speed-up at every γ")
LABELS = {"alpha, c, t_draft, t_target": "measured (calibration runs)",
          "measured_*, spec_tokens_per_s, plain_tokens_per_s": "measured (separate runs)",
          "predicted_*": "calculated (Leviathan et al. from the calibration α and c)",
          "position_acceptance": "measured (calibration runs); iid: calculated α^k"}


@dataclass
class TheoryResult:
    model: str
    settings: dict
    verdict: Verdict
    alpha: float
    alpha_examined: int  # positions the calibration runs examined
    c: float  # median of c_spread
    c_spread: Spread  # t_draft / t_target over the rounds (Spread.ratio: every pairing inside)
    t_draft: Spread
    t_target: Spread
    gammas: list[int]
    predicted_tokens_per_pass: list[float]
    measured_tokens_per_pass: list[float]
    predicted_speedup: list[float]
    predicted_low: list[float]
    predicted_high: list[float]
    predicted_speedup_verify: list[float]
    measured_speedup: list[Spread]
    measured_alpha: list[float]
    plain_tokens_per_s: Spread
    spec_tokens_per_s: list[Spread]
    position_acceptance: list[float]  # P(drafts 1..k all accepted), k = 1..max gamma
    position_steps: list[int]  # steps that drafted at least k tokens (the denominators)
    optimal_gamma_predicted: int
    optimal_gamma_measured: int
    labels: dict = field(default_factory=lambda: dict(LABELS))

    def headline(self) -> str:
        i = self.gammas.index(self.optimal_gamma_measured)
        j = self.gammas.index(self.optimal_gamma_predicted)
        return (f"{self.verdict.text()}\n\nα = {self.alpha:.2f}, c = {self.c:.2f} (measured on "
                f"separate runs). Predicted best γ = **{self.optimal_gamma_predicted}** "
                f"({self.predicted_speedup[j]:.2f}×); measured best γ = **{self.optimal_gamma_measured}** "
                f"({self.measured_speedup[i].text('×')}).")

    def summary(self) -> list[str]:
        head = f"{'γ':>3s} {'E pred':>7s} {'E meas':>7s} {'S pred [range]':>19s} {'S pred*':>7s}  S meas [min–max]"
        rows = [f"{g:3d} {ep:7.2f} {em:7.2f} {sp:7.2f} [{lo:.2f}–{hi:.2f}] {sv:7.2f}  {sm.text('×')}"
                for g, ep, em, sp, lo, hi, sv, sm in
                zip(self.gammas, self.predicted_tokens_per_pass, self.measured_tokens_per_pass,
                    self.predicted_speedup, self.predicted_low, self.predicted_high,
                    self.predicted_speedup_verify, self.measured_speedup)]
        iid = "  ".join(f"k={k}: {a:.2f} vs {self.alpha ** k:.2f}" for k, a in
                        enumerate(self.position_acceptance, 1))
        return [head, *rows, "S pred*: Thm 3.8 with the measured verify time (calculated)",
                f"P(first k drafts accepted), measured vs α^k: {iid}",
                *(f"{k}: {v}" for k, v in self.labels.items()), self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(verdict=self.verdict.to_dict(), c_spread=self.c_spread.to_dict(), t_draft=self.t_draft.to_dict(),
                 t_target=self.t_target.to_dict(), plain_tokens_per_s=self.plain_tokens_per_s.to_dict(),
                 measured_speedup=[s.to_dict() for s in self.measured_speedup],
                 spec_tokens_per_s=[s.to_dict() for s in self.spec_tokens_per_s])
        return {"lesson": "theory", **d}


# --------------------------------------------------------------------------- pure arithmetic

def predicted_range(alpha: float, examined: int, c: Spread, gamma: int) -> tuple[float, float]:
    """S(gamma) at the ends of alpha +- 2 binomial standard errors and c's spread: S grows with
    alpha and falls with c, so (S(alpha_lo, c.max), S(alpha_hi, c.min))."""
    se = math.sqrt(alpha * (1 - alpha) / examined) if examined else 0.0
    lo, hi = max(0.0, alpha - 2 * se), min(1.0, alpha + 2 * se)
    return leviathan_speedup(lo, gamma, c.max), leviathan_speedup(hi, gamma, c.min)


def position_acceptance(steps, depth: int) -> tuple[list[float], list[int]]:
    """P(drafts 1..k all accepted) for k = 1..depth over the steps that drafted >= k tokens,
    and those step counts. Under Leviathan's i.i.d. model it is alpha^k."""
    rates, counts = [], []
    for k in range(1, depth + 1):
        reached = [s for s in steps if len(s.draft_ids) >= k]
        counts.append(len(reached))
        rates.append(sum(s.n_accepted >= k for s in reached) / len(reached) if reached else 0.0)
    return rates, counts


def theory_verdict(gammas, predicted, low, high, measured: list[Spread], e_pred=None,
                   e_meas=None, verify=None) -> tuple[bool | None, str]:
    """Held when the measured speed-up's range overlaps the predicted range at every gamma, each
    range no wider than SPREAD_BOUND; not held where a narrow measured range separates from the
    prediction (the evidence says which way and why: e_pred / e_meas, tokens per target pass,
    tell a text that accepts less from a verify pass that costs more; verify, S with the
    measured verify time, tells that from time spent outside the passes); inconclusive otherwise
    (the only disagreements, or agreements, come from ranges too wide to mean anything)."""
    agree = [m.min <= hi and m.max >= lo for lo, hi, m in zip(low, high, measured)]
    noisy = [m.width > SPREAD_BOUND for m in measured]
    gap = max(abs(m.median / p - 1) for p, m in zip(predicted, measured))
    i_pred = max(range(len(gammas)), key=lambda i: predicted[i])
    i_meas = max(range(len(gammas)), key=lambda i: measured[i].median)
    best = (f"predicted best γ = {gammas[i_pred]} ({predicted[i_pred]:.2f}×), measured best "
            f"γ = {gammas[i_meas]} ({measured[i_meas].text('×')})")
    off = [i for i, ok in enumerate(agree) if not ok]
    cases = "; ".join(f"γ = {gammas[i]}: predicted {predicted[i]:.2f}× [{low[i]:.2f}–{high[i]:.2f}], "
                      f"measured {measured[i].text('×')}" for i in off)
    if not off and not any(noisy):
        unresolved = "" if i_pred == i_meas else "; the ranges overlap too much to tell the best γ apart"
        return True, (f"the measured speed-up falls in the predicted range at every γ "
                      f"({', '.join(map(str, gammas))}); medians differ by at most {gap:.0%}; {best}{unresolved}.")
    if all(noisy[i] for i in off):  # an overlap of a too-wide range confirms nothing either
        wide = ", ".join(str(g) for g, n in zip(gammas, noisy) if n)
        return None, (f"the spread is wider than the effect: the measured speed-up varied by more than "
                      f"{SPREAD_BOUND:.0%} of its median at γ = {wide}" + (f" ({cases})" if off else "")
                      + f"; {best}.")
    faster = sum(measured[i].median > predicted[i] for i in off)
    explained = verify is not None and sum(measured[i].min <= verify[i] <= measured[i].max for i in off) > len(off) / 2
    why = ("faster than predicted: each decoding step has costs outside the timed passes (sampling, "
           "bookkeeping) that plain decoding pays per token and speculation spreads over E tokens; c "
           "counts the passes only" if faster > len(off) / 2 else
           "slower than predicted: Thm 3.8 assumes a verify pass of γ + 1 tokens costs one target "
           "pass; here it costs more, and with the measured verify time (S pred*) the prediction fits"
           if explained else
           "slower than predicted: Thm 3.8 counts only the passes, a verify pass as one target pass; "
           "even with the measured verify time (S pred*) it is too high, so the speculative loop's own "
           "work per step (acceptance checks, cache trimming, Python) costs time the formula leaves out")
    fewer = e_pred is not None and sum(e_meas[i] < 0.9 * e_pred[i] for i in off) > len(off) / 2
    text = (" Part of the gap is acceptance: the measured prompts got fewer tokens per target pass "
            "than the calibration α predicts (α depends on the text)." if fewer else "")
    return False, (f"{len(off)} of {len(gammas)} γ outside the predicted range ({cases}); {best}. "
                   f"Mostly {why}.{text}")


def theory_warnings(gammas, measured: list[Spread], alpha: float, c: float, plain_tps: Spread,
                    spec_tps: list[Spread]) -> tuple[str, ...]:
    """Sanity checks (app.lessons.verdict): a measured speed-up above the Leviathan bound for
    the measured alpha and c, the widest too-noisy timing, a machine busier than its cores."""
    return fired(*(check_leviathan_bound(m.median, alpha, g, c) for g, m in zip(gammas, measured)),
                 noisiest([("plain decoding tokens/s", plain_tps),
                           *((f"γ = {g} tokens/s", s) for g, s in zip(gammas, spec_tps))]), check_load())


# --------------------------------------------------------------------------- the experiment

def _forward_seconds(runs, model: str, phase: str, tokens: int | None = None) -> list[float]:
    return [f.seconds for r in runs for s in r.steps for f in s.forwards
            if f.model == model and f.phase == phase and (tokens is None or f.tokens == tokens)]


def _median_pass(runs, model, phase, tokens=None) -> float:
    seconds = _forward_seconds(runs, model, phase, tokens)
    require(len(seconds) > 0, f"no {model} {phase} passes were timed: use more new tokens")
    return statistics.median(seconds)


def _tps(rounds_of_runs) -> Spread:
    return Spread.of([sum(len(r.ids) for r in batch) / sum(r.seconds for r in batch) for batch in rounds_of_runs])


def theory_vs_measurement(pair, *, gammas=tuple(range(1, 9)), prompts=None, alpha_prompts=None,
                          max_new_tokens: int = 64, temperature: float = 0.0, seed: int = 0,
                          rounds: int = 3, progress: Progress | None = None) -> TheoryResult:
    """Leviathan's predictions from calibration runs against separate measured runs (module
    docstring). prompts: measured (default: the pair's first, common.prompts_for); alpha_prompts:
    calibration (default: the pair's next one), never the same text."""
    need_draft(pair)
    gammas = check_ints("gammas", gammas, 1, 16)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 2, 1024)
    temperature = check_float("temperature", temperature, 0.0, 10.0)
    rounds = check_int("rounds", rounds, 1, 20)
    own = prompts_for(pair)
    prompts = prompts_for(pair, prompts) if prompts is not None else own[:1]
    alpha_prompts = tuple(alpha_prompts) if alpha_prompts is not None else tuple(p for p in own if p not in prompts)[:1]
    require(bool(alpha_prompts) and not set(alpha_prompts) & set(prompts),
            "α is measured on separate runs: give α prompts that differ from the measured prompts")
    room = max_new_tokens + gammas[-1] + 1
    ids, cal = [encode(pair, p, room) for p in prompts], [encode(pair, p, room) for p in alpha_prompts]
    base = DecodeSettings(temperature=temperature, seed=seed, max_new_tokens=max_new_tokens)
    run = lambda texts, settings, plain=False: lambda: [decode(pair, i, settings, plain=plain) for i in texts]
    configs = {"calibration: plain": run(cal, base, True),
               f"calibration: γ = {gammas[-1]}": run(cal, replace(base, gamma=gammas[-1])),
               "plain decoding": run(ids, base, True),
               **{f"γ = {g}": run(ids, replace(base, gamma=g)) for g in gammas}}
    runs = collect(configs, rounds, part(progress, 0, 1))
    cal_plain, cal_spec = runs["calibration: plain"], runs[f"calibration: γ = {gammas[-1]}"]
    return _result(pair, gammas, runs, cal_plain, cal_spec,
                   {"temperature": temperature, "seed": seed, "max_new_tokens": max_new_tokens,
                    "rounds": rounds, "prompts": list(prompts), "alpha_prompts": list(alpha_prompts)})


def _result(pair, gammas, runs, cal_plain, cal_spec, settings) -> TheoryResult:
    flat = lambda rounds_of_runs: [r for batch in rounds_of_runs for r in batch]
    alpha, examined = alpha_hat(flat(cal_spec)), sum(r.examined for r in flat(cal_spec))
    t_draft = Spread.of([_median_pass(batch, "draft", "draft", 1) for batch in cal_spec])
    t_target = Spread.of([_median_pass(batch, "target", "decode") for batch in cal_plain])
    c = t_draft.ratio(t_target)
    plain_tps = _tps(runs["plain decoding"])
    spec_tps = [_tps(runs[f"γ = {g}"]) for g in gammas]
    measured = [s.ratio(plain_tps) for s in spec_tps]
    predicted = [leviathan_speedup(alpha, g, c.median) for g in gammas]
    low, high = zip(*(predicted_range(alpha, examined, c, g) for g in gammas))
    spec = {g: flat(runs[f"γ = {g}"]) for g in gammas}
    t_verify = [_median_pass(spec[g], "target", "verify") for g in gammas]
    e_pred = [expected_tokens(alpha, g) for g in gammas]
    e_meas = [sum(len(r.ids) for r in spec[g]) / sum(r.target_passes for r in spec[g]) for g in gammas]
    s_verify = [expected_tokens(alpha, g) * t_target.median / (g * t_draft.median + tv) for g, tv in zip(gammas, t_verify)]
    held, evidence = theory_verdict(gammas, predicted, low, high, measured, e_pred, e_meas, s_verify)
    warnings = theory_warnings(gammas, measured, alpha, c.median, plain_tps, spec_tps)
    rates, counts = position_acceptance([s for r in flat(cal_spec) for s in r.steps], gammas[-1])
    return TheoryResult(
        model=pair_label(pair), settings=settings, verdict=Verdict(CLAIM, held, evidence, warnings[:4]),
        alpha=alpha, alpha_examined=examined, c=c.median, c_spread=c, t_draft=t_draft, t_target=t_target, gammas=list(gammas),
        predicted_tokens_per_pass=e_pred, measured_tokens_per_pass=e_meas,
        predicted_speedup=predicted, predicted_low=list(low), predicted_high=list(high),
        predicted_speedup_verify=s_verify,
        measured_speedup=measured, measured_alpha=[alpha_hat(spec[g]) for g in gammas],
        plain_tokens_per_s=plain_tps, spec_tokens_per_s=spec_tps,
        position_acceptance=rates, position_steps=counts,
        optimal_gamma_predicted=gammas[predicted.index(max(predicted))],
        optimal_gamma_measured=gammas[max(range(len(gammas)), key=lambda i: measured[i].median)])
