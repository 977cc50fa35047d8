"""Stale ceilings: cached per thread count, best of several runs, re-measured when a pass beats
its floor (CPU, tiny sizes; no assertion on a timing beyond orders of magnitude)."""
import json
import time
from types import SimpleNamespace

import pytest
import torch

from app import annotate, hardware
from app.annotate import Annotator
from app.hardware import measure_ceilings
from app.costmodel import forward_cost
from app.roofline import floors
from app.shapes import load_shape_config
from app.trace import ForwardTiming

CONFIG = load_shape_config("llama-3.1-8b")  # a shape: no weights, only its config
PAIR = SimpleNamespace(dtype=torch.float32, target=SimpleNamespace(config=CONFIG), draft=None)


def _pass(seconds_at: float, ceilings) -> ForwardTiming:
    """A one-token decode pass of the 8B shape that took `seconds_at` times its floor under
    `ceilings` (not yet annotated)."""
    cost = forward_cost(CONFIG.to_dict(), 1, 1, 64, 4)
    seconds = seconds_at * max(floors(cost.flops, cost.bytes, ceilings))
    return ForwardTiming(model="target", phase="decode", batch=1, tokens=1, kv_len=64, seconds=seconds)


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A fresh disk cache, no ceilings held by this process, tiny default sizes, one torch
    thread (on a loaded machine a tiny op on two threads waits for the second one to be
    scheduled: milliseconds instead of microseconds)."""
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(annotate, "_ceilings", {})
    monkeypatch.setitem(hardware.SIZES, "cpu", (1 << 20, 64, 0.02))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tmp_path
    torch.set_num_threads(before)


def test_cache_key_includes_threads(tiny):
    """Two thread counts -> two measurements, two cache files: on a CPU the thread count changes
    both rates, so ceilings measured at one count must not serve another (in this process too)."""
    for threads in (1, 2):
        torch.set_num_threads(threads)  # the fixture restores the count
        annotate.ceilings("cpu", torch.float32)
    names = sorted(p.name for p in tiny.glob("*.json"))
    assert len(names) == 2, names
    assert names[0].endswith("-1threads.json") and names[1].endswith("-2threads.json")


def test_cached_ceilings_too_low_are_remeasured_and_passes_reclassified(tiny):
    """A cache file written with 100x too low ceilings (a busy machine) puts a pass far under its
    floor; annotating it re-measures the ceilings once, rewrites the cache and re-classifies."""
    real = measure_ceilings("cpu", "fp32")
    (path,) = tiny.glob("*.json")
    data = json.loads(path.read_text())
    data["measured_bytes_per_s"] /= 100
    data["measured_flops_per_s"] /= 100
    path.write_text(json.dumps(data))
    stale = annotate.ceilings("cpu", torch.float32)
    assert stale.measured_bytes_per_s < real.measured_bytes_per_s / 50  # served from the cache

    fwd = _pass(seconds_at=30, ceilings=real)  # 30x its real floor: overhead

    seen = []
    annotator = Annotator(PAIR, stale, progress=lambda f, m: seen.append(m))
    annotator([fwd])
    assert fwd.bound == "memory"  # 0.3x the stale floor: wrongly memory-bound
    note = annotator.settle([fwd])
    assert fwd.bound == "overhead"  # re-classified with the re-measured ceilings
    assert annotator.ceilings.measured_bytes_per_s > 10 * stale.measured_bytes_per_s
    assert "re-measured" in note and seen  # said so, with progress
    cached = json.loads(path.read_text())["measured_bytes_per_s"]
    assert cached > 10 * stale.measured_bytes_per_s  # the cache holds the new ceilings
    assert annotate.ceilings("cpu", torch.float32) is annotator.ceilings  # and so does the process

    assert annotator.settle([fwd]) is None  # at or above the roof now: nothing to say


def test_remeasured_at_most_once_and_impossible_timing_said_plainly(tiny):
    """A pass that stays under its floor after the re-measure is not a reason to measure again:
    the run says plainly that the timing is impossible."""
    ceilings = measure_ceilings("cpu", "fp32")
    fwd = _pass(seconds_at=1e-4, ceilings=ceilings)  # no re-measure can fix this one
    said = []
    annotator = Annotator(PAIR, ceilings, progress=lambda f, m: said.append(m))
    annotator([fwd])
    first = annotator.settle([fwd])
    second = annotator.settle([fwd])
    assert sum(m.startswith("measuring copy bandwidth") for m in said) == 1  # once per run
    for note in (first, second):
        assert note.startswith("impossible timing: pass faster than the measured memory ceiling allows")
        assert "0.00x its floor" in note


def test_best_of_several_runs_ignores_a_slow_start():
    """The machine is busy for the first calls (warm-up, sizing call and first timed run: each
    sleeps longer than the whole budget); the best of the runs is still the quiet rate."""
    calls = []

    def fn():
        calls.append(None)
        if len(calls) <= 3:
            time.sleep(0.05)

    seconds = hardware._best_time(fn, "cpu", budget_s=0.02)
    assert seconds < 0.005  # the quiet call (microseconds), not the 50 ms sleep
    assert hardware.REPEATS >= 3


def test_cache_written_by_fewer_repeats_is_measured_again(tiny):
    """A cache entry says how many runs its best came from; one from another count is stale."""
    measure_ceilings("cpu", "fp32")
    (path,) = tiny.glob("*.json")
    data = json.loads(path.read_text())
    assert data["repeats"] == hardware.REPEATS
    data["repeats"], data["measured_bytes_per_s"] = 1, 1.0
    path.write_text(json.dumps(data))
    assert measure_ceilings("cpu", "fp32").measured_bytes_per_s > 1.0


def test_cli_roofline_remeasures_stale_ceilings_before_placing_passes(tiny, capsys):
    """`python -m app roofline --model`: ceilings cached absurdly low (1 kB/s) put every pass
    under its floor; the command measures them again and places the passes with the new ones."""
    from app.cli import main
    measure_ceilings("cpu", "fp32")
    (path,) = tiny.glob("*.json")
    data = json.loads(path.read_text())
    data["measured_bytes_per_s"] = data["measured_flops_per_s"] = 1e3
    path.write_text(json.dumps(data))
    out = tiny / "out" / "r.json"
    out.parent.mkdir()
    assert main(["roofline", "--device", "cpu", "--model", "tiny-draft", "--json", str(out)]) == 0
    assert "re-measuring them" in capsys.readouterr().err  # progress, on stderr
    result = json.loads(out.read_text())
    bandwidth = result["ceilings"]["measured"]["bytes_per_s"]
    assert bandwidth > 1e6 and json.loads(path.read_text())["measured_bytes_per_s"] == bandwidth
    for p in result["placements"]:  # floors from the new ceilings: bytes / bandwidth
        assert p["memory_floor_s"] == pytest.approx(p["achieved_bytes_per_s"] * p["seconds"] / bandwidth)
