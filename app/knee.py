"""The knee: how the time of one forward pass grows with the tokens it processes.

Speculative decoding pays off because verifying gamma + 1 tokens in one target pass costs
about what one token costs - while the pass is memory-bound (every weight is read once,
whatever q is). `measure_knee` times one forward of q new tokens over a KV cache already
holding kv_len tokens, for q = 1, 2, 4, ... past the ridge, and for a few batch sizes at
q = 1 and q = gamma + 1, and places each pass on the measured roofline.

Method: prefill kv_len random tokens into a DynamicCache; then per repeat, synchronise, run
the q-token forward, synchronise, read the clock, and crop the q new positions off the cache
(transformers 5.x: `cache.crop(-q)` removes q tokens; the forward keyword is `cache=`; both
live in app.models, the one module that touches the cache API). One warm-up pass, then the
median of `repeats`.

The bend: the smallest q whose t(q) / t(q_min) exceeds BEND_RATIO = 1.5 (q_min is the
smallest q measured, 1 by default). Below it, extra tokens per pass are nearly free - the
regime speculation exploits; 1.5 is loose enough that timing noise of shared machines
(anchors: +-30% on a busy H200) seldom fakes a bend, tight enough to sit well before the
ridge where the time starts to grow linearly with q.

Results are plain Python values (no tensors), so figures can be drawn without torch.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Callable

import torch

from app.costmodel import forward_cost
from app.hardware import Ceilings, dtype_name, parse_dtype
from app.roofline import classify

BEND_RATIO = 1.5
DEFAULT_QS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass
class KneeRow:
    """One timed pass: batch x q new tokens over kv_len cached ones, median seconds, floors."""
    batch: int
    q: int
    kv_len: int
    seconds: float
    memory_floor_s: float
    compute_floor_s: float
    bound: str
    ratio_to_floor: float
    flops: float
    bytes: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class KneeResult:
    """rows: the q sweep at batch_for_q; batch_rows: the batch sweep at q = 1 and gamma + 1."""
    device: str
    dtype: str
    kv_len: int
    gamma: int
    ceilings: dict
    rows: list[KneeRow] = field(default_factory=list)
    batch_rows: list[KneeRow] = field(default_factory=list)
    bend: int | None = None
    bend_ratio: float = BEND_RATIO
    fast: bool = False  # timed on the fast path (app.fastpath)

    def relative(self) -> list[float]:
        """t(q) / t(q_min) for each row of the q sweep."""
        return [r.seconds / self.rows[0].seconds for r in self.rows] if self.rows else []

    def to_dict(self) -> dict:
        return {"device": self.device, "dtype": self.dtype, "kv_len": self.kv_len,
                "gamma": self.gamma, "ceilings": self.ceilings, "bend": self.bend, "fast": self.fast,
                "bend_ratio": self.bend_ratio, "rows": [r.to_dict() for r in self.rows],
                "batch_rows": [r.to_dict() for r in self.batch_rows]}


def find_bend(rows: list[KneeRow], ratio: float = BEND_RATIO) -> int | None:
    """Smallest q whose time exceeds `ratio` x the time of the first (smallest-q) row."""
    for row in rows[1:]:
        if row.seconds > ratio * rows[0].seconds:
            return row.q
    return None


def measure_knee(model, config, *, device: str, dtype, ceilings: Ceilings,
                 qs: tuple[int, ...] = DEFAULT_QS, batches: tuple[int, ...] = (1,),
                 kv_len: int = 128, repeats: int = 5, gamma: int = 4, fast: bool = False,
                 progress: Callable[[float, str], None] | None = None) -> KneeResult:
    """Time the q sweep (at batches[0]) and the batch sweep; see the module docstring.
    fast=True times the fast path (app.fastpath: lean decoder on a CPU, CUDA graphs on CUDA)."""
    dtype_bytes = torch.empty((), dtype=parse_dtype(dtype)).element_size()
    longest = kv_len + max(max(qs), gamma + 1)
    if longest > max_positions(config):
        raise ValueError(f"kv_len + q = {longest} exceeds the model's "
                         f"{max_positions(config)} positions")
    points = [(batches[0], q) for q in qs]
    points += [(b, q) for b in batches for q in sorted({1, gamma + 1})]
    result = KneeResult(device=device, dtype=dtype_name(dtype), kv_len=kv_len, gamma=gamma,
                        ceilings=ceilings.to_dict(), fast=fast)
    report = progress or (lambda fraction, message: None)
    for i, (batch, q) in enumerate(points):
        seconds = time_forward(model, device=device, batch=batch, q=q, kv_len=kv_len,
                               repeats=repeats, fast=fast)
        cost = forward_cost(config, batch, q, kv_len, dtype_bytes)
        place = classify(seconds, cost.flops, cost.bytes, ceilings)
        row = KneeRow(batch, q, kv_len, seconds, place.memory_floor_s, place.compute_floor_s,
                      place.bound, place.ratio_to_floor, cost.flops, cost.bytes)
        (result.rows if i < len(qs) else result.batch_rows).append(row)
        report((i + 1) / len(points), f"b={batch} q={q}: {seconds * 1e3:.3f} ms ({place.bound})")
    result.bend = find_bend(result.rows)
    return result


def time_forward(model, *, device: str, batch: int, q: int, kv_len: int, repeats: int = 5,
                 seed: int = 0, fast: bool = False, int8: bool = False) -> float:
    """Median seconds of one forward of (batch, q) random tokens over a kv_len-token cache."""
    return time_passes(model, device=device, batch=batch, qs=[q], kv_len=kv_len,
                       repeats=repeats, seed=seed, fast=fast, int8=int8)[0]


@torch.inference_mode()
def time_passes(model, *, device: str, batch: int, qs: list[int], kv_len: int, repeats: int = 5,
                seed: int = 0, fast: bool = False, int8: bool = False, samples: bool = False) -> list:
    """Median seconds of one forward of (batch, q) random tokens over a kv_len-token cache, for
    each q. One prefill serves every q; the q values are interleaved round by round (after one
    warm-up round), so drifting background load hits them alike. The cache is cropped back to
    kv_len after every timed pass (timed with device synchronisation by app.timing).
    fast=True: the fast path's cache and passes (app.fastpath: lean on a CPU, compiled on CUDA);
    the warm-up round then also absorbs any compilation. int8 (with fast, on a CPU): the model
    with int8 weights (app.lean.Int8Weight). samples=True: every timed round's seconds per q
    (a list of `repeats` floats each, round i of every q measured together) instead of medians."""
    from app.fastpath import Path, enable
    from app.kvcache import crop_cache, forward  # the one home of the cache API
    from app.timing import timed_forward

    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.get_text_config().vocab_size
    if fast:
        enable(model, device)
    cache = Path(kv_len + max(qs) if fast else None, int8).new_cache(model, batch)
    if kv_len:
        forward(model, torch.randint(0, vocab, (batch, kv_len), generator=gen).to(device), cache)
    new = {q: torch.randint(0, vocab, (batch, q), generator=gen).to(device) for q in qs}  # (batch, q)
    times: dict[int, list[float]] = {q: [] for q in qs}
    for _ in range(repeats + 1):  # the first round is a warm-up
        for q in qs:
            timing = timed_forward(model, new[q], cache, device, model_name="model", phase="knee")[1]
            times[q].append(timing.seconds)  # cache: kv_len + q positions
            crop_cache(cache, kv_len)
    if samples:
        return [times[q][1:] for q in qs]
    return [statistics.median(times[q][1:]) for q in qs]


def max_positions(config) -> int:
    """Longest sequence the model accepts (n_positions / max_position_embeddings)."""
    cfg = config if isinstance(config, dict) else config.get_text_config().to_dict()
    return int(cfg.get("max_position_embeddings") or cfg.get("n_positions") or 1 << 30)


def default_qs(ceilings: Ceilings, dtype_bytes: int, max_q: int = 1024) -> tuple[int, ...]:
    """Powers of two from 1 to ~4x the ridge in tokens per pass (at least 16, at most max_q).

    At batch 1 a pass of q tokens does ~2 * params * q FLOPs and reads ~params * dtype_bytes
    bytes, so its intensity is ~2q / dtype_bytes and the ridge sits near q = ridge * dtype_bytes / 2.
    """
    ridge_q = ceilings.ridge * dtype_bytes / 2
    top = min(max_q, max(16, 4 * ridge_q))
    return tuple(2 ** i for i in range(int(top).bit_length()) if 2 ** i <= top)
