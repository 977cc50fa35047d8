"""Lesson 3 - depth policies side by side: how many tokens to draft at each step.

The policies (fixed, heuristic, confidence, roofline) live in app.policies, beside the engine's
default, with their definitions; this module is the experiment that compares them. A fair
comparison needs a strong baseline: fixed depth is swept over gamma = 1..gamma_max in the same
runs and the adaptive policies are judged against the BEST fixed gamma of that sweep, and
against plain decoding. Every configuration runs on the same prompts and seed, `rounds` times,
interleaved (one of each per round), so tokens/s is a Spread (app.lessons.verdict): the verdict
names a winner only when its whole range lies above every other's. Under greedy decoding all
outputs must be identical: a policy changes the speed, never the text.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from app.lessons.common import (Progress, Run, check_float, check_int, check_ints, decode, encode,
                                need_draft, pair_label, part, prompts_for, report, require)
# The policies themselves, and the t(q) timing the roofline policy needs (names kept importable
# from here, the lesson's module, where they used to live).
from app.policies import (POLICY_NAMES, ConfidenceStop, FixedDepth, HeuristicDepth,  # noqa: F401
                          RooflineDepth, make_policy, measure_costs)
from app.lessons.verdict import Spread, Verdict, check_load, check_spread, fired, interleave, ratio_verdict
from app.settings import DecodeSettings

QUICK = {"gamma_max": 4, "max_new_tokens": 32, "rounds": 3}
CLAIM = "an adaptive depth policy beats both the best fixed γ of the same sweep and plain decoding"
LABELS = {"tokens_per_s, seconds": "measured (per round, all prompts; min/median/max over rounds)",
          "alpha, drafted, accepted, wasted, target_passes, mean_gamma": "counted from the first round's runs",
          "t_draft, t_target": "measured (one pass each, repeats interleaved; min/median/max, "
                               "the roofline policy starts from the medians, then takes its own runs' passes)"}


@dataclass
class PolicyRow:
    policy: str
    tokens_per_s: Spread
    seconds: Spread
    alpha: float | None  # None for plain decoding (nothing drafted)
    target_passes: int
    drafted: int
    accepted: int
    wasted: int
    new_tokens: int
    mean_gamma: float
    gamma: int | None = None  # the depth of a fixed row
    outputs: list[list[int]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"fixed γ = {self.gamma}" if self.policy == "fixed" else self.policy

    def to_dict(self) -> dict:
        return {**asdict(self), "name": self.name, "tokens_per_s": self.tokens_per_s.to_dict(),
                "seconds": self.seconds.to_dict()}


@dataclass
class PoliciesResult:
    model: str
    settings: dict
    verdict: Verdict
    t_draft: Spread  # seconds of one draft pass, q = 1
    t_target: list[Spread]  # seconds of one target pass, q = 1 .. gamma_max + 1
    rows: list[PolicyRow]  # plain, the best fixed γ (as "fixed", when asked), the adaptive policies
    sweep: list[PolicyRow]  # every fixed γ
    best_fixed_gamma: int
    identical: bool | None  # greedy: every policy's output == plain decoding's
    labels: dict = field(default_factory=lambda: dict(LABELS))

    def headline(self) -> str:
        same = {True: " All greedy outputs identical.", False: " OUTPUTS DIFFER.", None: ""}[self.identical]
        return f"{self.verdict.text()}\n\nBest fixed depth of the sweep: γ = {self.best_fixed_gamma}.{same}"

    def summary(self) -> list[str]:
        head = f"{'policy':14s} {'tokens/s [min–max, n]':>28s} {'alpha':>6s} {'passes':>6s} {'drafted':>7s} {'wasted':>6s} {'mean γ':>6s}"
        alpha = lambda r: "     —" if r.alpha is None else f"{r.alpha:6.3f}"
        shown = [self.rows[0], *self.sweep, *(r for r in self.rows[1:] if r.policy != "fixed")]
        rows = [f"{r.name:14s} {r.tokens_per_s.text():>28s} {alpha(r)} {r.target_passes:6d} "
                f"{r.drafted:7d} {r.wasted:6d} {r.mean_gamma:6.2f}" for r in shown]
        top = len(self.t_target)
        costs = (f"t_draft(1) {self.t_draft.text(' ms', 1e3)}; t_target(1) {self.t_target[0].text(' ms', 1e3)}, "
                 f"t_target({top}) {self.t_target[-1].text(' ms', 1e3)}")
        return [head, *rows, costs, *(f"{k}: {v}" for k, v in self.labels.items()),
                self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(verdict=self.verdict.to_dict(), rows=[r.to_dict() for r in self.rows],
                 t_draft=self.t_draft.to_dict(), t_target=[t.to_dict() for t in self.t_target],
                 sweep=[r.to_dict() for r in self.sweep])
        return {"lesson": "policies", **d}


# --------------------------------------------------------------------------- the verdict (pure)

def policies_verdict(plain: Spread, fixed: dict[int, Spread], adaptive: dict[str, Spread]) -> tuple[bool | None, str]:
    """From tokens/s Spreads: held when the best adaptive policy's whole range lies above the
    best fixed gamma's and plain decoding's; not held when it lies at or below either;
    inconclusive when the ranges overlap. Names a winner only when its range clears every
    other's, and says plainly when nothing beat plain decoding."""
    best_g = max(fixed, key=lambda g: fixed[g].median)
    field_ = {"plain decoding": plain, f"fixed γ = {best_g}": fixed[best_g], **adaptive}
    top = max(field_, key=lambda n: field_[n].median)
    alone = all(field_[top].min > s.max for n, s in field_.items() if n != top)
    spread = lambda n: f"{n} {field_[n].text(' tok/s', digits=1)}"
    lead = (f"{top} is fastest, clear of the rest: {spread(top)}" if alone else
            f"no winner: the spreads overlap (highest median {spread(top)})")
    others = [s for n, s in field_.items() if n != "plain decoding"]
    vs_plain = ("" if any(s.min > plain.max for s in others) else
                f"; none was clearly faster than plain decoding ({spread('plain decoding')}): the spreads overlap"
                if any(s.median > plain.median for s in others) else
                f"; no policy beat plain decoding ({spread('plain decoding')})")
    if not adaptive:
        return None, f"no adaptive policy was run. {lead}{vs_plain}."
    best_a = max(adaptive, key=lambda n: adaptive[n].median)
    over_fixed = ratio_verdict(adaptive[best_a].ratio(fixed[best_g]), above=1.0)
    over_plain = ratio_verdict(adaptive[best_a].ratio(plain), above=1.0)
    held = (True if over_fixed and over_plain else
            False if over_fixed is False or over_plain is False else None)
    why = ""
    if over_fixed is False:
        why = (f" The best fixed γ ({spread(f'fixed γ = {best_g}')}) already sits at this device's "
               f"optimum; {best_a} ({spread(best_a)}) pays for its choices without finding a better depth.")
    if over_plain is False:
        why += (" On this device drafting and verifying cost more than the accepted drafts save "
                "(a draft pass is not cheap enough next to a target pass).")
    return held, f"{lead}{vs_plain}.{why}"


