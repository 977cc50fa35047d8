"""Lesson 2 - batch size against speculation depth.

Claim: speculation buys speed only while the target's pass is cheap to widen. A batch of b
sequences verifying gamma + 1 tokens each is a pass of b * (gamma + 1) tokens; as b grows the
pass leaves the flat part of the knee, the extra positions stop being free, and from some batch
on no depth gamma >= 1 beats plain decoding (gamma = 0): serving systems switch speculation off
above a batch-size threshold.

Method (measured times, simulated acceptance):
  * MEASURED: t_target(b, q = gamma + 1) and t_draft(b, 1), one device-synchronised forward over
    a kv_len-token cache (median of `repeats`, by `app.knee.time_passes`: one prefill per
    batch size, the q values interleaved).
  * SIMULATED: each sequence's accepted count per step, i.i.d. over positions with probability
    alpha (Leviathan et al. 2023): n = min(gamma, G - 1), G ~ Geometric(1 - alpha); a seeded
    Monte Carlo over `steps` steps. The same draws G serve every gamma of one batch size
    (common random numbers), so columns differ by gamma only.
  * per-step time  T(b, gamma) = gamma * t_draft(b, 1) + t_target(b, gamma + 1)
    tokens/s       = sum over steps and sequences of (n + 1) / (steps * T(b, gamma))
    speedup        = tokens/s(b, gamma) / tokens/s(b, 0),   tokens/s(b, 0) = b / t_target(b, 1)
Simplifications, said on screen: every sequence has the same context length; the draft's extra
2-token pass after a fully accepted step is not charged; no padding or scheduling cost.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from app.knee import time_passes

from app import validation
from app.settings import MAX_BATCH
from app.lessons.common import (Progress, check_float, check_int, check_ints, measure_alpha,
                                need_draft, pair_label, part, report, require)

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_GAMMAS = tuple(range(9))
QUICK = {"batches": (1, 4, 16, 64), "gammas": (0, 1, 2, 4, 8), "repeats": 3, "kv_len": 16}


@dataclass
class BatchDepthResult:
    """Rows follow batches, columns follow gammas (gammas[0] == 0, the plain-decoding column).
    lose_from_batch[j]: smallest batch where gamma_j loses (speedup < 1); None if never (and for
    gamma 0). disable_at_batch: smallest batch from which on no gamma >= 1 beats gamma 0."""
    model: str
    source: str
    alpha: float
    alpha_source: str
    batches: list[int]
    gammas: list[int]
    kv_len: int
    steps: int
    seed: int
    t_target: list[list[float]]
    t_draft: list[float]
    tokens_per_s: list[list[float]]
    speedup: list[list[float]]
    best_gamma: list[int]
    lose_from_batch: list[int | None]
    disable_at_batch: int | None

    def headline(self) -> str:
        best, i, j = max((s, i, j) for i, row in enumerate(self.speedup) for j, s in enumerate(row))
        where = (f"from batch **{self.disable_at_batch}** on no γ ≥ 1 beats plain decoding"
                 if self.disable_at_batch else f"some γ ≥ 1 still wins at batch {self.batches[-1]}")
        return (f"Measured times + simulated acceptance (α = {self.alpha:.2f}): best speedup "
                f"**{best:.2f}×** (b = {self.batches[i]}, γ = {self.gammas[j]}); {where}. "
                f"Prediction: the gain shrinks as b·(γ+1) leaves the flat part of the knee.")

    def summary(self) -> list[str]:
        head = "batch " + "".join(f"  γ={g:<4d}" for g in self.gammas) + "  best γ"
        rows = [f"{b:5d} " + "".join(f"  {s:6.2f}" for s in row) + f"  {bg:6d}"
                for b, row, bg in zip(self.batches, self.speedup, self.best_gamma)]
        return [self.source, "speedup over plain decoding (γ = 0):", head, *rows,
                self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        return {"lesson": "batch_depth", **asdict(self)}


def simulate(t_target, t_draft, batches, gammas, alpha: float, steps: int, seed: int):
    """tokens/s [len(batches)][len(gammas)] from measured times and simulated acceptance.

    t_target[i][j]: seconds of a target pass at (batches[i], gammas[j] + 1); t_draft[i]: (b, 1)."""
    tokens_per_s = []
    for i, b in enumerate(batches):
        rng = np.random.default_rng([seed, b])
        g_draws = rng.geometric(1 - alpha, size=(steps, b)) if alpha < 1 else None  # (steps, b)
        row = []
        for j, gamma in enumerate(gammas):
            accepted = np.full((steps, b), gamma) if g_draws is None else np.minimum(gamma, g_draws - 1)
            emitted = float((accepted + 1).sum())
            seconds = steps * (gamma * t_draft[i] + t_target[i][j])
            row.append(emitted / seconds)
        tokens_per_s.append(row)
    return tokens_per_s


def thresholds(batches, gammas, speedup) -> tuple[list[int | None], int | None]:
    """(lose_from_batch per gamma, disable_at_batch); see BatchDepthResult."""
    lose = [None if g == 0 else next((b for b, row in zip(batches, speedup) if row[j] < 1), None)
            for j, g in enumerate(gammas)]
    disable = None
    for i in range(len(batches) - 1, -1, -1):  # walk down while no gamma >= 1 wins
        if any(s > 1 for g, s in zip(gammas, speedup[i]) if g > 0):
            break
        disable = batches[i]
    return lose, disable


def measure_times(pair, batches, gammas, kv_len, repeats, progress=None):
    """(t_target [b][gamma] at q = gamma + 1, t_draft [b] at q = 1), batch by batch; on CUDA on
    the fast path (app.fastpath.use_by_default)."""
    from app.fastpath import use_by_default

    t_target, t_draft = [], []
    for i, b in enumerate(batches):
        report(progress)(i / len(batches), f"timing the target at batch {b}")
        t_target.append(time_passes(pair.target, device=pair.device, batch=b, qs=[g + 1 for g in gammas],
                                    kv_len=kv_len, repeats=repeats, fast=use_by_default(pair.device)))
        t_draft.append(time_passes(pair.draft, device=pair.device, batch=b, qs=[1], kv_len=kv_len,
                                   repeats=repeats, fast=use_by_default(pair.device))[0])
        report(progress)((i + 1) / len(batches), f"b={b}: target q=1 {t_target[-1][0] * 1e3:.1f} ms, "
                                                  f"draft {t_draft[-1] * 1e3:.2f} ms")
    return t_target, t_draft


def batch_vs_depth(pair, *, batches=DEFAULT_BATCHES, gammas=DEFAULT_GAMMAS, alpha: float | None = None,
                   kv_len: int = 32, repeats: int = 3, steps: int = 200, seed: int = 0,
                   temperature: float = 0.0, progress: Progress | None = None) -> BatchDepthResult:
    """The heatmap of speedup over (batch, gamma); alpha None = measured on the pair."""
    need_draft(pair)
    batches = tuple(sorted({validation.batch(b) for b in check_ints("batch sizes", batches, 1, MAX_BATCH)}))
    gammas = tuple(sorted({0, *check_ints("gammas", gammas, 0, 32)}))
    kv_len, repeats = check_int("kv_len", kv_len, 0, 1 << 20), check_int("repeats", repeats, 1, 100)
    steps, seed = check_int("steps", steps, 1, 100_000), check_int("seed", seed, 0, 2**32 - 1)
    if alpha is None:
        require(not pair.info.get("shape_only"), "a shape-only pair has random weights, so its "
                "acceptance means nothing: choose α (e.g. 0.7)")
        alpha = measure_alpha(pair, temperature=temperature, seed=seed, progress=part(progress, 0, 0.15))
        alpha_source = f"measured on the pair ({'greedy' if temperature == 0 else f'T = {temperature}'})"
    else:
        alpha_source = "chosen"
    alpha = check_float("alpha", alpha, 0.0, 1.0)
    t_target, t_draft = measure_times(pair, batches, gammas, kv_len, repeats, part(progress, 0.15, 1))
    tps = simulate(t_target, t_draft, batches, gammas, alpha, steps, seed)
    speedup = [[v / row[0] for v in row] for row in tps]
    lose, disable = thresholds(batches, gammas, speedup)
    source = (f"measured forward times ({pair.device}, KV cache {kv_len}) + simulated acceptance "
              f"at α = {alpha:.3f} ({alpha_source}; i.i.d. per position, {steps} steps, seed {seed})")
    return BatchDepthResult(model=pair_label(pair), source=source, alpha=alpha, alpha_source=alpha_source,
                            batches=list(batches), gammas=list(gammas), kv_len=kv_len, steps=steps,
                            seed=seed, t_target=t_target, t_draft=t_draft, tokens_per_s=tps,
                            speedup=speedup, best_gamma=[gammas[row.index(max(row))] for row in speedup],
                            lose_from_batch=lose, disable_at_batch=disable)
