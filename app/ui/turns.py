"""Device turns: runs on the same device (decodes, lessons) go one at a time; runs on different
devices go side by side.

Two layers. Gradio's queue admits at most `device_count()` device-using events at once, across
every event that shares the concurrency id DEVICE_QUEUE (Gradio: events with one concurrency_id
share one queue). Inside, each run takes its device's lock with `turn()`, so a CPU decode and a
GPU decode may run together, while two runs on one device never overlap: they would share its
compute and every forward's timing would be wrong. A run that has to wait says so.

`device_choices()` (the Live tab's device dropdown) lives here, beside `device_count()` which
counts it, so that this module needs nothing from the handlers that use it.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable

DEVICE_QUEUE = "device"
_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def device_choices() -> list[str]:
    """"auto", "cpu", and "cuda" / "mps" where this machine has them."""
    import torch
    choices = ["auto", "cpu"]
    if torch.cuda.is_available():
        choices.append("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        choices.append("mps")
    return choices


def device_count() -> int:
    """The devices runs can use at once: the CPU, plus a CUDA GPU or an Apple GPU if present."""
    return len([d for d in device_choices() if d != "auto"])


def queue() -> dict:
    """Keywords for every device-using event: .click(fn, inputs, outputs, **turns.queue())."""
    return {"concurrency_id": DEVICE_QUEUE, "concurrency_limit": device_count()}


def busy(device: str) -> bool:
    """Whether a run holds `device` now."""
    return device in _locks and _locks[device].locked()


@contextmanager
def turn(device: str, waiting: Callable[[str], None] | None = None):
    """Hold `device` for the block; if another run holds it, call waiting(message) and wait."""
    with _guard:
        lock = _locks.setdefault(device, threading.Lock())
    if not lock.acquire(blocking=False):
        if waiting is not None:
            waiting(f"waiting for {device}: another decode or lesson is running on it")
        lock.acquire()
    try:
        from app.timing import same_threads
        same_threads()  # this handler's thread times forwards: torch's thread count applies here too
        yield
    finally:
        lock.release()
