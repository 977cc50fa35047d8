"""Device detection, the datasheet table and the cached microbenchmarks (CPU, tiny sizes)."""
import json
import math

import pytest
import torch

from app import hardware
from app.hardware import (DATASHEET, Ceilings, detect_device, device_info, lookup_datasheet,
                          measure_ceilings, parse_dtype)

TINY = {"copy_bytes": 1 << 20, "matmul_n": 64, "budget_s": 0.02}


def test_detect_device_auto_and_cpu():
    expected = "cuda" if torch.cuda.is_available() else (
        "mps" if torch.backends.mps.is_available() else "cpu")
    assert detect_device() == expected
    assert detect_device("auto") == expected
    assert detect_device("CPU") == "cpu"


@pytest.mark.parametrize("name", ["tpu", "gpu", "cpu:0", "mps:1", ""])
def test_detect_device_rejects_unknown(name):
    if name == "":
        assert detect_device(name) in ("cuda", "mps", "cpu")  # empty means auto
        return
    with pytest.raises(ValueError, match="unknown device"):
        detect_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_detect_device_unavailable_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="not available"):
        detect_device("cuda")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_detect_device_unavailable_mps_is_a_clear_error():
    with pytest.raises(ValueError, match="not available"):
        detect_device("mps")


def test_device_info_cpu():
    info = device_info("cpu")
    assert isinstance(info["name"], str) and info["name"]
    assert isinstance(info["cores"], int) and info["cores"] >= 1


@pytest.mark.parametrize("device_name, row", [
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA A10G", "A10G"), ("NVIDIA A10", "A10"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4"), ("Tesla T4", "T4"),
    ("Apple M1", "Apple M1"), ("Apple M1 Pro", "Apple M1 Pro"), ("Apple M2 Max", "Apple M2 Max"),
    ("Apple M3 Pro", "Apple M3 Pro"), ("Apple M4", "Apple M4"),
    ("AMD EPYC", "CPU (generic)"), ("Intel(R) Xeon(R) Platinum 8375C CPU", "CPU (generic)"),
])
def test_lookup_datasheet_picks_the_specific_row(device_name, row):
    assert lookup_datasheet(device_name).name == row


def test_lookup_datasheet_unknown_gpu_is_none():
    assert lookup_datasheet("NVIDIA GeForce RTX 4090") is None


def test_datasheet_matches_design_table():
    h200, h100, a100 = (lookup_datasheet(n) for n in ("H200", "H100 SXM5", "A100-SXM4-80GB"))
    assert (h200.half_flops_per_s, h200.bytes_per_s) == (989e12, 4.8e12)
    assert (h100.half_flops_per_s, h100.bytes_per_s) == (989e12, 3.35e12)
    assert (a100.half_flops_per_s, a100.bytes_per_s) == (312e12, 2.039e12)
    t4 = lookup_datasheet("Tesla T4")
    assert t4.flops_for(torch.float16) == 65e12 and t4.flops_for(torch.bfloat16) is None
    assert h200.flops_for(torch.float32) == 67e12


def test_every_datasheet_number_is_positive_and_sourced():
    for row in DATASHEET:
        assert row.source, row.name
        for value in (row.half_flops_per_s, row.fp32_flops_per_s, row.bytes_per_s):
            assert value is None or value > 0, row.name
        if row.half_flops_per_s and row.fp32_flops_per_s:
            assert row.half_flops_per_s >= row.fp32_flops_per_s, row.name


def test_parse_dtype():
    assert parse_dtype("bf16") is torch.bfloat16 and parse_dtype("float16") is torch.float16
    assert parse_dtype(torch.float32) is torch.float32
    with pytest.raises(ValueError, match="unknown dtype"):
        parse_dtype("int3")


def test_measure_ceilings_positive_cached_and_refreshable(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(tmp_path))
    seen = []
    first = measure_ceilings("cpu", "fp32", progress=lambda f, m: seen.append(f), **TINY)
    for value in (first.measured_flops_per_s, first.measured_bytes_per_s):
        assert math.isfinite(value) and value > 0
    assert seen[0] == 0.0 and seen[-1] == 1.0
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["matmul_n"] == 64

    def boom(*a, **k):
        raise AssertionError("re-measured despite the cache")
    monkeypatch.setattr(hardware, "measure_bandwidth", boom)
    monkeypatch.setattr(hardware, "measure_matmul", boom)
    again = measure_ceilings("cpu", "fp32", **TINY)
    assert again.measured_flops_per_s == first.measured_flops_per_s
    assert again.measured_bytes_per_s == first.measured_bytes_per_s

    monkeypatch.setattr(hardware, "measure_bandwidth", lambda *a: 123.0)
    monkeypatch.setattr(hardware, "measure_matmul", lambda *a: 456.0)
    fresh = measure_ceilings("cpu", "fp32", refresh=True, **TINY)
    assert (fresh.measured_bytes_per_s, fresh.measured_flops_per_s) == (123.0, 456.0)
    other_dtype = measure_ceilings("cpu", "bf16", **TINY)  # another key: measured (patched)
    assert other_dtype.dtype == "bfloat16" and len(list(tmp_path.glob("*.json"))) == 2


def test_measurements_count_read_plus_write_bytes_and_2n3_flops(monkeypatch):
    """With every timed call taking exactly 1 s, the rates are the counted bytes and FLOPs."""
    monkeypatch.setattr(hardware, "_best_time", lambda fn, device, budget: (fn(), 1.0)[1])
    assert hardware.measure_bandwidth("cpu", torch.float32, 1 << 20, 0.02) == 2 * (1 << 20)
    assert hardware.measure_bandwidth("cpu", torch.bfloat16, 1 << 20, 0.02) == 2 * (1 << 20)
    assert hardware.measure_matmul("cpu", torch.float32, 64, 0.02) == 2 * 64 ** 3


def test_ceilings_to_dict_exact_keys_and_ridge():
    c = Ceilings("cuda", "NVIDIA H200", "bfloat16", 775e12, 4.2e12, 989e12, 4.8e12, "NVIDIA H200 datasheet")
    d = c.to_dict()
    assert set(d) == {"device", "device_name", "dtype", "measured", "datasheet"}
    assert d["measured"] == {"flops_per_s": 775e12, "bytes_per_s": 4.2e12}
    assert d["datasheet"] == {"flops_per_s": 989e12, "bytes_per_s": 4.8e12, "source": "NVIDIA H200 datasheet"}
    assert c.ridge == pytest.approx(775 / 4.2) and c.datasheet_ridge == pytest.approx(989 / 4.8)
    json.dumps(d)
    cpu = Ceilings("cpu", "AMD EPYC", "float32", 8e10, 1.7e10, None, None, "none")
    assert cpu.to_dict()["datasheet"] is None


def test_cpu_cache_is_keyed_by_thread_count(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(hardware, "measure_bandwidth", lambda *a: 1.0)
    monkeypatch.setattr(hardware, "measure_matmul", lambda *a: 2.0)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            measure_ceilings("cpu", "fp32", **TINY)
    finally:
        torch.set_num_threads(before)
    assert sorted(p.name.split("-")[-1] for p in tmp_path.glob("*.json")) == ["1threads.json", "2threads.json"]
