"""Lesson - the memory wall, as arithmetic on stated inputs (every number here is calculated,
except this device's ceilings, which are measured: app.hardware).

Decoding one token per sequence reads every weight once per forward pass (the batch shares the
read) and the KV cache of every sequence, and does about 2 FLOPs per parameter per token (one
multiply, one add; Kaplan et al. 2020, nanoGPT's estimate_mfu; attention's FLOPs left out). For
P parameters of `bytes_per_param` bytes, a pass of batch b x q tokens (q = gamma + 1 when
verifying drafts) over a cache of `context` tokens per sequence, kv = K and V bytes per cached
token (2 x layers x kv_heads x head_dim x bytes; Llama-3-70B in fp16: 2 x 80 x 8 x 128 x 2 =
327,680 B):

    bytes per pass      B = P * bytes_per_param + b * (context + q) * kv   (cache read, q positions written)
    tokens per pass     b * E, E = (1 - alpha^q) / (1 - alpha): tokens emitted (accepted + 1),
                        not processed (E = 1 at q = 1; Leviathan et al. 2023)
    bytes per token     B / (b E)
    memory floor        t_mem = B / bandwidth        (time per pass = per-token latency of a sequence)
    FLOPs per pass      F = 2 P b q
    intensity           I = F / B  (~ 2 b q / bytes_per_param without the cache)   FLOPs per byte
    compute floor       t_cmp = F / peak FLOP/s;  the pass is memory-bound while I < ridge = peak / bandwidth

Anchor: 70e9 params in fp16 -> 140 GB per token at batch 1 -> 70 ms at 2 TB/s; I = 1 FLOP/byte.
Device numbers come from app.hardware.DATASHEET (dense, no sparsity) or are given directly;
REFERENCE (the A100's datasheet ridge) and, with this_device=True, this device's measured ridge
and its decode intensity (in the dtype the app runs here) are shown beside them.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from app.lessons.common import LessonError, check_float, check_int, expected_tokens, require
from app.lessons.verdict import Verdict, check_load, fired

BYTES_PER_PARAM = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
PARAMS = (1.0, 1e15)       # parameters accepted
BANDWIDTH = (1.0, 1e16)    # bytes/s accepted
PEAK = (1.0, 1e18)         # FLOP/s accepted (when given)
LLAMA3_70B_KV = 2 * 80 * 8 * 128 * 2  # bytes of K and V per cached token, fp16 (module docstring)
QUICK = {"params": 70e9, "dtype": "fp16", "batch": 1, "bytes_per_s": 2e12, "flops_per_s": 300e12,
         "context": 1024, "kv_bytes_per_token": LLAMA3_70B_KV, "this_device": True}
REFERENCE = "A100 80GB SXM"
DEFAULT_ALPHA = 0.7  # an assumed acceptance rate for q > 1 (a stated input: give alpha=)


def memory_verdict(intensity: float, ridge: float | None, device: str, here: dict | None = None,
                   warnings=()) -> Verdict:
    """Is the pass memory-bound (intensity below the ridge) on `device`, and on this device when
    `here` is given (this_device_rates, with "intensity": the same pass in this device's dtype)?
    Held when below every known ridge, not held when above one, None when no ridge is known."""
    claim = f"this pass is memory-bound on {device}" + (" and on this device" if here else "") + \
        ": its intensity is below the ridge"
    known = [(intensity, ridge)] if ridge else []
    known += [(here["intensity"], here["ridge"])] if here else []
    held = None if not known else all(i < r for i, r in known)
    evidence = f"{device}: intensity {intensity:.3g} FLOP/byte (calculated) " + (
        f"{'<' if intensity < ridge else '>='} ridge {ridge:.3g} FLOP/byte" if ridge
        else "against no ridge (give a peak FLOP/s to place it)")
    if here:
        evidence += (f"; this device ({here['device_name']}, {here['dtype']}): intensity {here['intensity']:.3g} "
                     f"FLOP/byte {'<' if here['intensity'] < here['ridge'] else '>='} its measured ridge of "
                     f"{here['ridge']:.3g} FLOP/byte")
    return Verdict(claim, held, evidence + ".", fired(*warnings))


def device_label(bytes_per_s: float, flops_per_s: float | None) -> str:
    """A device given by its numbers, in words."""
    peak = f" and {flops_per_s / 1e12:.3g} TFLOP/s" if flops_per_s else ""
    return f"a device of {bytes_per_s / 1e12:.3g} TB/s{peak}"


def reference_rates(dtype: str) -> dict:
    """The REFERENCE GPU's datasheet ridge and its one-token decode intensity in `dtype`."""
    bw, flops, source = device_rates(REFERENCE, dtype)
    return {"device_name": REFERENCE, "dtype": dtype, "bytes_per_s": bw, "flops_per_s": flops,
            "ridge": flops / bw, "decode_intensity": 2 / BYTES_PER_PARAM[dtype], "source": source,
            "label": "datasheet (sourced)"}


def this_device_rates() -> dict:
    """This device's measured ceilings (app.annotate: once per process, cached on disk), in the
    dtype the app runs here (fp32 on a CPU, fp16 elsewhere), its ridge and decode intensity."""
    from app.annotate import ceilings
    from app.hardware import detect_device, parse_dtype

    device = detect_device("auto")
    dtype = "fp32" if device == "cpu" else "fp16"
    c = ceilings(device, parse_dtype(dtype))
    return {"device_name": c.device_name, "dtype": dtype, "bytes_per_s": c.measured_bytes_per_s,
            "flops_per_s": c.measured_flops_per_s, "ridge": c.ridge,
            "decode_intensity": 2 / BYTES_PER_PARAM[dtype], "label": "measured"}


@dataclass
class MemoryWall:
    params: float
    dtype: str
    bytes_per_param: float
    batch: int
    q: int
    alpha: float
    context: int
    kv_bytes_per_token: float
    device: str
    bytes_per_s: float
    flops_per_s: float | None
    weight_bytes: float
    kv_bytes: float
    bytes_per_pass: float
    tokens_per_pass: float       # emitted: batch x E(alpha, q - 1)
    bytes_per_token: float       # per emitted token
    memory_floor_s: float
    flops_per_pass: float
    intensity: float
    compute_floor_s: float | None
    ridge: float | None
    bound: str | None
    memory_bound_below: float | None  # b * q below which the pass is memory-bound (weights only)
    reference: dict
    here: dict | None
    verdict: Verdict

    @property
    def tokens_per_s(self) -> float:
        """Ceiling on throughput: b E tokens every max(floors) seconds."""
        return self.tokens_per_pass / max(self.memory_floor_s, self.compute_floor_s or 0.0)

    def headline(self) -> str:
        kv = (f" + KV cache {self.kv_bytes / 1e9:.3g} GB ({self.context} tokens)" if self.kv_bytes
              else " (KV cache not counted: no context given)")
        per = "" if self.q == 1 else f" emitted (E = {self.tokens_per_pass / self.batch:.3g} per sequence at α = {self.alpha:g})"
        return (f"{self.verdict.text()}\n\nCalculated: **{self.bytes_per_token / 1e9:.3g} GB per token**{per}, memory "
                f"floor **{self.memory_floor_s * 1e3:.3g} ms** per pass at {self.bytes_per_s / 1e12:.3g} TB/s (weights "
                f"{self.weight_bytes / 1e9:.3g} GB, {self.weight_bytes / self.bytes_per_s * 1e3:.3g} ms{kv}), "
                f"intensity **{self.intensity:.3g} FLOP/byte**. {REFERENCE}: ridge {self.reference['ridge']:.0f} "
                f"FLOP/byte (datasheet), decode intensity {self.reference['decode_intensity']:.3g} in {self.dtype}."
                + (f" This device ({self.here['device_name']}): ridge {self.here['ridge']:.3g} FLOP/byte (measured), "
                   f"decode intensity {self.here['decode_intensity']:.3g} in {self.here['dtype']}." if self.here else ""))

    def summary(self) -> list[str]:
        lines = [f"{self.params / 1e9:.3g}B params in {self.dtype} ({self.bytes_per_param:g} B/param), "
                 f"batch {self.batch}, {self.q} token(s) per sequence per pass, {self.device}; all calculated",
                 f"bytes per pass {self.bytes_per_pass / 1e9:.4g} GB (weights {self.weight_bytes / 1e9:.4g}, "
                 f"KV cache {self.kv_bytes / 1e9:.4g}), per emitted token {self.bytes_per_token / 1e9:.4g} GB",
                 f"memory floor {self.memory_floor_s * 1e3:.4g} ms per pass -> at most {self.tokens_per_s:,.0f} tokens/s",
                 f"FLOPs per pass {self.flops_per_pass / 1e12:.4g} TFLOP, intensity {self.intensity:.3g} FLOP/byte"]
        if self.compute_floor_s is not None:
            lines.append(f"compute floor {self.compute_floor_s * 1e3:.4g} ms; ridge {self.ridge:.0f} FLOP/byte: "
                         f"memory-bound while batch x q < {self.memory_bound_below:,.0f}")
        return lines + [self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict.to_dict()
        return {"lesson": "memory_wall", **d, "tokens_per_s": self.tokens_per_s,
                "labels": {"here": "measured", "reference": "datasheet", "*": "calculated"}}


def in_unit(name: str, value, scale: float, unit: str, bounds: tuple[float, float]) -> float:
    """A number typed in `unit` (`scale` base units each: 1e9 for "billion", 1e12 for "TB/s"),
    checked against `bounds` (in base units) in that unit, so the message quotes the value as
    it was typed ("parameters must be between 1e-09 and 1e+06 billion, got -1"); returns the
    value in base units."""
    low, high = bounds[0] / scale, bounds[1] / scale
    require(isinstance(value, (int, float)) and not isinstance(value, bool), f"{name} must be a number, got {value!r}")
    require(math.isfinite(value) and low <= value <= high,
            f"{name} must be between {low:g} and {high:g} {unit}, got {value:g}")
    return float(value) * scale


def device_rates(name: str, dtype: str) -> tuple[float, float | None, str]:
    """(bytes/s, FLOP/s or None, label) of a DATASHEET row named `name` (e.g. "H100 SXM")."""
    from app.hardware import DATASHEET

    row = next((r for r in DATASHEET if r.name.lower() == name.lower()), None)
    names = [r.name for r in DATASHEET if r.bytes_per_s]
    require(row is not None and row.bytes_per_s, f"unknown device {name!r}: choose one of {', '.join(names)}")
    flops = row.fp32_flops_per_s if dtype == "fp32" else row.half_flops_per_s
    return row.bytes_per_s, flops, f"{row.name} datasheet"


def memory_wall(params: float, *, dtype: str = "fp16", batch: int = 1, q: int = 1,
                bytes_per_s: float | None = None, flops_per_s: float | None = None,
                device: str | None = None, source: str | None = None, alpha: float = DEFAULT_ALPHA,
                context: int = 0, kv_bytes_per_token: float = 0.0, this_device: bool = False) -> MemoryWall:
    """The numbers of the module docstring. Give bytes_per_s (and optionally flops_per_s), or a
    DATASHEET device name; explicit numbers win over the device's. source: where the given
    numbers come from (e.g. "this device (measured)"), shown with the result. alpha: acceptance
    rate for tokens emitted per pass when q > 1. this_device: also measure this device's ceilings."""
    params = check_float("params", params, *PARAMS)
    require(dtype in BYTES_PER_PARAM, f"unknown dtype {dtype!r}: choose one of {', '.join(BYTES_PER_PARAM)}")
    batch, q = check_int("batch", batch, 1, 1 << 20), check_int("tokens per pass q", q, 1, 1 << 20)
    alpha = check_float("alpha", alpha, 0.0, 1.0)
    context = check_int("context", context, 0, 1 << 24)
    kv = check_float("KV bytes per token", kv_bytes_per_token, 0.0, 1e12)
    label = source or ("given bandwidth" + (" and peak" if flops_per_s else ""))
    if device:
        dev_bw, dev_flops, label = device_rates(device, dtype)
        bytes_per_s, flops_per_s = bytes_per_s or dev_bw, flops_per_s or dev_flops
    if bytes_per_s is None:
        raise LessonError("give a bandwidth (bytes/s) or a device name")
    bytes_per_s = check_float("bandwidth", bytes_per_s, *BANDWIDTH)
    flops_per_s = check_float("peak FLOP/s", flops_per_s, *PEAK) if flops_per_s else None
    bpp = BYTES_PER_PARAM[dtype]
    weights, kv_bytes = params * bpp, batch * (context + q) * kv if context else 0.0
    b_pass, f_pass = weights + kv_bytes, 2 * params * batch * q
    tokens = batch * expected_tokens(alpha, q - 1)
    compute = f_pass / flops_per_s if flops_per_s else None
    ridge = flops_per_s / bytes_per_s if flops_per_s else None
    here = this_device_rates() if this_device else None
    if here:  # the same pass in this device's dtype (weights only)
        here["intensity"] = 2 * batch * q / BYTES_PER_PARAM[here["dtype"]]
    return MemoryWall(params=params, dtype=dtype, bytes_per_param=bpp, batch=batch, q=q, alpha=alpha, context=context,
                      kv_bytes_per_token=kv, device=label, bytes_per_s=bytes_per_s, flops_per_s=flops_per_s,
                      weight_bytes=weights, kv_bytes=kv_bytes, bytes_per_pass=b_pass, tokens_per_pass=tokens,
                      bytes_per_token=b_pass / tokens, memory_floor_s=b_pass / bytes_per_s,
                      flops_per_pass=f_pass, intensity=f_pass / b_pass, compute_floor_s=compute, ridge=ridge,
                      bound=None if compute is None else ("memory" if b_pass / bytes_per_s >= compute else "compute"),
                      memory_bound_below=ridge * bpp / 2 if ridge else None,
                      reference=reference_rates("fp32" if dtype == "fp32" else "fp16"), here=here,
                      verdict=memory_verdict(f_pass / b_pass, ridge, device or source or device_label(bytes_per_s, flops_per_s),
                                             here,
                                             (check_load(),) if this_device else ()))


def sweep(params: float, *, dtype: str = "fp16", q: int = 1, bytes_per_s: float,
          flops_per_s: float | None = None, batches=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)) -> list[dict]:
    """memory_wall at each batch size, as plain dicts (for the figure)."""
    return [memory_wall(params, dtype=dtype, batch=b, q=q, bytes_per_s=bytes_per_s,
                        flops_per_s=flops_per_s).to_dict() for b in batches]
