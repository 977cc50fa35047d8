"""Lesson - tokens per pass against time (the knee).

Claim tested: a forward pass that processes q new tokens costs about what one token costs, as
long as the pass is bound by reading the weights (memory) or by fixed per-pass overhead, not by
FLOPs. That is what lets the target check gamma drafted tokens (a pass of q = gamma + 1) for
about the price of generating one.

Experiment: time the target's forward of q tokens over a KV cache of kv_len tokens, every q in
each of `repeats` interleaved rounds (app.knee.time_passes(samples=True): one warm-up round,
device-synchronised), so each t(q) is a Spread (min / median / max) and t(q)/t(1) is taken
round by round (verdict.paired_ratio). The verdict (`knee_verdict`, a pure function of the
ratios) reads t(5)/t(1) against app.knee.BEND_RATIO: held when its whole range is below, not
held when its whole range is above, inconclusive when the range straddles it. Each pass is
placed on the measured roofline (app.roofline.classify) to say why: overhead-, memory- or
compute-bound.
"""
from __future__ import annotations

from dataclasses import dataclass

from app.knee import BEND_RATIO
from app.lessons.common import (MIN_REPEATS, Progress, busy_warnings, check_int, check_ints, pair_label, part,
                                recorded_gpu_run, require)
from app.lessons.verdict import (Spread, Verdict, check_knee_floor, check_memory_floor, fired, outcome,
                                 paired_ratio, ratio_verdict)

DEFAULT_QS = (1, 2, 3, 4, 5, 6, 8, 16, 32, 64, 128)
QUICK = {"qs": (1, 2, 3, 4, 5, 6, 8, 16, 32, 64), "repeats": 3}
CLAIM_Q = 5

WHY = {
    "overhead": "the passes are overhead-bound (t(1) is far above both its memory and its compute "
                "floor): what flatness there is comes from spreading each pass's fixed cost (dispatch, "
                "framework, small kernels) over more tokens, not from arithmetic idling while the "
                "weights stream in",
    "memory": "the passes are memory-bound: every weight is read once whatever q is, so the extra "
              "tokens ride on the same read",
    "compute": "the passes are compute-bound: each extra token adds its own arithmetic, so the time "
               "grows with q",
}
WHY_NOT = {  # when the claim did not hold: the same class, read the other way
    "overhead": "the passes are overhead-bound, yet a wider pass adds more than the fixed cost it "
                "shares: its per-token work (the wider matrix products) dominates on this device",
    "memory": "the one-token pass sits near the memory roof, yet a wider pass costs more than the "
              "one weight read they share: the wider matrix product runs on a slower code path (on "
              "some CPUs MKL's few-row path: see the CPU regime line in the Live tab)",
    "compute": WHY["compute"],
}


def claim_q(qs) -> int | None:
    """The q the verdict reads: 5, else the largest measured q <= 8 above 1, else the smallest above 1."""
    wider = [q for q in qs if q > 1]
    if CLAIM_Q in qs:
        return CLAIM_Q
    return max((q for q in wider if q <= 8), default=min(wider, default=None))


def knee_verdict(qs, ratios: list[Spread], *, bend_ratio: float = BEND_RATIO, bound: str = "",
                 on_cpu: bool = False, gpu_run: str = "", warnings=()) -> Verdict:
    """The knee's verdict from t(q)/t(1) spreads (ratios[i] for qs[i]); bound: the roofline class
    of the one-token pass (WHY); on_cpu adds where to see the claim on a GPU (gpu_run)."""
    q = claim_q(qs)
    claim = f"a pass of {q} tokens costs about one token's time (t({q})/t(1) below {bend_ratio}×)"
    checks = tuple(check_knee_floor(qq, r) for qq, r in zip(qs, ratios))
    if q is None:
        return Verdict("a pass of a few tokens costs about one token's time", None,
                       "only q = 1 was measured: nothing to compare", fired(*warnings))
    ratio = ratios[list(qs).index(q)]
    held = ratio_verdict(ratio, below=bend_ratio) if ratio.n >= MIN_REPEATS else None
    evidence = f"t({q})/t(1) = {ratio.text('×')} (measured), " + outcome(
        held, f"its whole range below {bend_ratio}×", f"its whole range above {bend_ratio}×",
        f"its range straddles {bend_ratio}×: the spread is wider than the effect" if ratio.n >= MIN_REPEATS
        else f"too few repeats to judge (at least {MIN_REPEATS})") + "."
    if bound in WHY:
        evidence += f" Why: {(WHY_NOT if held is False else WHY)[bound]}."
    if on_cpu:
        evidence += f" This is a CPU; on a GPU the claim rests on the weight read: {gpu_run}"
    return Verdict(claim, held, evidence, fired(*checks, *warnings))


