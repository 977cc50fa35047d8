"""Lesson 6 - more FLOPs, less time.

Claim: speculative decoding does MORE arithmetic than plain decoding - every draft pass, and
every verified position after the first rejection, is work thrown away - yet finishes sooner,
because the target's passes were never limited by arithmetic (memory or overhead bound).

Accounting (app.costmodel.forward_cost per forward; prefill excluded from both runs):
  * draft          - every draft pass (phase "draft")
  * verify, used   - of a verify pass of q = gamma + 1 positions over kv_len cached ones, the
                     first n_accepted + 1 positions (accepted drafts + correction/bonus):
                     cost(q = n_accepted + 1, kv_len)
  * verify, wasted - the rest: cost(q = gamma + 1) - cost(q = n_accepted + 1): the positions
                     after the first rejection
  * plain decode   - the baseline's one-token target passes
Times are measured per pass; a pass is timed as a whole, so a verify pass's time is split
between used and wasted in proportion to their FLOPs (marked "attributed").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from app.lessons.common import (Progress, check_int, decode, dtype_bytes, encode, keep_fastest,
                                need_draft, pair_label, report)
from app.settings import DecodeSettings

QUICK = {"max_new_tokens": 48}
DEFAULT_PROMPT = "It is a truth universally acknowledged, that a single man in possession of a good fortune"
PARTS = ("draft", "verify_used", "verify_wasted", "plain_decode")


@dataclass
class FlopsResult:
    model: str
    settings: dict
    flops: dict[str, float]    # PARTS -> FLOPs
    seconds: dict[str, float]  # PARTS -> seconds (verify parts attributed by FLOPs share)
    new_tokens: int
    baseline_tokens: int
    spec_flops: float
    plain_flops: float
    spec_seconds: float
    plain_seconds: float
    drafted: int
    accepted: int
    wasted_positions: int
    identical: bool | None

    @property
    def flops_ratio(self) -> float:
        return self.spec_flops / self.plain_flops if self.plain_flops else 0.0

    @property
    def time_ratio(self) -> float:
        return self.spec_seconds / self.plain_seconds if self.plain_seconds else 0.0

    def headline(self) -> str:
        return (f"Measured: speculative decoding did **{self.flops_ratio:.2f}×** the FLOPs of plain "
                f"decoding in **{self.time_ratio:.2f}×** the time "
                f"({self.flops['verify_wasted'] / max(self.spec_flops, 1):.0%} of its FLOPs were wasted "
                "verify work). Prediction: more FLOPs, less time, while passes are not compute-bound.")

    def summary(self) -> list[str]:
        lines = [f"{'part':14s} {'GFLOP':>10s} {'ms':>9s}"]
        lines += [f"{p:14s} {self.flops[p] / 1e9:10.4f} {self.seconds[p] * 1e3:9.1f}" for p in PARTS]
        return lines + [self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        return {"lesson": "flops", **asdict(self), "flops_ratio": self.flops_ratio,
                "time_ratio": self.time_ratio}


def _account(steps, config, nbytes) -> tuple[dict, dict, int]:
    """FLOPs and seconds per part of a speculative run's steps; also wasted positions."""
    from app.costmodel import forward_cost

    flops, seconds, wasted = dict.fromkeys(PARTS, 0.0), dict.fromkeys(PARTS, 0.0), 0
    for step in steps:
        for f in step.forwards:
            if f.phase == "draft":
                flops["draft"] += forward_cost(config["draft"], f.batch, f.tokens, f.kv_len, nbytes).flops
                seconds["draft"] += f.seconds
            elif f.phase in ("verify", "decode"):
                total = forward_cost(config["target"], f.batch, f.tokens, f.kv_len, nbytes).flops
                used = forward_cost(config["target"], f.batch, step.n_accepted + 1, f.kv_len, nbytes).flops
                flops["verify_used"] += used
                flops["verify_wasted"] += total - used
                seconds["verify_used"] += f.seconds * used / total
                seconds["verify_wasted"] += f.seconds * (total - used) / total
                wasted += f.tokens - (step.n_accepted + 1)
    return flops, seconds, wasted


def flops_vs_time(pair, *, prompt: str = DEFAULT_PROMPT, gamma: int = 4, max_new_tokens: int = 64,
                  seed: int = 0, rounds: int = 2, progress: Progress | None = None) -> FlopsResult:
    """A speculative run and a plain run of the same prompt, greedy, priced and timed (the
    fastest of `rounds` each)."""
    from app.costmodel import forward_cost

    need_draft(pair)
    gamma = check_int("gamma", gamma, 1, 16)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1, 1024)
    ids = encode(pair, prompt, max_new_tokens + gamma + 1)
    rounds = check_int("rounds", rounds, 1, 20)
    settings = DecodeSettings(gamma=gamma, seed=seed, max_new_tokens=max_new_tokens)
    best = {}
    for r in range(rounds):  # fastest of `rounds` (common.keep_fastest); outputs are identical
        report(progress)(r / rounds, f"round {r + 1}: speculative and plain runs")
        keep_fastest(best, "spec", decode(pair, ids, settings))
        keep_fastest(best, "plain", decode(pair, ids, settings, plain=True))
    report(progress)(1.0, "done")
    spec, plain = best["spec"], best["plain"]
    nbytes, config = dtype_bytes(pair), {"target": pair.target.config, "draft": pair.draft.config}
    flops, seconds, wasted = _account(spec.steps, config, nbytes)
    decodes = [f for s in plain.steps for f in s.forwards if f.phase == "decode"]
    flops["plain_decode"] = sum(forward_cost(config["target"], f.batch, f.tokens, f.kv_len, nbytes).flops
                                for f in decodes)
    seconds["plain_decode"] = sum(f.seconds for f in decodes)
    return FlopsResult(
        model=pair_label(pair), settings={"prompt": prompt, "gamma": gamma, "max_new_tokens": max_new_tokens,
                                            "rounds": rounds},
        flops=flops, seconds=seconds, new_tokens=len(spec.ids), baseline_tokens=len(plain.ids),
        spec_flops=flops["draft"] + flops["verify_used"] + flops["verify_wasted"],
        plain_flops=flops["plain_decode"],
        spec_seconds=seconds["draft"] + seconds["verify_used"] + seconds["verify_wasted"],
        plain_seconds=seconds["plain_decode"], drafted=spec.drafted, accepted=spec.accepted,
        wasted_positions=wasted, identical=spec.ids == plain.ids)
