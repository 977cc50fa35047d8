"""What a lesson concludes, computed from its own measurements, with their noise.

Every lesson returns a Verdict {claim, held, evidence}: held is True (the run showed the claim),
False (it showed the opposite) or None (inconclusive: the spread is wider than the effect). A
timing is a Spread of repeated samples (min / median / max), never one number, and a ratio of
two timings is judged by its whole range: `ratio_verdict` calls a claim "held" only when even
the least favourable pairing of samples agrees with it.

Sanity checks (`Warning` lines) flag what physics forbids or what a busy machine does to a
timing: a pass over more tokens measured faster than one token (t(q)/t(1) < 0.9), a speed-up
above the Leviathan et al. bound for the measured alpha and c, a pass faster than its memory
floor (stale ceilings), a load average above the cores, a spread wider than SPREAD_BOUND.

Each number a lesson shows carries one of LABELS: measured (timed on this device), counted
(from the cost model, app.costmodel: FLOPs and bytes by formula) or calculated (arithmetic on
stated inputs, e.g. the memory wall for a 70B model).
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

LABELS = {"measured": "timed on this device, device-synchronised",
          "counted": "counted by the cost model (app.costmodel), not timed",
          "calculated": "arithmetic on the stated inputs, nothing run"}
SPREAD_BOUND = 0.5      # (max - min) / median above this: too noisy to conclude from
RATIO_FLOOR = 0.9       # t(q)/t(1) below this for q > 1 cannot happen: a wider pass does more work
BOUND_SLACK = 1.1       # a measured speed-up this far above the Leviathan bound is flagged


@dataclass(frozen=True)
class Spread:
    """Repeated samples of one quantity (seconds, or a ratio): min, median, max, n."""
    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: Sequence[float]) -> "Spread":
        if len(samples) == 0:
            raise ValueError("a Spread needs at least one sample")
        return cls(tuple(float(s) for s in samples))

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def width(self) -> float:
        """(max - min) / median: the relative spread (0 for one sample)."""
        return (self.max - self.min) / self.median if self.median else float("inf")

    def ratio(self, other: "Spread") -> "Spread":
        """self / other as a Spread of its extreme and median pairings: [min/max, median/median,
        max/min]. Conservative: any pairing of the samples lies inside it."""
        return Spread((self.min / other.max, self.median / other.median, self.max / other.min))

    def text(self, unit: str = "", scale: float = 1.0, digits: int = 2) -> str:
        f = lambda v: f"{v * scale:.{digits}f}"
        if self.n == 1:
            return f"{f(self.median)}{unit} (1 sample)"
        return f"{f(self.median)}{unit} [{f(self.min)}–{f(self.max)}, n = {self.n}]"

    def to_dict(self) -> dict:
        return {"min": self.min, "median": self.median, "max": self.max, "n": self.n}


@dataclass(frozen=True)
class Verdict:
    """claim: what the lesson set out to show; held: True / False / None (inconclusive);
    evidence: the numbers from this run that decided it, in words; warnings: sanity checks
    that fired (see the module docstring)."""
    claim: str
    held: bool | None
    evidence: str
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def text(self) -> str:
        """One Markdown paragraph for the top of a lesson's result."""
        head = {True: "**Held on this device:**", False: "**Did not hold here:**",
                None: "**Inconclusive:**"}[self.held]
        out = f"{head} {self.claim} — {self.evidence}"
        return out + "".join(f"\n\n⚠ {w}" for w in self.warnings)

    def to_dict(self) -> dict:
        return {"claim": self.claim, "held": self.held, "evidence": self.evidence,
                "warnings": list(self.warnings)}


def ratio_verdict(ratio: Spread, *, below: float | None = None, above: float | None = None) -> bool | None:
    """Is the ratio below `below` (or above `above`)? True when its whole range is, False when
    its whole range is on the other side, None when the range straddles the threshold."""
    if (below is None) == (above is None):
        raise ValueError("give exactly one of below= or above=")
    if below is not None:
        return True if ratio.max < below else False if ratio.min >= below else None
    return True if ratio.min > above else False if ratio.max <= above else None