@dataclass
class FiveForOneResult:
    """seconds[i], ratios[i]: Spreads of t(qs[i]) and t(qs[i]) / t(qs[0]) (round-paired);
    rows[i]: the roofline placement of the fastest pass at qs[i] (app.knee.KneeRow.to_dict())."""
    model: str
    qs: list[int]
    seconds: list[Spread]
    ratios: list[Spread]
    bend: int | None
    bend_ratio: float
    kv_len: int
    rows: list[dict]
    verdict: Verdict
    regime: dict | None = None  # app.cpu_regime's reading of these medians (on a CPU)

    def ratio_at(self, q: int) -> float | None:
        """Median t(q)/t(1), or None when q was not measured."""
        return self.ratios[self.qs.index(q)].median if q in self.qs else None

    def headline(self) -> str:
        bend = (f"the median t(q)/t(1) first exceeds {self.bend_ratio}× at q = **{self.bend}**" if self.bend
                else f"the median t(q)/t(1) stays at or below {self.bend_ratio}× up to q = {self.qs[-1]}")
        fix = ""
        if self.regime and not self.regime["visible"]:
            fix = f" CPU regime: {self.regime['explanation']}"
        return f"{self.verdict.text()}\n\nMeasured: {bend}.{fix}"

    def summary(self) -> list[str]:
        lines = [f"model {self.model}, KV cache {self.kv_len} tokens; times measured "
                 f"(median [min–max] of {self.seconds[0].n} interleaved rounds)"]
        lines += [f"  q = {q:4d}   {s.text(' ms', 1e3, 3):34s} t(q)/t(1) = {r.text('×'):28s} {row['bound']}"
                  for q, s, r, row in zip(self.qs, self.seconds, self.ratios, self.rows)]
        return lines + [self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        return {"lesson": "knee", "model": self.model, "qs": self.qs,
                "seconds": [s.to_dict() for s in self.seconds], "ratios": [r.to_dict() for r in self.ratios],
                "ratio_at_5": self.ratio_at(5), "bend": self.bend, "bend_ratio": self.bend_ratio,
                "kv_len": self.kv_len, "rows": self.rows, "regime": self.regime,
                "verdict": self.verdict.to_dict(),
                "labels": {"seconds": "measured", "ratios": "measured", "rows": "counted (flops, bytes)"}}


def _rows(pair, qs, seconds: list[Spread], kv_len: int, ceilings) -> list[dict]:
    """The roofline placement of the fastest pass of each q (cost model: app.costmodel)."""
    from app.costmodel import forward_cost
    from app.knee import KneeRow
    from app.lessons.common import dtype_bytes
    from app.roofline import classify

    rows = []
    for q, s in zip(qs, seconds):
        cost = forward_cost(pair.target.config, 1, q, kv_len, dtype_bytes(pair))
        place = classify(s.min, cost.flops, cost.bytes, ceilings)
        rows.append(KneeRow(1, q, kv_len, s.min, place.memory_floor_s, place.compute_floor_s, place.bound,
                            place.ratio_to_floor, cost.flops, cost.bytes).to_dict())
    return rows


def _watched(qs, seconds: list[Spread]) -> dict[str, Spread]:
    """The timings whose spread the verdict depends on: t(1) and t(claim_q)."""
    q = claim_q(qs)
    return {"t(1)": seconds[0], **({f"t({q})": seconds[list(qs).index(q)]} if q else {})}


def five_for_one(pair, *, qs=DEFAULT_QS, kv_len: int = 64, repeats: int = 5, ceilings=None,
                 progress: Progress | None = None) -> FiveForOneResult:
    """Time the target of `pair` at each q in qs (1 always added), `repeats` interleaved rounds;
    ceilings default to app.hardware.measure_ceilings (cached per device; seconds the first time)."""
    from app.runner import fast_by_default
    from app.hardware import measure_ceilings
    from app.knee import max_positions, time_passes

    qs = tuple(sorted({1, *check_ints("tokens per pass q", qs, 1, 4096)}))
    kv_len = check_int("kv_len", kv_len, 0, 1 << 20)
    repeats = check_int("repeats", repeats, 1, 100)
    room = max_positions(pair.target.config) - kv_len
    require(qs[-1] <= room, f"q up to {qs[-1]} over a {kv_len}-token cache exceeds the model's "
                            f"{room + kv_len} positions")
    if ceilings is None:
        ceilings = measure_ceilings(pair.device, pair.dtype, progress=part(progress, 0.0, 0.2))
    part(progress, 0.2, 1.0)(0.0, f"timing q = {', '.join(map(str, qs))}, {repeats} interleaved rounds")
    fast = fast_by_default(pair)
    samples = time_passes(pair.target, device=pair.device, batch=1, qs=list(qs), kv_len=kv_len,
                          repeats=repeats, fast=fast, samples=True)
    seconds = [Spread.of(s) for s in samples]
    ratios = [paired_ratio(s, seconds[0]) for s in seconds]
    rows = _rows(pair, qs, seconds, kv_len, ceilings)
    bend = next((q for q, r in zip(qs, ratios) if q > 1 and r.median > BEND_RATIO), None)
    regime = None
    if pair.device == "cpu":  # is the knee hidden by the CPU's matrix-product path? (app.cpu_regime)
        from app.cpu_regime import from_times
        found = from_times({q: s.median for q, s in zip(qs, seconds)}, ceilings.device_name, fast)
        regime = found.to_dict() if found else None
    floor = check_memory_floor(seconds[0].min, rows[0]["bytes"], ceilings.measured_bytes_per_s)
    verdict = knee_verdict(qs, ratios, bound=rows[0]["bound"], on_cpu=pair.device == "cpu",
                           gpu_run=recorded_gpu_run() if pair.device == "cpu" else "",
                           warnings=(floor, *busy_warnings(_watched(qs, seconds))))
    part(progress, 0.2, 1.0)(1.0, "done")
    return FiveForOneResult(model=pair_label(pair), qs=list(qs), seconds=seconds, ratios=ratios, bend=bend,
                            bend_ratio=BEND_RATIO, kv_len=kv_len, rows=rows, verdict=verdict, regime=regime)
