"""The embedded pair as shipped: loads like a hub pair, tokenizer round-trips any Unicode,
greedy speculative == greedy target; the presets' sizes; the tracked tree's size. (The model
card's numbers are reproduced by tests/research/test_evaluate.py.)"""
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from app.assets import TINY_DIR, TINY_DRAFT_DIR, TINY_TARGET_DIR
from app.presets import PRESETS


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(TINY_TARGET_DIR))


def test_both_models_load_with_auto_classes_and_share_the_tokenizer(tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    target = AutoModelForCausalLM.from_pretrained(str(TINY_TARGET_DIR))
    draft = AutoModelForCausalLM.from_pretrained(str(TINY_DRAFT_DIR))
    assert target.num_parameters() >= 4 * draft.num_parameters()
    assert AutoTokenizer.from_pretrained(str(TINY_DRAFT_DIR)).get_vocab() == tokenizer.get_vocab()
    weights = sum(p.stat().st_size for p in TINY_DIR.rglob("*.safetensors"))
    assert weights <= 25e6  # fp16 on disk: 22.3 MB


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=200))
def test_tokenizer_round_trips_any_unicode(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert tokenizer.unk_token_id is None or tokenizer.unk_token_id not in ids


def test_greedy_speculative_equals_greedy_target_on_the_embedded_pair(embedded_pair):
    from app.engine import DecodeSettings, autoregressive_generate, speculative_generate
    for prompt in ["It is a truth universally acknowledged", "ROMEO:\n", "Emma Woodhouse, handsome,"]:
        ids = embedded_pair.tokenizer(prompt)["input_ids"]
        for gamma in (2, 5):
            s = DecodeSettings(gamma=gamma, max_new_tokens=40)
            spec = [t for e in speculative_generate(embedded_pair, ids, s) for t in e.emitted_ids]
            plain = [t for e in autoregressive_generate(embedded_pair, ids, s) for t in e.emitted_ids]
            assert spec == plain


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_parses_with_published_sizes(name):
    from app.shapes import load_shape_json
    preset = PRESETS[name]
    target, draft = preset.params
    assert target > draft > 0
    sides = ((preset.target_shape, target), (preset.draft_shape, draft))
    for shape, count in sides:
        if preset.kind != "embedded" and not Path(shape).is_dir():  # local dirs have no published size
            published = load_shape_json(shape)["_published_params"]
            assert abs(count / published - 1) < 0.01
    assert preset.label


def test_the_tracked_tree_fits_one_device_call():
    """Everything git tracks stays under 64 MiB, the most the GPU tool carries in one call
    (../.library/device/README.md), so a GPU check runs on this checkout as it is."""
    import subprocess
    root = TINY_DIR.parent.parent
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    files = [root / f for f in listed.stdout.decode().split("\0") if f]
    total = sum(f.stat().st_size for f in files if f.is_file())
    assert total < 64 * 2**20, f"tracked files total {total / 2**20:.1f} MiB"


def test_the_shipped_tokenizers_are_stored_compact():
    """tokenizer.json files are kept without indentation (research.compact): the pretty-printed
    SmolLM2 tokenizer alone is 2 MB bigger, room the tracked tree's 64 MiB does not have."""
    import json
    from research.compact import compact_text
    files = sorted(TINY_DIR.parent.rglob("tokenizer.json"))
    assert len(files) >= 3  # the tiny pair's two and the SmolLM2 draft's
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert text == compact_text(json.loads(text)), path
