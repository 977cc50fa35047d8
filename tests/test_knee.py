"""The knee on a tiny model: the requested pass sizes, positive floors, a correct cache."""
import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from app import knee
from app.hardware import Ceilings
from app.knee import KneeRow, default_qs, find_bend, measure_knee, time_forward
from app.roofline import BOUNDS

CEIL = Ceilings("cpu", "test", "float32", measured_flops_per_s=5e10, measured_bytes_per_s=1e10)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, vocab_size=100,
                      max_position_embeddings=128)
    return LlamaForCausalLM(cfg).eval()


pytestmark = pytest.mark.usefixtures("one_thread")


def test_knee_returns_exactly_the_requested_passes(tiny):
    calls = []
    result = measure_knee(tiny, tiny.config, device="cpu", dtype=torch.float32, ceilings=CEIL,
                          qs=(1, 2, 4, 8), batches=(1, 3), kv_len=6, repeats=2, gamma=2,
                          progress=lambda f, m: calls.append(f))
    assert [(r.batch, r.q) for r in result.rows] == [(1, 1), (1, 2), (1, 4), (1, 8)]
    assert [(r.batch, r.q) for r in result.batch_rows] == [(1, 1), (1, 3), (3, 1), (3, 3)]
    for row in result.rows + result.batch_rows:
        assert row.seconds > 0 and row.memory_floor_s > 0 and row.compute_floor_s > 0
        assert row.kv_len == 6 and row.bound in BOUNDS
    assert result.rows[3].memory_floor_s > result.rows[0].memory_floor_s  # more KV/activations
    assert result.rows[3].compute_floor_s == pytest.approx(8 * result.rows[0].compute_floor_s, rel=0.2)
    assert len(calls) == 8 and calls[-1] == 1.0
    d = json.loads(json.dumps(result.to_dict()))  # plain values only
    assert d["rows"][2]["q"] == 4 and d["ceilings"]["measured"]["bytes_per_s"] == 1e10
    assert result.relative()[0] == 1.0


def test_every_timed_pass_sees_exactly_kv_len_cached_tokens(tiny, monkeypatch):
    seen = []
    real_forward = tiny.forward

    def spy(*args, cache=None, **kwargs):
        seen.append(cache.get_seq_length())
        return real_forward(*args, cache=cache, **kwargs)
    monkeypatch.setattr(tiny, "forward", spy)
    time_forward(tiny, device="cpu", batch=2, q=3, kv_len=5, repeats=3)
    assert seen == [0, 5, 5, 5, 5]  # prefill, warm-up, three timed passes


def _rows(times):
    return [KneeRow(1, q, 0, t, 1.0, 1.0, "memory", 1.0, 1.0, 1.0)
            for q, t in zip((1, 2, 4, 8, 16), times)]


def test_find_bend():
    assert find_bend(_rows([1.0, 1.1, 1.4, 1.6, 3.0])) == 8
    assert find_bend(_rows([1.0, 1.0, 1.0, 1.5, 1.5])) is None  # 1.5 is not above 1.5
    assert find_bend(_rows([1.0, 2.0, 1.0, 1.0, 1.0])) == 2
    assert find_bend(_rows([1.0, 1.1, 1.4, 1.6, 3.0]), ratio=2.0) == 16


def test_default_qs_go_past_the_ridge():
    h200 = Ceilings("cuda", "H200", "bfloat16", 775e12, 4.2e12)  # ridge ~185 tokens at bf16
    qs = default_qs(h200, dtype_bytes=2)
    assert qs[0] == 1 and 512 in qs and qs[-1] <= 1024
    assert all(b == 2 * a for a, b in zip(qs, qs[1:]))
    cpu = Ceilings("cpu", "cpu", "float32", 8e10, 1.7e10)  # ridge ~9 tokens at fp32
    assert default_qs(cpu, dtype_bytes=4)[-1] == 32


def test_bend_ratio_documented_value():
    assert knee.BEND_RATIO == 1.5


def test_cli_knee_on_a_local_model_directory(tiny, tmp_path, monkeypatch, capsys):
    from app import hardware
    from app.cli import main
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(hardware.SIZES, "cpu", (1 << 20, 64, 0.02))
    tiny.save_pretrained(tmp_path / "model")
    out = tmp_path / "knee.json"
    argv = ["knee", "--model", str(tmp_path / "model"), "--device", "cpu", "--fast", "--qs", "1,2,4",
            "--kv-len", "4", "--repeats", "1", "--json", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "lean decoder" in text and "bend" in text and "eager/fast" in text
    data = json.loads(out.read_text())
    assert [r["q"] for r in data["rows"]] == [1, 2, 4] and data["kv_len"] == 4
    assert data["fast"]["fast"] is True and [r["q"] for r in data["fast"]["rows"]] == [1, 2, 4]
    assert [(r["batch"], r["q"]) for r in data["batch_rows"]] == [(1, 1), (1, 5)]


def test_knee_refuses_passes_longer_than_the_model(tiny):
    with pytest.raises(ValueError, match="exceeds"):
        measure_knee(tiny, tiny.config, device="cpu", dtype=torch.float32, ceilings=CEIL,
                     qs=(1, 64), kv_len=100, repeats=1)