def noisiest(spreads: list[tuple[str, Spread]]) -> str | None:
    """One check_spread warning for the widest of several Spreads, saying how many were too wide."""
    wide = [(name, s) for name, s in spreads if check_spread(name, s)]
    if not wide:
        return None
    name, s = max(wide, key=lambda pair: pair[1].width)
    return check_spread(name if len(wide) == 1 else f"{name} (the widest of {len(wide)} too-wide timings)", s)


# --------------------------------------------------------------------------- the experiment

def _row(name: str, rounds_of_runs: list[list[Run]], gamma: int | None = None) -> PolicyRow:
    runs = rounds_of_runs[0]  # the counts: every round decodes the same prompts with the same seed
    steps = [s for r in runs for s in r.steps]
    examined = sum(r.examined for r in runs)
    drafted, accepted = sum(r.drafted for r in runs), sum(r.accepted for r in runs)
    seconds = Spread.of([sum(r.seconds for r in batch) for batch in rounds_of_runs])
    tps = Spread.of([sum(len(r.ids) for r in batch) / sum(r.seconds for r in batch) for batch in rounds_of_runs])
    return PolicyRow(policy=name, tokens_per_s=tps, seconds=seconds,
                     alpha=accepted / examined if examined else None,
                     target_passes=sum(r.target_passes for r in runs), drafted=drafted,
                     accepted=accepted, wasted=drafted - accepted, new_tokens=sum(len(r.ids) for r in runs),
                     mean_gamma=drafted / len(steps) if steps else 0.0, gamma=gamma,
                     outputs=[r.ids for r in runs])


def collect(configs: dict, rounds: int, stage) -> dict[str, list[list[Run]]]:
    """configs: {name: run() -> one timed Run per prompt} -> {name: per round, those Runs}.
    Rounds interleaved (verdict.interleave): a change of load hits every config alike."""
    runs = {name: [] for name in configs}
    done, total = [0], rounds * len(configs)

    def one(name):
        def go() -> float:
            stage(done[0] / total, f"round {len(runs[name]) + 1}: {name}")
            runs[name].append(configs[name]())
            done[0] += 1
            return sum(r.seconds for r in runs[name][-1])
        return go
    interleave({name: one(name) for name in configs}, rounds)
    stage(1.0, "done")
    return runs


