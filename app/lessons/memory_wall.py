"""Lesson 7 - the memory wall, as pure arithmetic.

Decoding one token per sequence reads every weight once per forward pass (the batch shares the
read), and does about 2 FLOPs per parameter per token (one multiply, one add; Kaplan et al.
2020, nanoGPT's estimate_mfu). For P parameters of `bytes_per_param` bytes, a pass of
batch b x q tokens (q = gamma + 1 when verifying drafts):

    bytes per pass      B = P * bytes_per_param                   (weights only; KV cache extra)
    bytes per token     B / (b q)
    memory floor        t_mem = B / bandwidth        (time per pass = per-token latency of a sequence)
    FLOPs per pass      F = 2 P b q
    intensity           I = F / B = 2 b q / bytes_per_param   FLOPs per byte
    compute floor       t_cmp = F / peak FLOP/s;  the pass is memory-bound while I < ridge = peak / bandwidth,
                        i.e. while b q < ridge * bytes_per_param / 2

Anchor: 70e9 params in fp16 -> 140 GB per token at batch 1 -> 70 ms at 2 TB/s; I = 1 FLOP/byte.
Device numbers come from app.hardware.DATASHEET (dense, no sparsity) or are given directly.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from app.lessons.common import LessonError, check_float, check_int, require

BYTES_PER_PARAM = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
PARAMS = (1.0, 1e15)       # parameters accepted
BANDWIDTH = (1.0, 1e16)    # bytes/s accepted
PEAK = (1.0, 1e18)         # FLOP/s accepted (when given)
QUICK = {"params": 70e9, "dtype": "fp16", "batch": 1, "bytes_per_s": 2e12, "flops_per_s": 300e12}


@dataclass
class MemoryWall:
    params: float
    dtype: str
    bytes_per_param: float
    batch: int
    q: int
    device: str
    bytes_per_s: float
    flops_per_s: float | None
    bytes_per_pass: float
    bytes_per_token: float
    memory_floor_s: float
    flops_per_pass: float
    intensity: float
    compute_floor_s: float | None
    ridge: float | None
    bound: str | None
    memory_bound_below: float | None  # b * q below which the pass is memory-bound

    @property
    def tokens_per_s(self) -> float:
        """Ceiling on throughput: b q tokens every max(floors) seconds."""
        return self.batch * self.q / max(self.memory_floor_s, self.compute_floor_s or 0.0)

    def headline(self) -> str:
        bound = f"; {self.bound}-bound (ridge {self.ridge:.0f} FLOP/byte)" if self.bound else ""
        return (f"**{self.bytes_per_token / 1e9:.3g} GB per token**, memory floor **{self.memory_floor_s * 1e3:.3g} ms** "
                f"per pass at {self.bytes_per_s / 1e12:.3g} TB/s, intensity **{self.intensity:.3g} FLOP/byte**{bound}.")

    def summary(self) -> list[str]:
        lines = [f"{self.params / 1e9:.3g}B params in {self.dtype} ({self.bytes_per_param:g} B/param), "
                 f"batch {self.batch}, {self.q} token(s) per sequence per pass, {self.device}",
                 f"bytes per pass {self.bytes_per_pass / 1e9:.4g} GB, per token {self.bytes_per_token / 1e9:.4g} GB",
                 f"memory floor {self.memory_floor_s * 1e3:.4g} ms per pass -> at most {self.tokens_per_s:,.0f} tokens/s",
                 f"FLOPs per pass {self.flops_per_pass / 1e12:.4g} TFLOP, intensity {self.intensity:.3g} FLOP/byte"]
        if self.compute_floor_s is not None:
            lines.append(f"compute floor {self.compute_floor_s * 1e3:.4g} ms; ridge {self.ridge:.0f} FLOP/byte: "
                         f"memory-bound while batch x q < {self.memory_bound_below:,.0f}")
        return lines + [self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        return {"lesson": "memory_wall", **asdict(self), "tokens_per_s": self.tokens_per_s}


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
                device: str | None = None, source: str | None = None) -> MemoryWall:
    """The numbers of the module docstring. Give bytes_per_s (and optionally flops_per_s), or a
    DATASHEET device name; explicit numbers win over the device's. source: where the given
    numbers come from (e.g. "this device (measured)"), shown with the result."""
    params = check_float("params", params, *PARAMS)
    require(dtype in BYTES_PER_PARAM, f"unknown dtype {dtype!r}: choose one of {', '.join(BYTES_PER_PARAM)}")
    batch, q = check_int("batch", batch, 1, 1 << 20), check_int("tokens per pass q", q, 1, 1 << 20)
    label = source or ("given bandwidth" + (" and peak" if flops_per_s else ""))
    if device:
        dev_bw, dev_flops, label = device_rates(device, dtype)
        bytes_per_s, flops_per_s = bytes_per_s or dev_bw, flops_per_s or dev_flops
    if bytes_per_s is None:
        raise LessonError("give a bandwidth (bytes/s) or a device name")
    bytes_per_s = check_float("bandwidth", bytes_per_s, *BANDWIDTH)
    flops_per_s = check_float("peak FLOP/s", flops_per_s, *PEAK) if flops_per_s else None
    bpp = BYTES_PER_PARAM[dtype]
    b_pass, f_pass = params * bpp, 2 * params * batch * q
    compute = f_pass / flops_per_s if flops_per_s else None
    ridge = flops_per_s / bytes_per_s if flops_per_s else None
    return MemoryWall(params=params, dtype=dtype, bytes_per_param=bpp, batch=batch, q=q, device=label,
                      bytes_per_s=bytes_per_s, flops_per_s=flops_per_s, bytes_per_pass=b_pass,
                      bytes_per_token=b_pass / (batch * q), memory_floor_s=b_pass / bytes_per_s,
                      flops_per_pass=f_pass, intensity=f_pass / b_pass, compute_floor_s=compute, ridge=ridge,
                      bound=None if compute is None else ("memory" if b_pass / bytes_per_s >= compute else "compute"),
                      memory_bound_below=ridge * bpp / 2 if ridge else None)


def sweep(params: float, *, dtype: str = "fp16", q: int = 1, bytes_per_s: float,
          flops_per_s: float | None = None, batches=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)) -> list[dict]:
    """memory_wall at each batch size, as plain dicts (for the figure)."""
    return [memory_wall(params, dtype=dtype, batch=b, q=q, bytes_per_s=bytes_per_s,
                        flops_per_s=flops_per_s).to_dict() for b in batches]
