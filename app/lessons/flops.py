"""Lesson - FLOPs against time.

Claim tested: speculative decoding does MORE arithmetic than plain decoding - every draft pass,
and every verified position after the first rejection, is work thrown away - yet finishes
sooner, because the target's passes are not limited by arithmetic (memory or overhead bound).

Method:
  * sweep: two speculative runs at each gamma in 1..gamma_max (up, then down), greedy; the
    fastest gamma is the one tested (a fixed gamma = 4 can lose where gamma = 1 wins).
  * measured: plain and speculative runs at that gamma, interleaved over `repeats` rounds;
    time ratio t_spec / t_plain round by round (verdict.paired_ratio), judged against 1.
  * counted (app.costmodel.forward_cost, prefill excluded from both runs): draft passes; of a
    verify pass of q = gamma + 1 positions, the first n_accepted + 1 are used and the rest
    wasted: cost(q) - cost(n_accepted + 1); the plain run's one-token passes.
  * wasted time, measured: per step the marginal verify time t(q) - t(n_accepted + 1), with
    t(q) the target's pass times over the run's mean KV length (app.knee.time_passes,
    medians), plus the draft passes whose tokens were rejected (the passes after the first
    n_accepted of the step, as timed in the run).
Why it can fail, from the same runs (`_why`): a speculative step's drafting, verifying and other
work (sampling, bookkeeping) over the tokens it emitted, against plain decoding's per-token pass
and other work; above 1 when the verify pass is not flat in q, the draft is dear, or few tokens
are accepted.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from app.lessons.common import (MIN_REPEATS, Progress, alpha_hat, busy_warnings, check_int, decode,
                                dtype_bytes, encode, need_draft, pair_label, part, plain_and_speculative,
                                prompts_for, recorded_gpu_run, report)
from app.lessons.verdict import (Spread, Verdict, check_leviathan_bound, fired, outcome, paired_ratio,
                                 ratio_verdict)
from app.settings import DecodeSettings

QUICK = {"max_new_tokens": 48, "gamma": 4, "repeats": 3}
PARTS = ("draft", "verify_used", "verify_wasted", "plain_decode")


def flops_verdict(flops_ratio: float, time_ratio: Spread, *, gamma: int, why: str = "", warnings=()) -> Verdict:
    """More FLOPs (counted: flops_ratio > 1) in less time (measured: time_ratio's whole range
    below 1). Not held when it took more time (whole range at or above 1) or no more FLOPs;
    inconclusive when the time ratio straddles 1."""
    claim = f"speculative decoding (γ = {gamma}) does more FLOPs than plain decoding, yet takes less time"
    faster = ratio_verdict(time_ratio, below=1.0)
    held = False if flops_ratio <= 1 else faster
    evidence = (f"{flops_ratio:.2f}× the FLOPs (counted) in {time_ratio.text('×')} the time (measured); "
                + outcome(faster, "the whole time range is below 1",
                          f"speculation took {time_ratio.median:.2f}× the time",
                          "the time ratio's range straddles 1: the spread is wider than the effect"))
    if flops_ratio <= 1:
        evidence += "; it did not do more FLOPs"
    if why and held is not True:
        evidence += f". Why: {why}"
    return Verdict(claim, held, evidence + ".", fired(*warnings))


@dataclass
class FlopsResult:
    """flops: PARTS -> FLOPs (counted); seconds: "speculative" / "plain" -> Spread of wall seconds
    (measured); waste: measured seconds of wasted work per run (see the module docstring)."""
    model: str
    settings: dict
    gamma: int
    sweep: list[dict]            # [{"gamma", "seconds"}]: one measured run each
    flops: dict[str, float]
    seconds: dict[str, Spread]
    time_ratio: Spread
    pass_seconds: list[Spread]   # t_target(q) for q = 1 .. gamma + 1 (measured)
    waste: dict[str, float]      # verify_marginal_s, draft_rejected_s, total_s, share
    new_tokens: int
    baseline_tokens: int
    drafted: int
    accepted: int
    wasted_positions: int
    alpha: float
    c: float
    identical: bool | None
    verdict: Verdict

    @property
    def spec_flops(self) -> float:
        return self.flops["draft"] + self.flops["verify_used"] + self.flops["verify_wasted"]

    @property
    def plain_flops(self) -> float:
        return self.flops["plain_decode"]

    @property
    def flops_ratio(self) -> float:
        return self.spec_flops / self.plain_flops if self.plain_flops else 0.0

    def headline(self) -> str:
        sweep = ", ".join(f"γ = {s['gamma']}: {s['seconds'] * 1e3:.0f} ms" for s in self.sweep)
        return (f"{self.verdict.text()}\n\nMeasured: the γ sweep ({sweep}; faster of two runs each) chose "
                f"γ = {self.gamma}; "
                f"wasted work took **{self.waste['share']:.0%}** of the speculative run's time (measured: "
                f"marginal verify time {self.waste['verify_marginal_s'] * 1e3:.1f} ms + draft passes for "
                f"rejected tokens {self.waste['draft_rejected_s'] * 1e3:.1f} ms); "
                f"{self.flops['verify_wasted'] / max(self.spec_flops, 1):.0%} of its FLOPs (counted) were wasted verify work.")

    def summary(self) -> list[str]:
        lines = [f"{'part':14s} {'GFLOP (counted)':>16s}"]
        lines += [f"{p:14s} {self.flops[p] / 1e9:16.4f}" for p in PARTS]
        lines += [f"time, measured: speculative {self.seconds['speculative'].text(' ms', 1e3, 1)}, "
                  f"plain {self.seconds['plain'].text(' ms', 1e3, 1)}"]
        return lines + [self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        return {"lesson": "flops", "model": self.model, "settings": self.settings, "gamma": self.gamma,
                "sweep": self.sweep, "flops": self.flops,
                "seconds": {k: v.to_dict() for k, v in self.seconds.items()},
                "time_ratio": self.time_ratio.to_dict(), "pass_seconds": [s.to_dict() for s in self.pass_seconds],
                "waste": self.waste, "new_tokens": self.new_tokens, "baseline_tokens": self.baseline_tokens,
                "spec_flops": self.spec_flops, "plain_flops": self.plain_flops, "flops_ratio": self.flops_ratio,
                "drafted": self.drafted, "accepted": self.accepted, "wasted_positions": self.wasted_positions,
                "alpha": self.alpha, "c": self.c, "identical": self.identical, "verdict": self.verdict.to_dict(),
                "labels": {"flops": "counted", "seconds": "measured", "time_ratio": "measured",
                           "pass_seconds": "measured", "waste": "measured", "sweep": "measured"}}


def count_flops(spec_steps, plain_steps, config, nbytes) -> tuple[dict, int]:
    """FLOPs per part (module docstring) and the wasted verify positions."""
    from app.costmodel import forward_cost

    cost = lambda model, f, q: forward_cost(config[model], f.batch, q, f.kv_len, nbytes).flops
    flops, wasted = dict.fromkeys(PARTS, 0.0), 0
    for step in spec_steps:
        for f in step.forwards:
            if f.phase == "draft":
                flops["draft"] += cost("draft", f, f.tokens)
            elif f.phase in ("verify", "decode"):
                used = cost("target", f, step.n_accepted + 1)
                flops["verify_used"] += used
                flops["verify_wasted"] += cost("target", f, f.tokens) - used
                wasted += f.tokens - (step.n_accepted + 1)
    flops["plain_decode"] = sum(cost("target", f, f.tokens) for s in plain_steps for f in s.forwards
                                if f.phase == "decode")
    return flops, wasted


def wasted_seconds(steps, t_pass: list[float]) -> tuple[float, float]:
    """(marginal verify seconds, rejected draft seconds) of a speculative run: per step
    t_pass[q - 1] - t_pass[n_accepted] for its verify pass of q tokens (t_pass[i]: a pass of
    i + 1 tokens), plus the draft passes after its first n_accepted."""
    verify = draft = 0.0
    for step in steps:
        passes = [f for f in step.forwards if f.phase == "draft"]
        draft += sum(f.seconds for f in passes[step.n_accepted:])
        q = next((f.tokens for f in step.forwards if f.phase == "verify"), None)
        if q is not None and q <= len(t_pass):
            verify += t_pass[q - 1] - t_pass[step.n_accepted]
    return verify, draft


def per_step(run, phases) -> tuple[float, float, float]:
    """(seconds per step in passes of `phases`, seconds per step in everything else, tokens per
    step) of a run, from its own timed passes and wall time."""
    n = max(len(run.steps), 1)
    passes = sum(f.seconds for s in run.steps for f in s.forwards if f.phase in phases) / n
    return passes, run.seconds / n - passes, len(run.ids) / n


def _why(spec, plain, gamma: int, t_pass: list[Spread]) -> tuple[float, float, str]:
    """(alpha_hat, c = median draft pass / t(1), the time ratio taken apart from the fastest
    runs' own timings: per step drafting, verifying and other work, over the tokens it emitted,
    against plain decoding's per-token pass and other work)."""
    alpha = alpha_hat([spec])
    drafts = [f.seconds for s in spec.steps for f in s.forwards if f.phase == "draft"]
    c = statistics.median(drafts) / t_pass[0].median if drafts else 0.0
    draft, _, _ = per_step(spec, ("draft",))
    verify, other, e = per_step(spec, ("verify", "decode"))
    other -= draft
    p_pass, p_other, _ = per_step(plain, ("decode",))
    ms = lambda x: f"{x * 1e3:.1f} ms"
    why = (f"in the fastest runs a speculative step took {ms(draft + verify + other)} ({ms(draft)} drafting up to {gamma} "
           f"token{'s' if gamma > 1 else ''}, {ms(verify)} verifying, {ms(other)} other work) and emitted {e:.2f} tokens: "
           f"{ms((draft + verify + other) / e if e else 0)} per token, against {ms(p_pass + p_other)} per token plain "
           f"({ms(p_pass)} pass + {ms(p_other)} other work). On a GPU the passes are memory-bound: "
           + recorded_gpu_run().rstrip("."))
    return alpha, c, why


def _sweep(pair, ids, settings, gamma_max, progress):
    """[{"gamma", "seconds"}]: the faster of two speculative runs per gamma in 1..gamma_max, the
    second round in reverse order so a drift in the machine's load does not favour one end
    (after one untimed warm-up run)."""
    from dataclasses import replace
    decode(pair, ids, replace(settings, gamma=1))  # warm-up, not timed
    gammas, best = list(range(1, gamma_max + 1)), {}
    for i, g in enumerate(gammas + gammas[::-1]):
        report(progress)(i / (2 * gamma_max), f"sweep: γ = {g}")
        seconds = decode(pair, ids, replace(settings, gamma=g)).seconds
        best[g] = min(best.get(g, seconds), seconds)
    return [{"gamma": g, "seconds": best[g]} for g in gammas]


def flops_vs_time(pair, *, prompt: str | None = None, gamma: int = 4, max_new_tokens: int = 64,
                  seed: int = 0, repeats: int = MIN_REPEATS, progress: Progress | None = None) -> FlopsResult:
    """Sweep gamma in 1..gamma, then plain against speculative at the fastest gamma, greedy,
    interleaved `repeats` times, counted and timed (module docstring)."""
    from dataclasses import replace

    from app.runner import fast_by_default
    from app.knee import time_passes

    need_draft(pair)
    gamma_max = check_int("gamma", gamma, 1, 16)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1, 1024)
    repeats = check_int("repeats", repeats, MIN_REPEATS, 50)
    prompt = prompts_for(pair)[0] if prompt is None else prompt  # a chat question for an instruct target
    ids = encode(pair, prompt, max_new_tokens + gamma_max + 1)
    settings = DecodeSettings(gamma=1, seed=seed, max_new_tokens=max_new_tokens)
    sweep = _sweep(pair, ids, settings, gamma_max, part(progress, 0.0, 0.3))
    best = min(sweep, key=lambda s: s["seconds"])["gamma"]
    settings = replace(settings, gamma=best)
    runs = plain_and_speculative(pair, ids, settings, repeats, progress=part(progress, 0.3, 0.85))
    spec, plain = runs["speculative"], runs["plain"]
    report(progress)(0.9, f"timing target passes of 1..{best + 1} tokens")
    kv_len = len(ids) + max_new_tokens // 2
    t_pass = [Spread.of(s) for s in time_passes(pair.target, device=pair.device, batch=1, qs=list(range(1, best + 2)),
                                                kv_len=kv_len, repeats=repeats, fast=fast_by_default(pair),
                                                samples=True)]
    verify_s, draft_s = wasted_seconds(spec.run.steps, [t.median for t in t_pass])
    flops, wasted = count_flops(spec.run.steps, plain.run.steps, {"target": pair.target.config,
                                                                   "draft": pair.draft.config}, dtype_bytes(pair))
    time_ratio = paired_ratio(spec.seconds, plain.seconds)
    alpha, c, why = _why(spec.run, plain.run, best, t_pass)
    warnings = (check_leviathan_bound(1 / time_ratio.median, alpha, best, c),
                *busy_warnings({"the speculative run": spec.seconds, "the plain run": plain.seconds}))
    flops_ratio = (flops["draft"] + flops["verify_used"] + flops["verify_wasted"]) / flops["plain_decode"] \
        if flops["plain_decode"] else 0.0
    report(progress)(1.0, "done")
    total = spec.seconds.median
    return FlopsResult(
        model=pair_label(pair), settings={"prompt": prompt, "gamma_max": gamma_max, "max_new_tokens": max_new_tokens,
                                          "repeats": repeats, "seed": seed},
        gamma=best, sweep=sweep, flops=flops, seconds={"speculative": spec.seconds, "plain": plain.seconds},
        time_ratio=time_ratio, pass_seconds=t_pass,
        waste={"verify_marginal_s": verify_s, "draft_rejected_s": draft_s, "total_s": verify_s + draft_s,
               "share": (verify_s + draft_s) / total if total else 0.0},
        new_tokens=len(spec.run.ids), baseline_tokens=len(plain.run.ids), drafted=spec.run.drafted,
        accepted=spec.run.accepted, wasted_positions=wasted, alpha=alpha, c=c,
        identical=spec.run.ids == plain.run.ids,
        verdict=flops_verdict(flops_ratio, time_ratio, gamma=best, why=why, warnings=warnings))
