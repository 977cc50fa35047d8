"""Timing forward passes honestly: synchronise the device before and after reading the clock.

GPU kernels run asynchronously; without a synchronisation the clock measures only the launch
(gpt-fast and every serious benchmark synchronise). On CPU there is nothing to wait for.
"""
from __future__ import annotations

import time

import torch

from app.hardware import synchronize
from app.models import cache_len, forward
from app.trace import ForwardTiming


def timed_forward(model, input_ids: torch.Tensor, cache, device: str, *, model_name: str,
                  phase: str) -> tuple[torch.Tensor, ForwardTiming]:
    """One forward of input_ids [batch, q] over `cache`; logits [batch, q, vocab] + its timing."""
    batch, q = input_ids.shape
    kv_len = cache_len(cache)
    synchronize(device)
    start = time.perf_counter()
    logits = forward(model, input_ids, cache)
    synchronize(device)
    seconds = time.perf_counter() - start
    return logits, ForwardTiming(model=model_name, phase=phase, batch=batch, tokens=q,
                                 kv_len=kv_len, seconds=seconds)
