"""The embedded pair as shipped: loads like a hub pair, tokenizer round-trips any Unicode,
greedy speculative == greedy target, and the model card's numbers reproduce."""
import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from demo_models import TINY_DIR, TINY_DRAFT_DIR, TINY_TARGET_DIR
from demo_models.presets import PRESETS

CORPUS = TINY_DIR.parents[2] / "shared" / "corpus"


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


ALPHA_TOLERANCE = 0.03  # the quick run uses 6 held-out windows instead of 24


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared/corpus is not beside the checkout")
def test_reduced_evaluation_reproduces_the_model_card_alpha(tmp_path):
    from demo_models import evaluate
    card = json.loads((TINY_DIR / "eval.json").read_text())
    quick = evaluate.main(["--corpus", str(CORPUS / "austen.txt"), str(CORPUS / "tinyshakespeare.txt"),
                           "--quick", "--out", str(tmp_path / "eval.json")])
    for t in ("T=1.0", "T=0.7"):
        assert abs(quick["heldout"]["alpha"][t] - card["heldout"]["alpha"][t]) < ALPHA_TOLERANCE
    assert quick["heldout"]["perplexity"]["target"] < 0.85 * quick["heldout"]["perplexity"]["draft"]
    assert quick["commit"] == evaluate.code_version()  # which code measured it


def test_code_version_names_the_commit_and_python_changes_only(tmp_path):
    import subprocess

    from demo_models.evaluate import code_version
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True, text=True)  # noqa: E731
    assert code_version(tmp_path) is None  # not a checkout
    git("init", "-q")
    (tmp_path / "m.py").write_text("x = 1\n")
    (tmp_path / "eval.json").write_text("{}\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = git("rev-parse", "--short", "HEAD").stdout.strip()
    assert code_version(tmp_path) == head
    (tmp_path / "eval.json").write_text('{"new": 1}\n')  # an evaluation's own output: not a change
    assert code_version(tmp_path) == head
    (tmp_path / "m.py").write_text("x = 2\n")
    assert code_version(tmp_path) == head + "+changes"


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


def test_bootstrap_interval_resamples_replies_and_covers_the_true_alpha():
    """bootstrap_ci (the flagship card's interval for alpha): zero width when every reply has the
    same mean, position-weighted, and a 95% interval that covers the true acceptance rate in
    about 95% of simulated evaluations whose positions are correlated within a reply (each
    reply's rate drawn around 0.55, as a draft that loses the thread does) -- an interval over
    positions as if independent would cover far less often."""
    import torch
    from demo_models.evaluate import bootstrap_ci
    assert bootstrap_ci([torch.full((n,), 0.5) for n in (3, 10, 40)]) == (0.5, 0.5)
    low, high = bootstrap_ci([torch.ones(90), torch.zeros(10)])  # resampled means: 0, 0.9 or 1
    assert (low, high) == (0.0, 1.0)
    gen, covered, naive = torch.Generator().manual_seed(1), 0, 0
    trials = 300
    for trial in range(trials):
        rates = (0.55 + 0.2 * torch.randn(8, generator=gen)).clamp(0.02, 0.98)       # [8] per reply
        replies = [torch.bernoulli(torch.full((96,), float(r)), generator=gen) for r in rates]
        low, high = bootstrap_ci(replies, draws=400, seed=trial)
        covered += low <= 0.55 <= high
        flat = torch.cat(replies)
        half = 1.96 * flat.std().item() / len(flat) ** 0.5
        naive += flat.mean().item() - half <= 0.55 <= flat.mean().item() + half
    assert 0.86 <= covered / trials <= 0.99, covered   # percentile bootstrap with 8 clusters runs a little narrow
    assert naive / trials < covered / trials - 0.2, (naive, covered)


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
