"""Place a timed forward pass on the measured roofline and say what bounds it.

A pass of F FLOPs moving B bytes cannot take less than
    memory floor  = B / measured copy bandwidth
    compute floor = F / measured matmul rate
(Williams, Waterman, Patterson 2009, "Roofline"; LLM-Viewer's `roofline_analyze`). The classic
roofline labels a pass by which floor is higher. That label only means something when the
measured time is near the floor, so `classify` first checks how far above it the pass ran:

    ratio = seconds / max(memory floor, compute floor)
    ratio >  OVERHEAD_FACTOR        -> "overhead"  (Python, kernel launches, framework glue)
    else memory floor >= compute    -> "memory"
    else                            -> "compute"

Why OVERHEAD_FACTOR = 3 (shared/anchors, H200, bf16, KV cache 512): transformers in eager mode
ran 8B-shaped passes of up to 128 tokens at 5.7-12x their memory floor, 1B-shaped ones at
20-26x: not memory-bound, whatever the FLOP count says. A lean decoder replayed as a CUDA graph
ran batch-1 passes at 1.3-1.9x (8B) and 1.4-2.8x (1B) - as close to the floor as real kernels
get (the copy benchmark itself reaches only ~0.88 of the datasheet bandwidth). The same lean
decoder without the graph sat at 2.2x (8B, q=1) and 4.9x (1B, q=1): launch overhead shows on the
small model first. A factor of 3 keeps every batch-1 graph point in its roofline class and puts
every small-q eager-transformers point in "overhead"; ratios of 2-4 are a grey zone, which is
why `ratio_to_floor` is reported beside the class.

Classification always uses the MEASURED ceilings, never datasheet numbers. No pass can beat
its floor, so one that ran under BELOW_ROOF times it says the ceilings are too low (measured
while the machine was busier, then cached): `CeilingCheck` measures them again, once per run,
and the passes are re-classified with the new ones.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from app.costmodel import forward_cost
from app.hardware import G, Ceilings, Progress, measure_ceilings
from app.trace import ForwardTiming

OVERHEAD_FACTOR = 3.0
BELOW_ROOF = 0.8  # a pass this far under its floor means the ceilings are too low
BOUNDS = ("memory", "compute", "overhead")


@dataclass(frozen=True)
class Placement:
    """Where one pass sits: its intensity (FLOPs/byte), achieved rates, both floors (seconds),
    the class, and ratio_to_floor = seconds / max(floors) (1.0 = at the roof)."""
    intensity: float
    achieved_flops_per_s: float
    achieved_bytes_per_s: float
    memory_floor_s: float
    compute_floor_s: float
    bound: str
    ratio_to_floor: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def floors(flops: float, bytes: float, ceilings: Ceilings) -> tuple[float, float]:
    """(memory floor, compute floor) in seconds, from the measured ceilings."""
    return bytes / ceilings.measured_bytes_per_s, flops / ceilings.measured_flops_per_s


def classify(seconds: float, flops: float, bytes: float, ceilings: Ceilings,
             overhead_factor: float = OVERHEAD_FACTOR) -> Placement:
    """Classify a pass that took `seconds` to do `flops` and move `bytes` (rule: module doc)."""
    if seconds <= 0 or bytes <= 0:
        raise ValueError(f"need positive seconds and bytes, got {seconds} s, {bytes} B")
    memory_floor, compute_floor = floors(flops, bytes, ceilings)
    ratio = seconds / max(memory_floor, compute_floor)
    if ratio > overhead_factor:
        bound = "overhead"
    else:
        bound = "memory" if memory_floor >= compute_floor else "compute"
    return Placement(intensity=flops / bytes, achieved_flops_per_s=flops / seconds,
                     achieved_bytes_per_s=bytes / seconds, memory_floor_s=memory_floor,
                     compute_floor_s=compute_floor, bound=bound, ratio_to_floor=ratio)


def ceilings_warning(ratios) -> str | None:
    """A warning when a pass ran under BELOW_ROOF times its floor (ratios: seconds / max(floors)
    of each pass): faster than the measured ceilings allow, so they are too low: measured while
    the machine was slower (busy), and cached per device and dtype. None when every pass is at or
    above its roof (an example with numbers: research/RESULTS.md)."""
    worst = min(ratios, default=1.0)
    if worst >= BELOW_ROOF:
        return None
    return (f"a pass ran at {worst:.2f}x its floor, faster than the measured ceilings allow: they are "
            "too low (measured while the machine was busier, and cached). Re-measure them: "
            "python -m app roofline --refresh")


def forwards_warning(forwards, ceilings: Ceilings) -> str | None:
    """ceilings_warning over annotated ForwardTimings (their flops and bytes filled in)."""
    return ceilings_warning(seconds / max(floors(flops, bytes, ceilings))
                            for seconds, flops, bytes in forward_passes(forwards))


def forward_passes(forwards) -> list[tuple[float, float, float]]:
    """(seconds, flops, bytes) of the annotated ForwardTimings among `forwards`."""
    return [(f.seconds, f.flops, f.bytes) for f in forwards if f.bytes > 0 and f.seconds > 0]


class CeilingCheck:
    """The ceilings one run classifies against, measured again when a pass beats its floor.

    check(passes) looks for the pass furthest under its floor: one under BELOW_ROOF times
    its floor means the ceilings (cached on disk) were measured while the machine was busier.
    The first time, the ceilings are re-measured (refresh: the cache is rewritten) and
    self.ceilings changes: the caller re-classifies its passes. Never more than once per
    CeilingCheck (one per run), so a pass that stays under its floor is reported, not chased
    (on a CPU a model small enough to stay in its caches can do that: the copy measures DRAM)."""

    def __init__(self, ceilings: Ceilings, progress: Progress | None = None):
        self.ceilings, self.progress, self.remeasured = ceilings, progress, False

    def check(self, passes: Iterable[tuple[float, float, float]]) -> str | None:
        """passes: (seconds, flops, bytes) of each measured pass. Returns what the user should be
        told (the ceilings were re-measured, or a timing is impossible), None when every pass is
        at or above its roof."""
        passes = [p for p in passes if p[0] > 0 and p[2] > 0]
        worst = _worst(passes, self.ceilings)
        if worst is None:
            return None
        if not self.remeasured:
            old, self.remeasured = self.ceilings, True
            report = self.progress or (lambda fraction, message: None)
            report(0.0, f"a pass ran at {worst[0]:.2f}x its floor: the cached ceilings are too low, "
                        "re-measuring them")
            self.ceilings = measure_ceilings(old.device, old.dtype, refresh=True, progress=self.progress)
            after = _worst(passes, self.ceilings)
            if after is None:
                return (f"ceilings re-measured: a pass ran at {worst[0]:.2f}x its floor under the cached "
                        f"ones (copy {old.measured_bytes_per_s / G:.1f} GB/s, matmul "
                        f"{old.measured_flops_per_s / G:.1f} GFLOP/s: measured while the machine was busier); "
                        f"now copy {self.ceilings.measured_bytes_per_s / G:.1f} GB/s, matmul "
                        f"{self.ceilings.measured_flops_per_s / G:.1f} GFLOP/s, passes re-classified")
            worst = after
        ratio, which = worst
        return (f"impossible timing: pass faster than the measured {which} ceiling allows ({ratio:.2f}x "
                f"its floor after re-measuring the ceilings: copy "
                f"{self.ceilings.measured_bytes_per_s / G:.1f} GB/s, matmul "
                f"{self.ceilings.measured_flops_per_s / G:.1f} GFLOP/s)")


def _worst(passes, ceilings: Ceilings) -> tuple[float, str] | None:
    """(ratio, "memory" or "compute": the floor it is a ratio to) of the pass furthest under its
    floor, when it is under BELOW_ROOF times it; else None."""
    worst = None
    for seconds, flops, bytes in passes:
        memory_floor, compute_floor = floors(flops, bytes, ceilings)
        ratio = seconds / max(memory_floor, compute_floor)
        if ratio < BELOW_ROOF and (worst is None or ratio < worst[0]):
            worst = (ratio, "memory" if memory_floor >= compute_floor else "compute")
    return worst


def annotate(forward: ForwardTiming, config, dtype_bytes: int, ceilings: Ceilings) -> Placement:
    """Fill forward.flops, forward.bytes and forward.bound IN PLACE (the engine already holds
    the ForwardTiming inside its StepEvent) and return the full Placement."""
    weight_bytes = 1 if forward.weights == "int8" else None  # int8 weights: 1 byte each
    cost = forward_cost(config, forward.batch, forward.tokens, forward.kv_len, dtype_bytes, weight_bytes,
                        logits=forward.logits)
    placement = classify(forward.seconds, cost.flops, cost.bytes, ceilings)
    forward.flops, forward.bytes, forward.bound = cost.flops, cost.bytes, placement.bound
    return placement
