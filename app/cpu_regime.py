"""Is the knee visible on this machine? Measured, then explained.

Speculative decoding pays when a pass of a few tokens costs about what one token costs. On some
CPUs it does not, for a reason outside the model: on AMD CPUs the MKL inside torch's CPU build
runs fp32 matrix products with more than one row on a slow generic code path (several times
slower than MKL's AVX-512 path forced; research/RESULTS.md),
so a verify pass of 5-8 tokens costs ~2x one token instead of ~1.1x. `MKL_CBWR=AVX512`
(Intel MKL's documented Conditional Numerical Reproducibility setting), set before torch
starts, selects the fast path: an opt-in fix, see the README's "CPU regime" section. (The fast
path's lean decoder, app/lean.py, computes products of up to 8 rows as (W @ x.T).T, which on an
AVX2 EPYC avoided the slow path as installed: benchmarks/cpu_few_rows.py. The probe here times
transformers' own forward unless asked for the fast path, which a Fast-path run does.) The value
suggested is the widest vector path the CPU has, as torch reports it (AVX512 or AVX2): on an
AVX2-only EPYC measured later, MKL_CBWR=AVX512 is not a path that CPU has.

The regime is read from the measured knee: t(q) / t(1) for a pass of q = 8 tokens (or the
largest q measured up to 8) over the same KV cache. At most app.knee.BEND_RATIO (1.5): the knee
is visible; above it, hidden. Nothing is assumed from the CPU's name: the name only chooses the
explanation.
"""
from __future__ import annotations

import os
import weakref
from dataclasses import asdict, dataclass

from app.knee import BEND_RATIO

PROBE_Q = 8
# A pass of q > 1 tokens does all the work of a pass of 1 and more: it cannot take less time.
# A measured ratio below NOISE_RATIO (10% under 1, beyond the repeat-to-repeat spread of a quiet
# machine) is timing noise, and said to be: never "knee visible" on an impossible number.
NOISE_RATIO = 0.9
_probes: "weakref.WeakKeyDictionary[object, dict[tuple, Regime]]" = weakref.WeakKeyDictionary()


@dataclass
class Regime:
    q: int                 # tokens in the wider pass
    ratio: float           # t(q) / t(1), measured
    visible: bool          # ratio <= BEND_RATIO
    device_name: str
    mkl_cbwr: str | None   # the MKL_CBWR setting in effect ($MKL_CBWR), None when unset
    mkl: bool              # torch was built with MKL
    isa: str = ""          # torch.backends.cpu.get_cpu_capability(): "AVX512", "AVX2", ...
    fast: bool = False     # timed on the fast path (app.lean: few-row products in another form)

    @property
    def suggested_cbwr(self) -> str | None:
        return suggested_cbwr(self.isa)

    @property
    def noise(self) -> bool:
        """The ratio is impossible (below NOISE_RATIO): the timing was disturbed."""
        return self.ratio < NOISE_RATIO

    @property
    def label(self) -> str:
        return "timing noise" if self.noise else "knee visible" if self.visible else "knee hidden"

    @property
    def explanation(self) -> str:
        """One or two sentences for the roofline and the CLI."""
        cost = f"a pass of {self.q} tokens costs {self.ratio:.2f}x one token"
        if self.noise:
            return (f"{self.label}: {cost}, which cannot be (it does more work); the machine was "
                    "busy while it was timed, so this run says nothing about the knee.")
        if self.visible:
            return f"{self.label}: {cost}, so verifying gamma + 1 tokens is nearly free."
        amd = "AMD" in self.device_name.upper() or "EPYC" in self.device_name.upper() \
            or "RYZEN" in self.device_name.upper()
        if self.mkl and amd and not self.mkl_cbwr and self.suggested_cbwr and not self.fast:
            return (f"{self.label}: {cost}. On AMD CPUs the MKL inside torch runs multi-row fp32 "
                    "matrix products on a slow generic path; start the app with "
                    f"MKL_CBWR={self.suggested_cbwr} to use its fast path (opt-in, see README: CPU regime), "
                    "or tick Fast path: its lean decoder computes few-row products in another form, "
                    "which avoided the slow path on an AVX2 EPYC (benchmarks/cpu_few_rows.py).")
        return (f"{self.label}: {cost} (above {BEND_RATIO}x), so each extra drafted token costs "
                "target time and speculation gains less here.")

    def to_dict(self) -> dict:
        return {**asdict(self), "label": self.label, "explanation": self.explanation}


def suggested_cbwr(isa: str | None = None) -> str | None:
    """The MKL_CBWR value that selects the widest MKL path of a CPU whose ISA torch reports as
    `isa` (default: this one's, torch.backends.cpu.get_cpu_capability()), or None without
    AVX-512 or AVX2."""
    if isa is None:
        import torch
        isa = torch.backends.cpu.get_cpu_capability()
    return "AVX512" if isa.startswith("AVX512") else "AVX2" if isa == "AVX2" else None


def from_times(seconds_by_q: dict[int, float], device_name: str, fast: bool = False) -> Regime | None:
    """The regime from measured pass times {q: seconds} (one batch, one KV length; fast: timed
    on the fast path); None without t(1) and at least one q > 1."""
    wider = [q for q in seconds_by_q if q > 1]
    if 1 not in seconds_by_q or not wider or seconds_by_q[1] <= 0:
        return None
    q = max((q for q in wider if q <= PROBE_Q), default=min(wider))
    ratio = seconds_by_q[q] / seconds_by_q[1]
    import torch
    return Regime(q=q, ratio=round(ratio, 3), visible=ratio <= BEND_RATIO, device_name=device_name,
                  mkl_cbwr=os.environ.get("MKL_CBWR") or None, mkl=torch.backends.mkl.is_available(),
                  isa=torch.backends.cpu.get_cpu_capability(), fast=fast)


def from_knee(result, device_name: str, fast: bool = False) -> Regime | None:
    """The regime from an app.knee.KneeResult's q sweep (fast: measured on the fast path)."""
    return from_times({r.q: r.seconds for r in result.rows}, device_name, fast)


def probe(model, device: str, device_name: str, *, fast: bool = False, kv_len: int = 64,
          repeats: int = 3) -> Regime:
    """Time passes of 1 and PROBE_Q tokens of `model` (app.knee.time_passes; fast: on the fast
    path, the one a Fast-path run takes), once per model, device, thread count, MKL_CBWR setting
    and path in this process."""
    import torch
    from app.knee import time_passes
    known = _probes.setdefault(model, {})
    key = (device, torch.get_num_threads(), os.environ.get("MKL_CBWR"), fast)
    if key not in known:
        t1, tq = time_passes(model, device=device, batch=1, qs=[1, PROBE_Q], kv_len=kv_len, repeats=repeats,
                             fast=fast)
        known[key] = from_times({1: t1, PROBE_Q: tq}, device_name, fast)
    return known[key]
