"""Classification rules on synthetic timings, and the H200 anchors replayed through them."""
import pytest

from app.costmodel import forward_cost
from app.hardware import Ceilings
from app.roofline import BOUNDS, OVERHEAD_FACTOR, annotate, ceilings_warning, classify, forwards_warning
from app.shapes import load_shape_config
from app.trace import ForwardTiming

# Ridge 10 FLOP/B: 1 TFLOP/s matmul, 100 GB/s copy. Datasheet numbers deliberately different.
CEIL = Ceilings("cpu", "test", "float32", measured_flops_per_s=1e12, measured_bytes_per_s=1e11,
                datasheet_flops_per_s=1e15, datasheet_bytes_per_s=1e10, datasheet_source="made up")
# Measured on an H200 (shared/anchors/h200_lean_graph.log): copy 4.19 TB/s, matmul 783 TFLOP/s.
H200 = Ceilings("cuda", "NVIDIA H200", "bfloat16", 783e12, 4.19e12, 989e12, 4.8e12, "datasheet")


def test_memory_bound_near_the_memory_floor():
    p = classify(0.012, flops=1e9, bytes=1e9, ceilings=CEIL)  # floors: 10 ms memory, 1 ms compute
    assert p.bound == "memory"
    assert p.memory_floor_s == pytest.approx(0.01) and p.compute_floor_s == pytest.approx(0.001)
    assert p.ratio_to_floor == pytest.approx(1.2) and p.intensity == pytest.approx(1.0)
    assert p.achieved_bytes_per_s == pytest.approx(1e9 / 0.012)


def test_compute_bound_near_the_compute_floor():
    p = classify(1.5, flops=1e12, bytes=1e9, ceilings=CEIL)  # floors: 10 ms memory, 1 s compute
    assert p.bound == "compute" and p.ratio_to_floor == pytest.approx(1.5)
    assert p.achieved_flops_per_s == pytest.approx(1e12 / 1.5)


def test_overhead_bound_far_above_both_floors():
    assert classify(0.05, 1e9, 1e9, CEIL).bound == "overhead"  # 5x the memory floor
    assert classify(10.0, 1e12, 1e9, CEIL).bound == "overhead"  # 10x the compute floor


def test_overhead_threshold_is_strict_and_configurable():
    floor = 0.01
    assert classify(OVERHEAD_FACTOR * floor, 1e9, 1e9, CEIL).bound == "memory"
    assert classify(OVERHEAD_FACTOR * floor * 1.01, 1e9, 1e9, CEIL).bound == "overhead"
    assert classify(0.05, 1e9, 1e9, CEIL, overhead_factor=10).bound == "memory"


def test_classification_uses_measured_not_datasheet_ceilings():
    """By the datasheet (ridge 1e5) this pass would be memory-bound with a 100 ms floor;
    by the measured ceilings (ridge 10) it is compute-bound with a 1 s floor."""
    p = classify(1.2, flops=1e12, bytes=1e9, ceilings=CEIL)
    assert p.bound == "compute" and p.compute_floor_s == pytest.approx(1.0)


def test_rejects_nonpositive_inputs():
    with pytest.raises(ValueError):
        classify(0.0, 1e9, 1e9, CEIL)
    with pytest.raises(ValueError):
        classify(1.0, 1e9, 0.0, CEIL)


@pytest.mark.parametrize("q, ms, bound", [
    (1, 21.628, "overhead"),  # transformers eager, h200_hf_eager.log
    (64, 41.793, "overhead"),
    (1, 5.179, "memory"),  # lean decoder as a CUDA graph, h200_lean_graph.log
    (64, 6.709, "memory"),
    (1024, 28.499, "compute"),
])
def test_h200_anchors_8b(q, ms, bound):
    cfg = load_shape_config("llama-3.1-8b")
    cost = forward_cost(cfg, 1, q, 512, dtype_bytes=2)
    assert classify(ms / 1e3, cost.flops, cost.bytes, H200).bound == bound


def test_annotate_fills_the_forward_in_place():
    cfg = load_shape_config("llama-3.1-8b")
    fwd = ForwardTiming(model="target", phase="verify", batch=1, tokens=5, kv_len=512, seconds=0.0063)
    placement = annotate(fwd, cfg, 2, H200)
    cost = forward_cost(cfg, 1, 5, 512, 2)
    assert (fwd.flops, fwd.bytes) == (cost.flops, cost.bytes)
    assert fwd.bound == placement.bound == "memory" and fwd.bound in BOUNDS
    assert set(placement.to_dict()) == {"intensity", "achieved_flops_per_s", "achieved_bytes_per_s",
                                        "memory_floor_s", "compute_floor_s", "bound", "ratio_to_floor"}


def test_passes_under_their_floor_say_the_ceilings_are_too_low():
    """A pass cannot beat its floor; one that does (ratio < BELOW_ROOF) means the ceilings were
    measured low (a busy machine, then cached)."""
    import dataclasses
    assert ceilings_warning([1.0, 2.5, 0.85]) is None and ceilings_warning([]) is None
    message = ceilings_warning([1.2, 0.53])
    assert "0.53x its floor" in message and "python -m app roofline --refresh" in message
    cfg = load_shape_config("llama-3.1-8b")
    fwd = ForwardTiming(model="target", phase="verify", batch=1, tokens=5, kv_len=512, seconds=0.0063)
    annotate(fwd, cfg, 2, H200)  # the H200 anchor: 1.7x its memory floor
    assert forwards_warning([fwd], H200) is None
    low = dataclasses.replace(H200, measured_bytes_per_s=H200.measured_bytes_per_s / 4)
    assert "too low" in forwards_warning([fwd], low)


@pytest.fixture
def tiny_sizes(tmp_path, monkeypatch):
    from app import hardware
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(hardware.SIZES, "cpu", (1 << 20, 64, 0.02))


def test_cli_roofline_prints_and_writes_ceilings(tiny_sizes, tmp_path, capsys):
    import json

    from app.cli import main
    out = tmp_path / "r.json"
    assert main(["roofline", "--device", "cpu", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "measured" in text and "ridge" in text
    data = json.loads(out.read_text())
    assert data["ceilings"]["device"] == "cpu" and data["ceilings"]["measured"]["flops_per_s"] > 0
    assert data["placements"] == []


@pytest.mark.parametrize("argv", [["roofline", "--device", "tpu"], ["roofline", "--dtype", "int3"],
                                  ["knee", "--model", "no-such-model", "--device", "cpu"]])
def test_cli_errors_are_one_line_without_traceback(tiny_sizes, argv, capsys):
    from app.cli import main
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and not any("Traceback" in line for line in err)
