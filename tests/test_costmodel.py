"""The cost model against torch's own FLOP counter on real forwards of tiny models.

What FlopCounterMode counts (torch 2.13): aten.mm / addmm / bmm and the CUDA SDPA kernels. On
CPU, SDPA dispatches to `_scaled_dot_product_flash_attention_for_cpu`, which has no FLOP formula,
so with attn_implementation="sdpa" the counter sees the linear layers only. Like with like:
with "eager" attention the score and value matmuls are `bmm`s, so the counter's total is
compared with cost.flops (linear + attention) and its mm/addmm part with cost.linear_flops.
"""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma3TextConfig, GemmaConfig,
                          GPT2Config, GPTNeoXConfig, LlamaConfig, MistralConfig, Qwen2Config)

from app.costmodel import dims, forward_cost, param_count

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=160, vocab_size=300, max_position_embeddings=128)
CONFIGS = {
    "llama": lambda: LlamaConfig(**SMALL),
    "llama-tied": lambda: LlamaConfig(**SMALL, tie_word_embeddings=True),
    "qwen2": lambda: Qwen2Config(**SMALL),
    "mistral": lambda: MistralConfig(**SMALL),
    "gemma": lambda: GemmaConfig(**SMALL, head_dim=32),
    "gemma2": lambda: Gemma2Config(**SMALL, head_dim=32),
    "gemma3": lambda: Gemma3TextConfig(**SMALL, head_dim=32),
    "gpt2": lambda: GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=300, n_positions=128,
                               bos_token_id=0, eos_token_id=0),
    "gpt_neox": lambda: GPTNeoXConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=256, vocab_size=300,
                                      max_position_embeddings=128),
}
PASSES = [(1, 1, 0), (1, 1, 24), (2, 3, 5), (1, 8, 16), (3, 4, 0)]  # (batch, q, kv_len)


def build(name, attn="eager"):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(CONFIGS[name](), attn_implementation=attn).eval()


def _model_pass(model, input_ids, cache) -> None:
    model(input_ids=input_ids, cache=cache, use_cache=True)


@torch.inference_mode()
def counted_flops(model, batch, q, kv_len, run=_model_pass) -> tuple[int, int]:
    """(total, linear-only) FLOPs torch counts for a q-token pass run(model, ids, cache) over a
    kv_len cache (default: the model's own forward)."""
    from transformers import DynamicCache

    vocab = model.config.vocab_size
    cache = DynamicCache()
    if kv_len:
        _model_pass(model, torch.randint(0, vocab, (batch, kv_len)), cache)
    counter = FlopCounterMode(display=False)
    with counter:
        run(model, torch.randint(0, vocab, (batch, q)), cache)
    ops = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    return counter.get_total_flops(), ops.get("aten.mm", 0) + ops.get("aten.addmm", 0)


@pytest.mark.parametrize("name", ["llama", "qwen2", "gpt2", "gpt_neox"])
def test_flops_match_flop_counter(name):
    model = build(name)
    for batch, q, kv_len in PASSES:
        total, linear = counted_flops(model, batch, q, kv_len)
        cost = forward_cost(model.config, batch, q, kv_len, dtype_bytes=4)
        assert cost.flops == pytest.approx(total, rel=0.05), (batch, q, kv_len)
        assert cost.linear_flops == pytest.approx(linear, rel=0.05), (batch, q, kv_len)
        assert cost.attention_flops == pytest.approx(total - linear, rel=0.05), (batch, q, kv_len)


