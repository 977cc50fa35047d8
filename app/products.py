"""The matrix products of the lean decoder (app.lean): plain fp32 products, the few-row form
that some CPUs run faster for decode-sized passes (chosen by measurement on the CPU at hand),
and weight-only int8 per output row for drafts.

Shapes: x [..., in] @ w.T -> [..., out], w [out, in], as F.linear.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(slots=True)
class Int8Weight:
    """A [out, in] weight as int8 per output row, w ~ data * scale[:, None] (weight-only int8,
    as gpt-fast quantises: symmetric, absmax per row). A quarter of fp32's bytes for a pass
    that streams its weights; the product runs torch's _weight_int8pack_mm, bf16 activations."""
    data: torch.Tensor    # [out, in] int8
    scale: torch.Tensor   # [out] bfloat16

    @classmethod
    def of(cls, w: torch.Tensor) -> Int8Weight:
        w = w.detach().float()
        # the kernel takes bf16 scales: round up (bf16 keeps 8 significant bits) so that the
        # stored scale is never below absmax / 127 and every |w / scale| fits in 127
        scale = (w.abs().amax(1) / 127 * (1 + 2 ** -7)).clamp_min(1e-12).to(torch.bfloat16)  # [out]
        data = torch.round(w / scale.float()[:, None]).clamp(-127, 127).to(torch.int8)      # [out, in]
        return cls(data, scale)


FEW_ROWS = 8  # decode, draft and verify passes (gamma + 1 <= 8 tokens at batch 1)
# Row counts computed one row wider: n + 1 rows ran faster than n (the extra row a copy of the
# first, its output dropped; benchmarks/cpu_few_rows.py --padding, numbers in research/RESULTS.md).
PADDED_ROWS = {1: 2, 3: 4, 7: 8}
STREAMING_BYTES = 32 << 20  # weights beyond this (a server CPU's L3 cache) stream from memory each pass


def few_rows_product(flat: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """flat [n, in] (1 <= n <= FEW_ROWS) @ w.T -> [n, out], computed as (w @ flat.T).T, padded
    by one row for the counts in PADDED_ROWS (1 to 2, 3 to 4, 7 to 8). Same products as
    F.linear (equal up to reassociation), another MKL code path: on some CPUs F.linear's few-row
    fp32 product streams the weights at about half the speed of this form. It pays for its extra
    calls (the copies in and out) only when the weights stream from memory, so LeanModel considers
    it (linear's form_rows, by choose_form_rows) only for models whose weights exceed
    STREAMING_BYTES. Measurements: research/RESULTS.md, "Few-row products in another form"."""
    n = flat.shape[0]
    pad = PADDED_ROWS.get(n, n) - n
    rows = (torch.cat((flat, flat[:pad])) if pad else flat).contiguous()  # [n + pad, in]
    return (w @ rows.T).T[:n].contiguous()                                # [n, out]


def choose_form_rows(weights: list[torch.Tensor], rounds: int = 3, products=None) -> frozenset[int]:
    """The row counts n in 1..FEW_ROWS for which few_rows_product beats F.linear on this CPU,
    measured: one sweep is a product of n random rows with every matrix in `weights` (each
    [out, in], fp32: a whole model's, so they stream from memory as in a pass); after one
    untimed sweep per form, each n is timed `rounds` times per form and the medians compared.
    `products` ({"form": f, "linear": g}, each (x [n, in], w) -> [n, out]) is for tests.
    Why measured: the winner depends on the CPU and its MKL setting (research/RESULTS.md).
    Cost: 2 * FEW_ROWS * rounds + 2 sweeps (seconds for SmolLM2 on a 2-core CPU).
    Where the forms are close, two runs can choose differently; both give the same products up
    to reassociation (~1e-5), and the engine's exactness does not rest on either."""
    products = products or {"form": few_rows_product, "linear": F.linear}
    gen = torch.Generator().manual_seed(0)
    inputs = {n: {w.shape[1]: torch.randn(n, w.shape[1], generator=gen) for w in weights}
              for n in range(1, FEW_ROWS + 1)}                         # n -> in -> [n, in]

    def sweep(n: int, product) -> float:
        start = time.perf_counter()
        for w in weights:
            product(inputs[n][w.shape[1]], w)
        return time.perf_counter() - start

    for product in products.values():
        sweep(FEW_ROWS, product)  # untimed: first-call costs (kernel choice, pages)
    chosen = set()
    for n in range(1, FEW_ROWS + 1):
        times = {name: [sweep(n, product) for _ in range(rounds)] for name, product in products.items()}
        if statistics.median(times["form"]) < statistics.median(times["linear"]):
            chosen.add(n)
    return frozenset(chosen)


def plus_bias(out: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """out [..., out] + bias [out], or out itself when the layer has no bias."""
    return out if bias is None else out + bias


def linear(x: torch.Tensor, w: torch.Tensor | Int8Weight, bias: torch.Tensor | None = None,
           form_rows: frozenset[int] = frozenset()) -> torch.Tensor:
    """x [..., in] @ w.T (+ bias) -> [..., out] in x's dtype, for a plain or an Int8Weight.
    A plain fp32 product on the CPU whose row count is in form_rows runs as few_rows_product."""
    if not isinstance(w, Int8Weight):
        if form_rows and x.device.type == "cpu" and x.dtype == torch.float32 and x.shape[-1]:
            rows = x.numel() // x.shape[-1]
            if rows in form_rows:
                return plus_bias(few_rows_product(x.reshape(rows, -1), w).reshape(*x.shape[:-1], -1), bias)
        return F.linear(x, w, bias)
    flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)                       # [n, in]
    out = torch.ops.aten._weight_int8pack_mm(flat, w.data, w.scale).to(x.dtype)  # [n, out]
    return plus_bias(out.reshape(*x.shape[:-1], -1), bias)
