"""Put every forward pass of a run on this device's roofline.

`ceilings(device, dtype, progress)` measures the copy bandwidth and matmul rate once per
(device, dtype, torch thread count) per process (app.hardware also caches them on disk across
processes).
`Annotator(pair, ceilings, progress)` fills flops / bytes / bound of the forwards it has not seen
yet, from the cost model of the model that ran each pass (app.roofline.annotate); its
`settle(forwards)`, once nothing else runs on the device, re-measures ceilings that a pass beat
(app.roofline.CeilingCheck) and re-classifies every pass.
"""
from __future__ import annotations

import threading
from typing import Callable, Iterable

import torch

from app.hardware import Ceilings, measure_ceilings
from app.roofline import CeilingCheck, annotate, forward_passes
from app.trace import ForwardTiming

_lock = threading.Lock()
_ceilings: dict[tuple[str, str, int], Ceilings] = {}


def ceilings(device: str, dtype: torch.dtype,
             progress: Callable[[float, str], None] | None = None) -> Ceilings:
    """Measured ceilings of `device` in `dtype` at torch's thread count; measured at most once
    per process."""
    key = (device, str(dtype), torch.get_num_threads())
    with _lock:
        if key not in _ceilings:
            _ceilings[key] = measure_ceilings(device, dtype, progress=progress)
        return _ceilings[key]


def known(device: str, dtype: torch.dtype) -> bool:
    """Whether this process already holds the ceilings (so nothing needs measuring)."""
    return (device, str(dtype), torch.get_num_threads()) in _ceilings


class Annotator:
    """Annotate forwards of one pair in place; a forward is annotated once (bound != "")."""

    def __init__(self, pair, ceilings: Ceilings, progress: Callable[[float, str], None] | None = None):
        self.check = CeilingCheck(ceilings, progress)  # re-measures at most once: one per run
        self.dtype, self.dtype_bytes = pair.dtype, torch.empty((), dtype=pair.dtype).element_size()
        self.configs = {name: model.config.to_dict()  # a dict: the cost model reads it as is
                        for name, model in (("target", pair.target), ("draft", pair.draft))
                        if model is not None}

    def trace(self, trace, settle: bool = False) -> str | None:
        """Annotate every forward of a Trace (baseline included) and, once the run has a
        summary, its FLOPs (the engine sums them before the forwards are costed).
        settle=True, once the run is over: see settle(); returns its note."""
        note = self.settle(trace.all_forwards()) if settle else self(trace.all_forwards())
        if trace.summary is not None:
            trace.summary.flops = sum(f.flops for f in trace.forwards())
        return note

    def __call__(self, forwards: Iterable[ForwardTiming]) -> None:
        for f in forwards:
            config = self.configs.get(f.model)
            if f.bound or config is None or f.seconds <= 0:
                continue
            annotate(f, config, self.dtype_bytes, self.ceilings)

    @property
    def ceilings(self) -> Ceilings:
        return self.check.ceilings

    def settle(self, forwards: Iterable[ForwardTiming]) -> str | None:
        """Call when the run is over (a re-measure needs a quiet device): annotate `forwards`;
        if one ran under its floor, re-measure the ceilings (once per Annotator), keep them for
        this process and re-classify every pass. Returns what to tell the user, else None."""
        forwards = list(forwards)
        self(forwards)
        old = self.ceilings
        note = self.check.check(forward_passes(forwards))
        if self.ceilings is not old:
            with _lock:
                _ceilings[(old.device, str(self.dtype), torch.get_num_threads())] = self.ceilings
            for f in forwards:
                f.bound = ""  # annotated again below, with the new ceilings
            self(forwards)
        return note