@pytest.mark.parametrize("name", ["llama", "llama-tied", "qwen2", "gpt2", "gpt_neox"])
def test_a_pass_without_logits_is_priced_without_the_head(name):
    """app.models.fill_cache (a prefill that only fills the cache): torch's counter sees no
    lm_head product, and the cost model leaves out its FLOPs, its matrix and the logits."""
    from app.models import fill_cache
    model, d = build(name), dims(CONFIGS[name]())
    for batch, q, kv_len in PASSES:
        total, _ = counted_flops(model, batch, q, kv_len, run=fill_cache)
        full, bare = (forward_cost(model.config, batch, q, kv_len, 4, logits=x) for x in (True, False))
        assert bare.flops == pytest.approx(total, rel=0.05), (batch, q, kv_len)
        assert full.linear_flops - bare.linear_flops == 2 * batch * q * d.hidden * d.vocab
        assert full.weights_bytes - bare.weights_bytes == 4 * d.hidden * d.vocab
        assert full.activation_bytes - bare.activation_bytes == 4 * batch * q * d.vocab
        assert bare.kv_read_bytes == full.kv_read_bytes and bare.kv_write_bytes == full.kv_write_bytes


def test_sdpa_on_cpu_counts_linear_layers_only():
    """Documents the counter's blind spot that the comparison above avoids."""
    total, linear = counted_flops(build("llama", attn="sdpa"), 2, 3, 5)
    cost = forward_cost(CONFIGS["llama"](), 2, 3, 5, 4)
    assert total == linear == pytest.approx(cost.linear_flops, rel=0.05)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_param_count_matches_instantiated_model(name):
    model = build(name)
    real = sum(p.numel() for p in model.parameters())  # tied weights counted once
    assert param_count(model.config) == pytest.approx(real, rel=0.01)


def test_dict_config_equals_object_config():
    cfg = CONFIGS["qwen2"]()
    as_dict = cfg.to_dict()
    assert param_count(as_dict) == param_count(cfg)
    assert forward_cost(as_dict, 2, 3, 7, 2) == forward_cost(cfg, 2, 3, 7, 2)


def test_gemma_head_dim_is_read_not_derived():
    d = dims(CONFIGS["gemma"]())
    assert d.head_dim == 32 and d.heads * d.head_dim == 128 != d.hidden and d.gated
    assert not dims(CONFIGS["gpt2"]()).gated and dims(CONFIGS["gpt2"]()).positions == 128


def test_weights_bytes_read_every_parameter_once_at_decode():
    """q = 1, batch = 1: all non-embedding weights + the full lm_head + one embedding row."""
    for name, tied in (("llama", False), ("llama-tied", True)):
        cfg = CONFIGS[name]()
        hidden, vocab = 64, 300
        non_embedding = param_count(cfg) - vocab * hidden * (1 if tied else 2)
        cost = forward_cost(cfg, 1, 1, 0, 2)
        assert cost.weights_bytes == 2 * (non_embedding + vocab * hidden + hidden)


def test_kv_and_activation_bytes_scale_as_documented():
    cfg = CONFIGS["llama"]()  # 2 layers, 2 kv heads of 16
    kv_row = 2 * 2 * 2 * 16  # layers * (K, V) * kv_heads * head_dim
    a, b = forward_cost(cfg, 2, 3, 10, 2), forward_cost(cfg, 2, 3, 20, 2)
    assert a.kv_read_bytes == 2 * 10 * kv_row * 2 and b.kv_read_bytes == 2 * a.kv_read_bytes
    assert a.kv_write_bytes == 2 * 3 * kv_row * 2 == b.kv_write_bytes
    assert forward_cost(cfg, 4, 3, 10, 2).activation_bytes == 2 * a.activation_bytes
    assert forward_cost(cfg, 2, 3, 10, 4).bytes == 2 * a.bytes
    assert a.bytes == a.weights_bytes + a.kv_read_bytes + a.kv_write_bytes + a.activation_bytes
    assert a.intensity == a.flops / a.bytes


def test_intensity_grows_with_tokens_per_pass():
    """Decode of a big model: ~2 FLOPs per weight per token over 2 bytes per weight (bf16)."""
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 128256, "tie_word_embeddings": False}
    one, many = forward_cost(cfg, 1, 1, 0, 2), forward_cost(cfg, 1, 64, 0, 2)
    assert one.intensity == pytest.approx(1.0, rel=0.02)
    assert many.intensity == pytest.approx(64.0, rel=0.05)