def interleave(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, Spread]:
    """Call each run in turn, `repeats` rounds (A, B, A, B, ...): a change in the machine's load
    hits both alike instead of one. Each run returns its own seconds (device-synchronised by the
    caller). -> {name: Spread of its seconds}."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            samples[name].append(run())
    return {name: Spread.of(values) for name, values in samples.items()}


def timed(run: Callable[[], object]) -> Callable[[], float]:
    """run as a callable that returns its wall seconds (for interleave)."""
    def seconds() -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
    return seconds


# --------------------------------------------------------------------------- sanity checks

def check_knee_floor(q: int, ratio: Spread) -> str | None:
    """A pass of q > 1 tokens does at least the work of one: t(q)/t(1) < RATIO_FLOOR is noise."""
    if q > 1 and ratio.median < RATIO_FLOOR:
        return (f"t({q})/t(1) = {ratio.median:.2f} is below {RATIO_FLOOR}: a pass over {q} tokens "
                "cannot be faster than over one. The machine's load changed during the timing; "
                "re-run (with --threads 1 on a shared machine).")
    return None


def check_leviathan_bound(speedup: float, alpha: float, gamma: int, c: float) -> str | None:
    """A measured speed-up above (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)) × BOUND_SLACK
    is more than the draft can deliver (Leviathan et al. Thm 3.8, with a verify pass costing at
    least one target pass): the baseline was slowed by something else."""
    if not (0 <= alpha < 1) or gamma < 0 or c < 0:
        return None
    expected = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    bound = expected / (gamma * c + 1)
    if speedup > bound * BOUND_SLACK:
        return (f"measured speed-up {speedup:.2f}× exceeds the Leviathan bound {bound:.2f}× for "
                f"α = {alpha:.2f}, γ = {gamma}, c = {c:.2f}: the plain run was slowed by other work "
                "on the machine; re-run.")
    return None


def check_memory_floor(seconds: float, bytes_moved: float, bandwidth: float) -> str | None:
    """A pass cannot move its bytes faster than the measured bandwidth (bytes/s)."""
    if bandwidth > 0 and bytes_moved > 0 and seconds < 0.9 * bytes_moved / bandwidth:
        floor = bytes_moved / bandwidth
        return (f"a pass took {seconds * 1e3:.3f} ms, under its memory floor of {floor * 1e3:.3f} ms "
                f"({bytes_moved / 1e6:.1f} MB at {bandwidth / 1e9:.1f} GB/s): the measured ceilings "
                "are stale (caches, another device); re-measure them.")
    return None


def _advice(threads: int | None) -> str:
    """What to try on a busy machine: one thread, unless the run already used one."""
    if threads == 1:
        return "This run already used one thread: try a quieter moment."
    return "Try --threads 1 (SPECLAB_THREADS=1 for the app), or a quieter moment."


def check_spread(name: str, spread: Spread, bound: float = SPREAD_BOUND,
                 threads: int | None = None) -> str | None:
    """threads: the torch threads the run used (None: unknown)."""
    if spread.n > 1 and spread.width > bound:
        return (f"{name} varied by {spread.width:.0%} of its median across {spread.n} repeats "
                f"(more than {bound:.0%}): the machine is busy; conclusions are weaker. "
                + _advice(threads))
    return None


def check_load(cores: int | None = None, threads: int | None = None) -> str | None:
    """The 1-minute load average above the cores: other work is competing for them."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    cores = cores or os.cpu_count() or 1
    if load > cores:
        return (f"the machine is busy (1-minute load {load:.1f} on {cores} cores): timings are "
                "slower and noisier than this device can do. " + _advice(threads))
    return None


def fired(*found: str | None) -> tuple[str, ...]:
    """The sanity checks that fired, in order."""
    return tuple(w for w in found if w)


def paired_ratio(a: Spread, b: Spread) -> Spread:
    """a / b sample by sample, for samples taken in the same rounds (interleave, or
    app.knee.time_passes(samples=True)): round i of a over round i of b, so a change in the
    machine's load that hit both cancels. Falls back to the conservative a.ratio(b) when the
    sample counts differ."""
    if a.n != b.n:
        return a.ratio(b)
    return Spread.of([x / y for x, y in zip(a.samples, b.samples)])


def outcome(held: bool | None, yes: str, no: str, unsure: str) -> str:
    """The one of three texts that matches `held` (True, False, None)."""
    return {True: yes, False: no, None: unsure}[held]
