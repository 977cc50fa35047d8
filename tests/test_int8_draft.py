"""An int8 draft (app.lean.Int8Weight, --draft-int8): a quarter of the draft's weight bytes on
the CPU fast path. It is another draft, so its q differs a little from the fp32 draft's; the
output must still be exactly the target's (greedy: token for token; sampled: by Leviathan et
al.'s Theorem 1, tested statistically for any q in tests/test_speculative.py)."""
import pytest
import torch

from app import validation
from app.engine import DecodeSettings, autoregressive_generate, speculative_generate
from app.lean import Int8Weight, LeanModel, linear
from app.models import new_cache
from app.roofline import annotate
from app.trace import ForwardTiming
from app.validation import InputError

PROMPT = "It is a truth universally acknowledged, that"


def test_int8_weight_rounds_each_row_to_half_a_step():
    torch.manual_seed(0)
    w = torch.randn(48, 32) * torch.linspace(0.1, 3, 48)[:, None]  # rows of different scales
    q = Int8Weight.of(w)
    assert q.data.dtype == torch.int8 and q.data.shape == (48, 32) and q.scale.shape == (48,)
    back = q.data.float() * q.scale.float()[:, None]
    step = w.abs().amax(1, keepdim=True) / 127
    assert ((back - w).abs() <= step * 0.51).all()  # half a step (the scale is a bf16 a little above it)
    x = torch.randn(3, 5, 32)
    assert linear(x, q).shape == (3, 5, 48)
    y, exact = linear(x, q), x @ back.T
    assert (y - exact).abs().max() <= 0.01 * exact.abs().max()  # bf16 activations: ~0.3% here


def test_int8_draft_logits_stay_close_to_the_fp32_drafts(tiny_pair):
    ids = torch.tensor([tiny_pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])
    full, small = LeanModel(tiny_pair.draft), LeanModel(tiny_pair.draft, int8=True)
    p = full(ids, full.new_cache(1, 64)).softmax(-1)
    q = small(ids, small.new_cache(1, 64)).softmax(-1)
    overlap = torch.minimum(p, q).sum(-1)  # [1, n]: 1 - total variation distance
    assert overlap.min() > 0.9 and not torch.equal(p, q)


@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_output_is_the_targets_token_for_token(tiny_pair, gamma):
    settings = DecodeSettings(gamma=gamma, max_new_tokens=40, fast=True, draft_int8=True)
    ids = tiny_pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    events = list(speculative_generate(tiny_pair, ids, settings))
    plain = [t for e in autoregressive_generate(tiny_pair, ids, DecodeSettings(max_new_tokens=40)) for t in e.emitted_ids]
    assert [t for e in events for t in e.emitted_ids] == plain
    drafts = [f for e in events for f in e.forwards if f.model == "draft"]
    assert drafts and all(f.weights == "int8" for f in drafts)
    assert all(f.weights == "" for e in events for f in e.forwards if f.model == "target")


def test_roofline_prices_int8_weights_at_one_byte(tiny_pair):
    from app.hardware import Ceilings
    ceilings = Ceilings(device="cpu", device_name="test", dtype="float32",
                        measured_flops_per_s=1e11, measured_bytes_per_s=1e10)
    config = tiny_pair.draft.config.to_dict()
    plain = ForwardTiming("draft", "draft", 1, 1, 10, 1e-3)
    int8 = ForwardTiming("draft", "draft", 1, 1, 10, 1e-3, weights="int8")
    annotate(plain, config, 4, ceilings), annotate(int8, config, 4, ceilings)
    params = tiny_pair.draft.num_parameters()
    assert plain.bytes - int8.bytes == pytest.approx(3 * params, rel=0.1)  # 4 -> 1 byte a weight


def test_int8_without_the_fast_path_is_refused_with_a_message(tiny_pair):
    with pytest.raises(InputError, match="fast path"):
        validation.settings(draft_int8=True)
    assert validation.settings(draft_int8=True, fast=True, drafter="ngram").draft_int8 is False
    with pytest.raises(ValueError, match="fast path"):
        new_cache(tiny_pair.draft, None, int8=True)


def test_int8_where_the_lean_decoder_does_not_run_is_a_clear_error(tiny_pair, monkeypatch):
    """CUDA, MPS or an architecture app.lean does not cover: the static-cache fast path has no
    int8 weights, and the run stops with a message instead of silently using fp32."""
    from app import lean
    monkeypatch.setattr(lean, "supports", lambda config: False)
    settings = DecodeSettings(gamma=2, max_new_tokens=4, fast=True, draft_int8=True)
    with pytest.raises(ValueError, match="lean decoder only"):
        list(speculative_generate(tiny_pair, [1, 2, 3], settings))


def test_cli_refuses_int8_where_the_lean_decoder_does_not_run(tiny_dirs, monkeypatch, capsys):
    from app import lean
    from app.cli import main
    monkeypatch.setattr(lean, "supports", lambda config: False)
    code = main(["generate", "--prompt", PROMPT, "--max-new-tokens", "4", "--target", tiny_dirs[0],
                 "--draft", tiny_dirs[1], "--device", "cpu", "--fast", "--draft-int8"])
    assert code == 2 and "lean decoder only" in capsys.readouterr().err


def test_stacked_int8_projections_are_the_separate_products():
    """int8 layers stack q/k/v and gate/up into one product each (_Layer.to_int8): per-row scales
    make that the same model, so the logits equal, to the bit, those of separate Int8Weight
    products. A Qwen2 shape: grouped kv heads and q/k/v biases."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0, 0.1 if name.endswith("bias") else 0.15)
    stacked, apart = LeanModel(model, int8=True), LeanModel(model, int8=True)
    for w in apart.layers:
        assert w.qkv.data.shape == (64 + 2 * 32, 64) and w.gate_up.data.shape == (256, 64)
        w.qkv = w.gate_up = None
        w.q, w.k, w.v, w.gate, w.up = (Int8Weight.of(t) for t in (w.q, w.k, w.v, w.gate, w.up))
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(1))
    a, b = stacked.new_cache(1, 16), apart.new_cache(1, 16)
    for chunk in (ids[:, :9], ids[:, 9:10], ids[:, 10:]):  # prefill, one token, two tokens
        assert torch.equal(stacked(chunk, a), apart(chunk, b))
