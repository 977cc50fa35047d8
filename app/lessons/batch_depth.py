"""Lesson - batch size against speculation depth.

Claim: speculation buys speed only while the target's pass is cheap to widen. A batch of b
sequences verifying gamma + 1 tokens each is a pass of b * (gamma + 1) tokens; as b grows the
pass leaves the flat part of the knee, the extra positions stop being free, and from some batch
on no depth gamma >= 1 beats plain decoding (gamma = 0): serving systems switch speculation off
above a batch-size threshold.

Method (measured times, simulated acceptance):
  * MEASURED: t_target(b, q = gamma + 1) and t_draft(b, 1), one device-synchronised forward over
    a kv_len-token cache, `repeats` rounds each (`app.knee.time_passes(samples=True)`: one
    prefill per batch size, the q values interleaved): Spreads (min / median / max).
  * SIMULATED: each sequence's accepted count per step, i.i.d. over positions with probability
    alpha (Leviathan et al. 2023): n = min(gamma, G - 1), G ~ Geometric(1 - alpha); a seeded
    Monte Carlo over `steps` steps. The same draws G serve every gamma of one batch size
    (common random numbers), so columns differ by gamma only.
  * per-step time  T(b, gamma) = gamma * t_draft(b, 1) + t_target(b, gamma + 1)
    tokens/s       = sum over steps and sequences of (n + 1) / (steps * T(b, gamma))
    speedup        = tokens/s(b, gamma) / tokens/s(b, 0),   tokens/s(b, 0) = b / t_target(b, 1)
    speedup range  one sample per timing round (speedup_ranges); the heatmap shows its median
Verdicts (pure functions of the timings): C5 `batch2_verdict`, a pass for 2 sequences costs about
one (t(2, 1) / t(1, 1) below app.knee.BEND_RATIO; batches 1 and 2 timed alternately,
`batch2_times`, the ratio taken round by round); C6 `boundary_verdict`,
speculation pays at the smallest batch and stops paying at a larger one, judged on the speedup
ranges. A cell whose median speedup exceeds the Leviathan bound for its alpha, gamma and c =
t_draft / t_target(b, 1) (verdict.check_leviathan_bound) is impossible: timing noise made a
wider pass look cheaper than a narrower one; it is flagged and left out of the verdicts.
Batch sizes 1 and 2 are always measured (C5 needs them).
Simplifications, said on screen: every sequence has the same context length; the draft's extra
2-token pass after a fully accepted step is not charged; no padding or scheduling cost.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app import validation
from app.knee import BEND_RATIO, time_passes
from app.lessons.common import (MIN_REPEATS, Progress, busy_warnings, check_float, check_int, check_ints, measure_alpha,
                                need_draft, pair_label, part, report, require)
from app.lessons.verdict import (Spread, Verdict, check_knee_floor, check_leviathan_bound, fired, interleave,
                                 outcome, paired_ratio, ratio_verdict)
from app.settings import MAX_BATCH

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_GAMMAS = tuple(range(9))
QUICK = {"batches": (1, 2, 4, 16, 64), "gammas": (0, 1, 2, 4, 8), "repeats": 3, "kv_len": 16}


@dataclass
class BatchDepthResult:
    """Rows follow batches, columns follow gammas (gammas[0] == 0, the plain-decoding column).
    t_target[i][j], t_draft[i]: measured Spreads; speedup_range[i][j]: one sample per timing
    round; speedup[i][j]: its median; tokens_per_s: from the median times; impossible[i][j]: above the Leviathan
    bound (left out of the verdicts). lose_from_batch[j]: smallest batch where gamma_j loses
    (median speedup < 1); None if never (and for gamma 0). disable_at_batch: smallest batch from
    which on no gamma >= 1 beats gamma 0 (medians). verdict: C6 (boundary_verdict);
    batch2_verdict: C5."""
    model: str
    source: str
    alpha: float
    alpha_source: str
    batches: list[int]
    gammas: list[int]
    kv_len: int
    steps: int
    seed: int
    t_target: list[list[Spread]]
    t_draft: list[Spread]
    tokens_per_s: list[list[float]]
    speedup: list[list[float]]
    speedup_range: list[list[Spread]]
    impossible: list[list[bool]]
    best_gamma: list[int]
    lose_from_batch: list[int | None]
    disable_at_batch: int | None
    verdict: Verdict
    batch2_verdict: Verdict
    batch2_seconds: dict[str, Spread]  # t_target(b, 1) for b = 1, 2, timed alternately (C5)

    def headline(self) -> str:
        flagged = sum(map(sum, self.impossible))
        note = (f" {flagged} cell(s) broke the Leviathan bound (timing noise) and are marked ✗, not results."
                if flagged else "")
        return (f"{self.verdict.text()}\n\n{self.batch2_verdict.text()}\n\nMeasured times + simulated "
                f"acceptance (α = {self.alpha:.2f}, {self.alpha_source}).{note}")

    def summary(self) -> list[str]:
        head = "batch " + "".join(f"  γ={g:<4d}" for g in self.gammas) + "  best γ"
        rows = [f"{b:5d} " + "".join("       ✗" if bad else f"  {s:6.2f}" for s, bad in zip(row, flags))
                + f"  {bg:6d}" for b, row, flags, bg in zip(self.batches, self.speedup, self.impossible, self.best_gamma)]
        times = [f"t_target(b, 1) b={b}: {t[0].text(' ms', 1e3, 3)}" for b, t in zip(self.batches, self.t_target)]
        return [self.source, "speedup over plain decoding (γ = 0), medians; ✗ = above the Leviathan bound:",
                head, *rows, *times, self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        spreads = lambda table: [[s.to_dict() for s in row] for row in table]
        return {"lesson": "batch_depth", "model": self.model, "source": self.source, "alpha": self.alpha,
                "alpha_source": self.alpha_source, "batches": self.batches, "gammas": self.gammas,
                "kv_len": self.kv_len, "steps": self.steps, "seed": self.seed,
                "t_target": spreads(self.t_target), "t_draft": [s.to_dict() for s in self.t_draft],
                "tokens_per_s": self.tokens_per_s, "speedup": self.speedup,
                "speedup_range": spreads(self.speedup_range), "impossible": self.impossible,
                "best_gamma": self.best_gamma, "lose_from_batch": self.lose_from_batch,
                "disable_at_batch": self.disable_at_batch, "verdict": self.verdict.to_dict(),
                "batch2_verdict": self.batch2_verdict.to_dict(),
                "batch2_seconds": {k: v.to_dict() for k, v in self.batch2_seconds.items()},
                "labels": {"t_target": "measured", "t_draft": "measured",
                           "speedup": "calculated (measured times, simulated acceptance)"}}


def emitted(batches, gammas, alpha: float, steps: int, seed: int) -> list[list[float]]:
    """Tokens emitted per step by the whole batch, [len(batches)][len(gammas)]: a seeded Monte
    Carlo of n = min(gamma, G - 1), G ~ Geometric(1 - alpha), per sequence and step (the same
    draws for every gamma of one batch size), averaged over `steps`."""
    out = []
    for b in batches:
        rng = np.random.default_rng([seed, b])
        g_draws = rng.geometric(1 - alpha, size=(steps, b)) if alpha < 1 else None  # (steps, b)
        out.append([float(((np.full((steps, b), g) if g_draws is None else np.minimum(g, g_draws - 1)) + 1).sum())
                    / steps for g in gammas])
    return out


def simulate(t_target, t_draft, batches, gammas, alpha: float, steps: int, seed: int):
    """tokens/s [len(batches)][len(gammas)] from measured times and simulated acceptance.

    t_target[i][j]: seconds of a target pass at (batches[i], gammas[j] + 1); t_draft[i]: (b, 1)."""
    e = emitted(batches, gammas, alpha, steps, seed)
    return [[e[i][j] / (g * t_draft[i] + t_target[i][j]) for j, g in enumerate(gammas)] for i in range(len(batches))]


def speedup_ranges(t_target: list[list[Spread]], t_draft: list[Spread], gammas, e) -> list[list[Spread]]:
    """Speedup of each cell over gamma 0, one sample per timing round: round i's
    E_g t_target(b, 1)_i / (E_0 (g t_draft_i + t_target(b, g + 1)_i)). The target's q values are
    timed in the same rounds (time_passes interleaves them), so a change in load cancels in the
    ratio; the draft's rounds are paired by index. Where the sample counts differ: the extreme
    pairings (low, median, high). e: emitted(). gamma 0 is 1 exactly (one timing)."""
    out = []
    for tt, td, row in zip(t_target, t_draft, e):
        cells = []
        for j, g in enumerate(gammas):
            gain = row[j] / row[0]
            if g == 0:
                cells.append(Spread.of([1.0]))
            elif td.n == tt[0].n == tt[j].n:
                cells.append(Spread.of([gain * t1 / (g * d + tq) for t1, d, tq in
                                        zip(tt[0].samples, td.samples, tt[j].samples)]))
            else:
                step = lambda pick: g * pick(td) + pick(tt[j])
                cells.append(Spread((gain * tt[0].min / step(lambda s: s.max),
                                     gain * tt[0].median / step(lambda s: s.median),
                                     gain * tt[0].max / step(lambda s: s.min))))
        out.append(cells)
    return out


def impossible_cells(speedup, t_target, t_draft, gammas, alpha: float) -> list[list[bool]]:
    """Cells whose median speedup breaks the Leviathan bound for alpha, gamma and
    c = t_draft / t_target(b, 1) (medians): check_leviathan_bound fired."""
    return [[g > 0 and check_leviathan_bound(s, alpha, g, td.median / tt[0].median) is not None
             for g, s in zip(gammas, row)] for row, tt, td in zip(speedup, t_target, t_draft)]


def batch2_verdict(ratio: Spread | None, warnings=(), repeats: int = MIN_REPEATS) -> Verdict:
    """C5: one pass for 2 sequences costs about one (ratio = t(2, 1) / t(1, 1) below BEND_RATIO);
    inconclusive with fewer than MIN_REPEATS repeats behind it."""
    claim = f"a pass for batch 2 costs about what batch 1 costs (t(b=2)/t(b=1) below {BEND_RATIO}×)"
    if ratio is None:
        return Verdict(claim, None, "batch 1 and 2 were not both measured", fired(*warnings))
    enough = repeats >= MIN_REPEATS
    held = ratio_verdict(ratio, below=BEND_RATIO) if enough else None
    evidence = f"t(b=2)/t(b=1) at q = 1 = {ratio.text('×')} (measured), " + outcome(
        held, f"its whole range below {BEND_RATIO}×", f"its whole range above {BEND_RATIO}×",
        f"its range straddles {BEND_RATIO}×: the spread is wider than the effect" if enough
        else f"too few repeats to judge (at least {MIN_REPEATS})") + "."
    return Verdict(claim, held, evidence, fired(check_knee_floor(2, ratio), *warnings))


def _pays(row: list[Spread], flags: list[bool], gammas) -> bool | None:
    """Does some gamma >= 1 pay at this batch? True: a valid cell's whole range above 1; False:
    every valid cell's range at or below 1; None: otherwise or no valid cell."""
    cells = [s for s, bad, g in zip(row, flags, gammas) if g > 0 and not bad]
    if any(s.min > 1 for s in cells):
        return True
    return False if cells and all(s.max <= 1 for s in cells) else None


