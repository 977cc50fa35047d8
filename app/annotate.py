"""Put every forward pass of a run on this device's roofline.

`ceilings(device, dtype, progress)` measures the copy bandwidth and matmul rate once per
(device, dtype) per process (app.hardware also caches them on disk across processes).
`Annotator(pair, ceilings)` fills flops / bytes / bound of the forwards it has not seen yet,
from the cost model of the model that ran each pass (app.roofline.annotate).
"""
from __future__ import annotations

import threading
from typing import Callable, Iterable

import torch

from app.hardware import Ceilings, measure_ceilings
from app.roofline import annotate
from app.trace import ForwardTiming

_lock = threading.Lock()
_ceilings: dict[tuple[str, str], Ceilings] = {}


def ceilings(device: str, dtype: torch.dtype,
             progress: Callable[[float, str], None] | None = None) -> Ceilings:
    """Measured ceilings of `device` in `dtype`; measured at most once per process."""
    key = (device, str(dtype))
    with _lock:
        if key not in _ceilings:
            _ceilings[key] = measure_ceilings(device, dtype, progress=progress)
        return _ceilings[key]


def known(device: str, dtype: torch.dtype) -> bool:
    """Whether this process already holds the ceilings (so nothing needs measuring)."""
    return (device, str(dtype)) in _ceilings


class Annotator:
    """Annotate forwards of one pair in place; a forward is annotated once (bound != "")."""

    def __init__(self, pair, ceilings: Ceilings):
        self.ceilings = ceilings
        self.dtype_bytes = torch.empty((), dtype=pair.dtype).element_size()
        self.configs = {name: model.config.to_dict()  # a dict: the cost model reads it as is
                        for name, model in (("target", pair.target), ("draft", pair.draft))
                        if model is not None}

    def trace(self, trace) -> None:
        """Annotate every forward of a Trace (baseline included) and, once the run has a
        summary, its FLOPs (the engine sums them before the forwards are costed)."""
        self(trace.all_forwards())
        if trace.summary is not None:
            trace.summary.flops = sum(f.flops for f in trace.forwards())

    def __call__(self, forwards: Iterable[ForwardTiming]) -> None:
        for f in forwards:
            config = self.configs.get(f.model)
            if f.bound or config is None or f.seconds <= 0:
                continue
            annotate(f, config, self.dtype_bytes, self.ceilings)
