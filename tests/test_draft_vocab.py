"""A draft over part of the target's vocabulary (app/draft_vocab.py): loaded by from_pretrained,
its logits widened to the target's vocabulary, and speculative decoding with it stays exact even
when the tokens it cannot propose are the target's favourites."""
import pytest
import torch

from app.draft_vocab import DraftVocab
from app.engine import DecodeSettings, autoregressive_generate, speculative_generate
from app.lessons.lossless import lossless
from app.models import fill_cache, forward, load_pair, new_cache
from tests.support import partial_copy

PROMPT = "It is a truth"


@pytest.fixture(scope="module")
def partial(tiny_dirs, tiny_pair, tmp_path_factory):
    """(pair, excluded ids): the tiny draft without the target's three likeliest next tokens
    after PROMPT (so the target's correction must supply them)."""
    ids = tiny_pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    p_next = forward(tiny_pair.target, torch.tensor([ids]), new_cache())[0, -1].softmax(-1)
    excluded = [i for i in p_next.argsort(descending=True).tolist() if i not in ids][:3]
    kept = [i for i in range(tiny_pair.vocab) if i not in excluded]
    directory = partial_copy(tiny_pair.draft, kept, tmp_path_factory.mktemp("partial"), tiny_pair.tokenizer)
    return load_pair(tiny_dirs[0], directory, device="cpu"), excluded, float(p_next[excluded].sum())


def test_loaded_by_from_pretrained_with_the_targets_vocabulary(partial, tiny_pair):
    pair, excluded, _ = partial
    vocab = DraftVocab.of(pair.draft)
    assert pair.draft.config.vocab_size == tiny_pair.vocab - len(excluded) + 1
    assert pair.vocab == tiny_pair.vocab and vocab.target_vocab == tiny_pair.vocab
    assert DraftVocab.of(pair.target) is None
    assert vocab.draft_input(torch.tensor(excluded)).eq(vocab.other).all()


@pytest.mark.parametrize("fast", [False, True])
def test_logits_are_the_full_drafts_on_kept_tokens_and_minus_inf_elsewhere(partial, tiny_pair, fast):
    pair, excluded, _ = partial
    ids = torch.tensor([tiny_pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])  # [1, n]
    cache = new_cache(pair.draft, 64) if fast else new_cache()
    small = forward(pair.draft, ids, cache)[0]              # [n, V]
    full = forward(tiny_pair.draft, ids, new_cache())[0]    # [n, V]
    kept = torch.ones(tiny_pair.vocab, dtype=torch.bool)
    kept[excluded] = False
    assert small.shape == full.shape
    assert torch.isneginf(small[:, ~kept]).all()
    assert torch.allclose(small[:, kept], full[:, kept], atol=1e-5)


@pytest.mark.parametrize("fast", [False, True])
def test_a_prefill_without_logits_maps_the_targets_ids_too(partial, tiny_pair, fast):
    """app.models.fill_cache feeds the draft its own rows, as forward does: same cache, same
    next logits (an excluded id among the prompt's takes the "other" row)."""
    pair, excluded, _ = partial
    ids = torch.tensor([tiny_pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"] + excluded])
    make = (lambda: new_cache(pair.draft, 64)) if fast else new_cache
    filled, forwarded = make(), make()
    fill_cache(pair.draft, ids[:, :-1], filled)
    forward(pair.draft, ids[:, :-1], forwarded)
    assert torch.equal(forward(pair.draft, ids[:, -1:], filled), forward(pair.draft, ids[:, -1:], forwarded))


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_speculative_equals_target_only(partial, gamma, fast):
    pair, _, _ = partial
    ids = pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    s = DecodeSettings(gamma=gamma, max_new_tokens=24, fast=fast)
    spec = [t for e in speculative_generate(pair, ids, s) for t in e.emitted_ids]
    assert spec == [t for e in autoregressive_generate(pair, ids, s) for t in e.emitted_ids]


def test_never_drafts_an_excluded_token_yet_emits_them(partial):
    pair, excluded, _ = partial
    ids = pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    drafted, emitted = set(), set()
    for seed in range(12):
        s = DecodeSettings(gamma=4, max_new_tokens=16, temperature=1.0, seed=seed)
        for e in speculative_generate(pair, ids, s):
            drafted |= {p.token_id for p in e.pieces if p.fate in ("accepted", "rejected")}
            emitted |= set(e.emitted_ids)
    assert drafted and not drafted & set(excluded)
    assert emitted & set(excluded)


def test_sampled_output_follows_the_target_distribution(partial):
    """The draft cannot propose tokens holding much of p_target's mass at the first position;
    exact speculative sampling must still emit them as often as the target does."""
    pair, _, p_excluded = partial
    assert p_excluded > 0.2  # the excluded tokens matter
    r = lossless(pair, prompt=PROMPT, n=1500, k=1, gamma=3, variants=("exact", "no_residual"), seed=4)
    arms = {a.variant: a for a in r.arms}
    assert arms["exact"].p_value > 0.01 and arms["exact"].tv_to_exact < 0.06
    assert arms["no_residual"].p_value <= 0.01  # the test can fail: a broken sampler is caught


def test_bench_refuses_a_partial_draft_with_a_clear_message(partial, tiny_dirs, capsys):
    """transformers' assisted generation needs the draft's logits over the full vocabulary."""
    from argparse import Namespace

    from app import bench
    pair, _, _ = partial
    args = Namespace(target=tiny_dirs[0], draft=pair.draft_id, device="cpu", dtype="auto", gamma=2,
                     max_new_tokens=4, repeats=1, fast=False)
    assert bench.main(args) == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]  # after transformers' loading bars
    assert "part of the vocabulary" in said and "research.evaluate" in said