def _decoder(pair, ids, settings, make):
    """run() for collect: every prompt decoded with a fresh policy from make() (None = plain)."""
    from app.engine import make_drafter

    def run() -> list[Run]:
        out = []
        for prompt_ids in ids:
            policy = make()
            drafter = None if policy is None else make_drafter(pair, "model")
            out.append(decode(pair, prompt_ids, settings, policy=policy, drafter=drafter, plain=policy is None))
        return out
    return run


def compare_policies(pair, *, prompts=None, policies=POLICY_NAMES, gamma: int = 4,
                     gamma_max: int = 8, fixed_gammas=None, threshold: float = 0.4,
                     max_new_tokens: int = 64, temperature: float = 0.0, seed: int = 0,
                     rounds: int = 3, progress: Progress | None = None) -> PoliciesResult:
    """Plain decoding, fixed depth at each of fixed_gammas (default 1..gamma_max) and the
    adaptive policies, on the same prompts (default: the pair's own, common.prompts_for) and
    seed, interleaved over `rounds`. gamma: where the heuristic starts."""
    need_draft(pair)
    gamma_max = check_int("gamma_max", gamma_max, 1, 16)
    gamma = check_int("gamma", gamma, 1, gamma_max)
    fixed_gammas = check_ints("fixed γ values", fixed_gammas or range(1, gamma_max + 1), 1, 16)
    threshold = check_float("threshold", threshold, 0.0, 1.0)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1, 1024)
    temperature = check_float("temperature", temperature, 0.0, 10.0)
    rounds = check_int("rounds", rounds, 1, 20)
    for name in policies:
        require(name in POLICY_NAMES, f"unknown depth policy {name!r}: choose from {', '.join(POLICY_NAMES)}")
    prompts = prompts_for(pair, prompts)
    ids = [encode(pair, p, max_new_tokens + max(gamma_max, *fixed_gammas) + 1) for p in prompts]
    report(progress)(0.0, "measuring t(q) for the roofline policy")
    from app.runner import fast_by_default
    t_draft, t_target = measure_costs(pair, gamma_max, kv_len=max(len(i) for i in ids), fast=fast_by_default(pair),
                                      samples=True)
    t_draft, t_target = Spread.of(t_draft), [Spread.of(t) for t in t_target]
    costs = t_draft.median, [t.median for t in t_target]
    settings = DecodeSettings(gamma=gamma, temperature=temperature, seed=seed, max_new_tokens=max_new_tokens)
    adaptive = [n for n in policies if n != "fixed"]
    makers = {"plain": lambda: None, **{f"fixed γ = {g}": (lambda g=g: FixedDepth(g)) for g in fixed_gammas},
              **{n: (lambda n=n: make_policy(n, gamma, gamma_max, threshold, costs)) for n in adaptive}}
    runs = collect({name: _decoder(pair, ids, settings, make) for name, make in makers.items()}, rounds,
                   part(progress, 0.1, 1.0))
    sweep = [_row("fixed", runs[f"fixed γ = {g}"], g) for g in fixed_gammas]
    best = max(sweep, key=lambda r: r.tokens_per_s.median)
    rows = [_row("plain", runs["plain"]), *(best if n == "fixed" else _row(n, runs[n]) for n in policies)]
    identical = all(r.outputs == rows[0].outputs for r in rows + sweep) if temperature == 0 else None
    held, evidence = policies_verdict(rows[0].tokens_per_s, {r.gamma: r.tokens_per_s for r in sweep},
                                      {r.policy: r.tokens_per_s for r in rows[1:] if r.policy != "fixed"})
    shown = [rows[0], *sweep, *(r for r in rows[1:] if r.policy != "fixed")]
    warnings = fired(noisiest([(f"{r.name} tokens/s", r.tokens_per_s) for r in shown]), check_load())
    return PoliciesResult(model=pair_label(pair), settings={"gamma": gamma, "gamma_max": gamma_max,
                          "fixed_gammas": list(fixed_gammas), "threshold": threshold,
                          "max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed,
                          "rounds": rounds, "prompts": list(prompts)},
                          verdict=Verdict(CLAIM, held, evidence, warnings[:4]), t_draft=t_draft,
                          t_target=t_target, rows=rows, sweep=sweep, best_fixed_gamma=best.gamma,
                          identical=identical)
