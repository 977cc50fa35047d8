"""Shape-only configs: real architectures whose parameter counts match the published sizes.

7B/8B shapes are never instantiated on this machine: their parameters are counted on the
meta device, which allocates nothing.
"""
import pytest
import torch

from app.costmodel import param_count
from app.shapes import LABEL, list_shapes, load_shape_config, load_shape_json, make_shape_model

REQUIRED = ("smollm2-135m", "llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b")


def test_required_shapes_are_stored():
    assert set(REQUIRED) <= set(list_shapes())


@pytest.mark.parametrize("name", list_shapes())
def test_shape_json_is_labelled_and_sourced(name):
    data = load_shape_json(name)
    assert data["_label"] == LABEL
    assert data["_source"] and data["_published_params"] > 1e7
    assert data["model_type"] and data["vocab_size"] > 1000


@pytest.mark.parametrize("name", list_shapes())
def test_param_count_within_1_percent_of_published(name):
    published = load_shape_json(name)["_published_params"]
    assert param_count(load_shape_config(name)) == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize("name", list_shapes())
def test_meta_model_param_count_within_1_percent_of_published(name):
    model = make_shape_model(name, "meta", torch.bfloat16)
    assert next(model.parameters()).device.type == "meta"
    real = sum(p.numel() for p in model.parameters())
    assert real == pytest.approx(load_shape_json(name)["_published_params"], rel=0.01)
    assert real == pytest.approx(param_count(model.config), rel=0.001)


def test_smallest_shape_instantiates_with_random_weights_and_runs():
    model = make_shape_model("smollm2-135m", "cpu", torch.bfloat16)
    params = list(model.parameters())
    assert sum(p.numel() for p in params) == pytest.approx(134.5e6, rel=0.01)
    assert all(p.device.type == "cpu" and p.dtype == torch.bfloat16 for p in params)
    assert 0.02 < model.model.layers[0].mlp.up_proj.weight.float().std() < 0.1  # initialised
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, 49152) and torch.isfinite(logits).all()


def test_configs_keep_their_architecture_details():
    llama = load_shape_config("llama-3.1-8b")
    assert type(llama).__name__ == "LlamaConfig" and llama.num_key_value_heads == 8
    rope = getattr(llama, "rope_parameters", None) or llama.rope_scaling
    assert rope["rope_type"] == "llama3" and rope["factor"] == 8.0
    assert type(load_shape_config("qwen2.5-7b")).__name__ == "Qwen2Config"
    assert load_shape_config("llama-3.2-1b").tie_word_embeddings is True
    assert load_shape_config("qwen2.5-7b").tie_word_embeddings is False


def test_unknown_shape_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown shape"):
        load_shape_config("gpt-5")


def test_shape_only_pair_decodes_through_the_engine():
    """A shape-only pair runs real speculative decoding (timing only): ids the embedded
    tokenizer cannot name print as <id>, and a run goes to its length (no EOS)."""
    from app.engine import DecodeSettings, run
    from app.models import load_shape_pair
    pair = load_shape_pair("smollm2-135m", "smollm2-135m", device="cpu", dtype="float32")
    ids = pair.tokenizer("It is", add_special_tokens=False)["input_ids"]
    *_, trace = run(pair, ids, "It is", DecodeSettings(gamma=2, max_new_tokens=6))
    assert len(trace.output_ids) == 6 and trace.models["shape_only"] is True
    unknown = [t for t in trace.output_ids if t >= len(pair.tokenizer.base)]
    assert all(f"<{t}>" in trace.output_text for t in unknown)