def boundary_verdict(batches, gammas, ranges: list[list[Spread]], impossible, warnings=(),
                     repeats: int = MIN_REPEATS) -> Verdict:
    """C6: speculation pays at the smallest batch and stops paying at a larger one (ranges);
    inconclusive with fewer than MIN_REPEATS repeats behind the ranges."""
    claim = "speculation pays at a small batch and stops paying from some larger batch on"
    pays = [_pays(row, flags, gammas) for row, flags in zip(ranges, impossible)]
    best = lambda i: max(((s, g) for s, g, bad in zip(ranges[i], gammas, impossible[i]) if g > 0 and not bad),
                         key=lambda x: x[0].median, default=None)
    cell = lambda i: ("no valid cell" if best(i) is None
                      else f"best γ = {best(i)[1]}: {best(i)[0].text('×')}")
    stop = next((i for i in range(len(batches)) if all(p is False for p in pays[i:])), None)
    if pays[0] is False:
        held, evidence = False, f"it did not pay even at batch {batches[0]} ({cell(0)})"
    elif pays[-1] is True and len(batches) > 1:
        held, evidence = False, f"it still pays at the largest batch measured, {batches[-1]} ({cell(-1)})"
    elif pays[0] is True and stop is not None:
        held, evidence = True, (f"at batch {batches[0]} it pays ({cell(0)}); from batch {batches[stop]} on no γ ≥ 1 "
                                f"beats plain decoding ({cell(stop)})")
    else:
        held, evidence = None, (f"at batch {batches[0]}: {cell(0)}; at batch {batches[-1]}: {cell(-1)}; "
                                "the ranges straddle 1: the spread is wider than the effect")
    if repeats < MIN_REPEATS:
        held, evidence = None, f"too few repeats to judge ({repeats}; at least {MIN_REPEATS})"
    rows = ", ".join(f"b={b} {outcome(p, 'yes', 'no', 'unclear')}" for b, p in zip(batches, pays))
    return Verdict(claim, held, f"{evidence}. Does some γ ≥ 1 pay? {rows} (speedup ranges from the measured "
                   "timing rounds).", fired(*warnings))


