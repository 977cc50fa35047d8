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


def same_threads() -> None:
    """Give the calling thread torch's process-wide CPU thread count.

    OpenMP keeps its thread count per thread: torch.set_num_threads(n) in the main thread does not
    reach threads started later (a Gradio handler, the app's decode thread), which go on using
    every core while torch.get_num_threads() still answers n (pytorch/pytorch#19213 and its kin).
    Measured on the 2-core dev CPU after set_num_threads(1): a 2048 x 2048 matmul took 98 ms in
    a new thread, 188 ms in the main thread and in a new thread that called this first. Every
    thread that times forwards calls it, so --threads / SPECLAB_THREADS mean the same everywhere."""
    torch.set_num_threads(torch.get_num_threads())


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
