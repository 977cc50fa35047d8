"""Lesson 1 - five tokens cost about one.

Claim: a forward pass that processes q new tokens costs about what one token costs, as long as
the pass is bound by reading the weights (memory) or by fixed per-pass overhead, not by FLOPs.
That is why the target can check gamma drafted tokens (a pass of q = gamma + 1) for roughly the
price of generating one.

Experiment: time the target's forward of q tokens over a KV cache of kv_len tokens for small q
(1..8, where speculation lives) and larger q (up to past the bend), with `app.knee.measure_knee`
(device-synchronised median of `repeats`). Report t(q) / t(1) and the bend: the first q with
t(q) / t(1) > 1.5 (app.knee.BEND_RATIO).
"""
from __future__ import annotations

from dataclasses import dataclass

from app.lessons.common import Progress, check_int, check_ints, pair_label, part, require

DEFAULT_QS = (1, 2, 3, 4, 5, 6, 8, 16, 32, 64, 128)
QUICK = {"qs": (1, 2, 3, 4, 5, 6, 8, 16, 32, 64), "repeats": 3}


@dataclass
class FiveForOneResult:
    """knee: app.knee.KneeResult.to_dict(); ratios[i] = t(qs[i]) / t(qs[0])."""
    model: str
    qs: list[int]
    seconds: list[float]
    ratios: list[float]
    bend: int | None
    bend_ratio: float
    knee: dict
    regime: dict | None = None  # app.cpu_regime's verdict from these rows (on a CPU)

    def ratio_at(self, q: int) -> float | None:
        return self.ratios[self.qs.index(q)] if q in self.qs else None

    def headline(self) -> str:
        r5 = self.ratio_at(5)
        five = f"t(5)/t(1) = **{r5:.2f}×**" if r5 is not None else "q = 5 not measured"
        bend = f"the curve bends at q = **{self.bend}**" if self.bend else \
            f"no bend up to q = {self.qs[-1]} (t(q)/t(1) ≤ {self.bend_ratio})"
        regime = f" **CPU regime:** {self.regime['explanation']}" if self.regime else ""
        return f"Measured: {five}; {bend}. Prediction (memory-bound pass): t(q)/t(1) ≈ 1 for small q.{regime}"

    def summary(self) -> list[str]:
        lines = [f"model {self.model}, KV cache {self.knee['kv_len']} tokens"]
        lines += [f"  q = {q:4d}   {s * 1e3:9.3f} ms   t(q)/t(1) = {r:5.2f}   {row['bound']}"
                  for q, s, r, row in zip(self.qs, self.seconds, self.ratios, self.knee["rows"])]
        return lines + [self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        return {"lesson": "knee", "model": self.model, "qs": self.qs, "seconds": self.seconds,
                "ratios": self.ratios, "ratio_at_5": self.ratio_at(5), "bend": self.bend,
                "bend_ratio": self.bend_ratio, "knee": self.knee, "regime": self.regime}


def five_for_one(pair, *, qs=DEFAULT_QS, kv_len: int = 64, repeats: int = 5, ceilings=None,
                 progress: Progress | None = None) -> FiveForOneResult:
    """Time the target of `pair` at each q in qs; ceilings default to app.hardware.measure_ceilings
    (cached per device; a few seconds the first time)."""
    from app.hardware import measure_ceilings
    from app.knee import max_positions, measure_knee

    qs = check_ints("tokens per pass q", qs, 1, 4096)
    kv_len = check_int("kv_len", kv_len, 0, 1 << 20)
    repeats = check_int("repeats", repeats, 1, 100)
    room = max_positions(pair.target.config) - kv_len
    require(qs[-1] <= room, f"q up to {qs[-1]} over a {kv_len}-token cache exceeds the model's "
                            f"{room + kv_len} positions")
    if ceilings is None:
        ceilings = measure_ceilings(pair.device, pair.dtype, progress=part(progress, 0.0, 0.2))
    from app.fastpath import use_by_default
    knee = measure_knee(pair.target, pair.target.config, device=pair.device, dtype=pair.dtype,
                        ceilings=ceilings, qs=qs, kv_len=kv_len, repeats=repeats, gamma=0,
                        fast=use_by_default(pair.device), progress=part(progress, 0.2, 1.0))
    knee.batch_rows = []  # gamma=0 adds a q=1 batch row we do not use
    seconds = [r.seconds for r in knee.rows]
    regime = None
    if pair.device == "cpu":  # is the knee hidden by the CPU's matrix-product path? (app.cpu_regime)
        from app.cpu_regime import from_knee
        found = from_knee(knee, ceilings.device_name)
        regime = found.to_dict() if found else None
    return FiveForOneResult(model=pair_label(pair), qs=list(qs), seconds=seconds,
                            ratios=knee.relative(), bend=knee.bend, bend_ratio=knee.bend_ratio,
                            knee=knee.to_dict(), regime=regime)

