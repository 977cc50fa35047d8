"""Timing forward passes honestly: synchronise the device before and after reading the clock.

GPU kernels run asynchronously; without a synchronisation the clock measures only the launch
(gpt-fast and every serious benchmark synchronise). On CPU there is nothing to wait for.
"""
from __future__ import annotations

import time

import torch

from app.hardware import synchronize
from app.kvcache import cache_len, fill_cache, forward
from app.trace import ForwardTiming


def same_threads() -> None:
    """Give the calling thread torch's process-wide CPU thread count.

    OpenMP keeps its thread count per thread: torch.set_num_threads(n) in the main thread does not
    reach threads started later (a Gradio handler, the app's decode thread), which go on using
    every core while torch.get_num_threads() still answers n (pytorch/pytorch#19213 and its kin).
    Every thread that times forwards calls it, so --threads / SPECLAB_THREADS mean the same
    everywhere (measured effect: research/RESULTS.md)."""
    torch.set_num_threads(torch.get_num_threads())


def timed_forward(model, input_ids: torch.Tensor, cache, device: str, *, model_name: str,
                  phase: str, hidden: bool = False, logits: bool = True) -> tuple:
    """One forward of input_ids [batch, q] over `cache`; logits [batch, q, vocab] + its timing.
    hidden=True: (logits, hidden states) + its timing (app.kvcache.forward); logits=False: the
    cache filled without the output layer (app.kvcache.fill_cache), None + its timing."""
    batch, q = input_ids.shape
    run = (lambda: forward(model, input_ids, cache, hidden=hidden)) if logits else \
        (lambda: fill_cache(model, input_ids, cache))
    return timed_call(run, device, model_name=model_name, phase=phase, batch=batch, tokens=q,
                      kv_len=cache_len(cache), logits=logits)


def timed_call(run, device: str, *, model_name: str, phase: str, batch: int, tokens: int,
               kv_len: int, logits: bool = True) -> tuple:
    """run()'s result and a ForwardTiming of it, the device synchronised before and after."""
    synchronize(device)
    start = time.perf_counter()
    out = run()
    synchronize(device)
    seconds = time.perf_counter() - start
    return out, ForwardTiming(model=model_name, phase=phase, batch=batch, tokens=tokens,
                              kv_len=kv_len, seconds=seconds, logits=logits)