def thresholds(batches, gammas, speedup, impossible=None) -> tuple[list[int | None], int | None]:
    """(lose_from_batch per gamma, disable_at_batch); see BatchDepthResult. Impossible cells
    (a mask like speedup) count as neither winning nor losing."""
    ok = lambda i, j: not (impossible and impossible[i][j])
    lose = [None if g == 0 else next((b for i, (b, row) in enumerate(zip(batches, speedup))
                                      if row[j] < 1 and ok(i, j)), None)
            for j, g in enumerate(gammas)]
    disable = None
    for i in range(len(batches) - 1, -1, -1):  # walk down while no gamma >= 1 wins
        if any(s > 1 and ok(i, j) for j, (g, s) in enumerate(zip(gammas, speedup[i])) if g > 0):
            break
        disable = batches[i]
    return lose, disable


def measure_times(pair, batches, gammas, kv_len, repeats, progress=None):
    """(t_target [b][gamma] at q = gamma + 1, t_draft [b] at q = 1) as Spreads of `repeats`
    rounds, batch by batch; on the path the Live tab runs (app.runner.fast_by_default)."""
    from app.runner import fast_by_default

    t_target, t_draft, fast = [], [], fast_by_default(pair)
    for i, b in enumerate(batches):
        report(progress)(i / len(batches), f"timing the target at batch {b}")
        t_target.append([Spread.of(s) for s in time_passes(pair.target, device=pair.device, batch=b,
                                                           qs=[g + 1 for g in gammas], kv_len=kv_len,
                                                           repeats=repeats, fast=fast, samples=True)])
        t_draft.append(Spread.of(time_passes(pair.draft, device=pair.device, batch=b, qs=[1], kv_len=kv_len,
                                             repeats=repeats, fast=fast, samples=True)[0]))
        report(progress)((i + 1) / len(batches), f"b={b}: target q=1 {t_target[-1][0].median * 1e3:.1f} ms, "
                                                  f"draft {t_draft[-1].median * 1e3:.2f} ms")
    return t_target, t_draft


def batch2_times(pair, kv_len: int, repeats: int) -> dict[str, Spread]:
    """t_target(b, 1) for b = 1 and 2, alternating (b=1, b=2, b=1, ...; verdict.interleave), one
    timed pass per call after its warm-up, so round i of each was taken moments apart (C5)."""
    from app.runner import fast_by_default

    fast = fast_by_default(pair)
    once = lambda b: lambda: time_passes(pair.target, device=pair.device, batch=b, qs=[1], kv_len=kv_len,
                                         repeats=1, fast=fast)[0]
    return interleave({"b=1": once(1), "b=2": once(2)}, repeats)


def _alpha(pair, alpha, temperature, seed, progress) -> tuple[float, str]:
    """(alpha, where it came from): chosen, or measured on the pair."""
    if alpha is not None:
        return check_float("alpha", alpha, 0.0, 1.0), "chosen"
    require(not pair.info.get("shape_only"), "a shape-only pair has random weights, so its "
            "acceptance means nothing: choose α (e.g. 0.7)")
    alpha = measure_alpha(pair, temperature=temperature, seed=seed, progress=progress)
    return alpha, f"measured on the pair ({'greedy' if temperature == 0 else f'T = {temperature}'})"


def batch_vs_depth(pair, *, batches=DEFAULT_BATCHES, gammas=DEFAULT_GAMMAS, alpha: float | None = None,
                   kv_len: int = 32, repeats: int = 3, steps: int = 200, seed: int = 0,
                   temperature: float = 0.0, progress: Progress | None = None) -> BatchDepthResult:
    """The heatmap of speedup over (batch, gamma) with C5 and C6 verdicts; alpha None = measured
    on the pair. Batches 1 and 2 are always added."""
    need_draft(pair)
    batches = tuple(sorted({1, 2, *(validation.batch(b) for b in check_ints("batch sizes", batches, 1, MAX_BATCH))}))
    gammas = tuple(sorted({0, *check_ints("gammas", gammas, 0, 32)}))
    kv_len, repeats = check_int("kv_len", kv_len, 0, 1 << 20), check_int("repeats", repeats, 1, 100)
    steps, seed = check_int("steps", steps, 1, 100_000), check_int("seed", seed, 0, 2**32 - 1)
    alpha, alpha_source = _alpha(pair, alpha, temperature, seed, part(progress, 0, 0.15))
    t_target, t_draft = measure_times(pair, batches, gammas, kv_len, repeats, part(progress, 0.15, 1))
    e = emitted(batches, gammas, alpha, steps, seed)
    tps = [[e[i][j] / (g * t_draft[i].median + t_target[i][j].median) for j, g in enumerate(gammas)]
           for i in range(len(batches))]
    ranges = speedup_ranges(t_target, t_draft, gammas, e)
    speedup = [[x.median for x in row] for row in ranges]
    impossible = impossible_cells(speedup, t_target, t_draft, gammas, alpha)
    lose, disable = thresholds(batches, gammas, speedup, impossible)
    valid = [[s for s, bad in zip(row, flags) if not bad] for row, flags in zip(speedup, impossible)]
    busy = busy_warnings({f"t_target(b={batches[0]}, 1)": t_target[0][0], f"t_target(b={batches[-1]}, 1)": t_target[-1][0]})
    c5 = batch2_times(pair, kv_len, repeats)
    spread2 = busy_warnings({"t(b=1) for C5": c5["b=1"], "t(b=2) for C5": c5["b=2"]})[1:]  # load: said above
    source = (f"measured forward times ({pair.device}, KV cache {kv_len}, {repeats} rounds) + simulated "
              f"acceptance at α = {alpha:.3f} ({alpha_source}; i.i.d. per position, {steps} steps, seed {seed})")
    return BatchDepthResult(
        model=pair_label(pair), source=source, alpha=alpha, alpha_source=alpha_source, batches=list(batches),
        gammas=list(gammas), kv_len=kv_len, steps=steps, seed=seed, t_target=t_target, t_draft=t_draft,
        tokens_per_s=tps, speedup=speedup, speedup_range=ranges, impossible=impossible,
        best_gamma=[gammas[row.index(max(v))] for row, v in zip(speedup, valid)], lose_from_batch=lose, disable_at_batch=disable,
        verdict=boundary_verdict(batches, gammas, ranges, impossible, busy, repeats),
        batch2_verdict=batch2_verdict(paired_ratio(c5["b=2"], c5["b=1"]), spread2, repeats), batch2_seconds=c5)
