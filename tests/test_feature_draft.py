"""The feature draft (app/feature_draft.py, EAGLE): the target's features reach it at the right
positions, training and decoding compute the same thing, its file format round-trips, and
speculative decoding with it stays exact (greedy: token for token; sampled: in distribution)."""
import pytest
import torch

from app.engine import DecodeSettings, autoregressive_generate, speculative_generate
from app.feature_draft import FeatureDrafter, head_forward, is_feature_draft, one_back, save_head
from app.models import ModelPair, cache_len, forward, load_model, new_cache
from research.distill_features import collate, head_out, make_head
from tests.support import chi2_p_value


def _head_dir(tiny_dirs, tmp_path_factory, kept=None, proj_std=0.3, seed=3):
    """A feature draft for the tiny random target, saved and loaded as the app loads one."""
    from transformers import AutoTokenizer
    target = load_model(tiny_dirs[0], "cpu", torch.float32)
    tok = AutoTokenizer.from_pretrained(tiny_dirs[0])
    torch.manual_seed(seed)
    head = make_head(target, kept if kept is not None else list(range(len(tok))))
    with torch.no_grad():  # a head that uses its feature input (make_head starts it at zero)
        head.feature_proj.weight.normal_(0, proj_std)
    out = tmp_path_factory.mktemp("head")
    save_head(head, tok, out)
    return str(out)


@pytest.fixture(scope="module")
def head_pair(tiny_dirs, tmp_path_factory, tiny_pair):
    """The tiny target with a feature draft over 200 of its 300 tokens (partial vocabulary)."""
    head = load_model(_head_dir(tiny_dirs, tmp_path_factory, kept=list(range(0, 300, 3)) + list(range(1, 300, 3))),
                      "cpu", torch.float32)
    return ModelPair(tiny_pair.target, head, tiny_pair.tokenizer, "cpu", torch.float32,
                     tiny_pair.target_id, "head", {})


def _prompt(pair, n=12):
    return pair.tokenizer("It is a truth universally")["input_ids"][:n]


def test_saved_head_loads_with_its_projection(tiny_dirs, tmp_path_factory):
    path = _head_dir(tiny_dirs, tmp_path_factory)
    head = load_model(path, "cpu", torch.float32)
    assert is_feature_draft(head) and head.model.layers.__len__() == 1
    assert head.feature_proj.weight.abs().sum() > 0  # the trained projection, not a fresh one
    from safetensors.torch import load_file
    from app.feature_draft import FEATURE_FILE
    saved = load_file(f"{path}/{FEATURE_FILE}")["weight"].float()
    assert torch.equal(head.feature_proj.weight, saved)


def test_missing_projection_is_a_clear_error(tiny_dirs, tmp_path_factory):
    import os
    path = _head_dir(tiny_dirs, tmp_path_factory)
    os.remove(f"{path}/feature_proj.safetensors")
    with pytest.raises(FileNotFoundError, match="feature_proj.safetensors"):
        load_model(path, "cpu", torch.float32)


@pytest.mark.parametrize("fast", [False, True])
def test_drafter_holds_the_targets_features_of_accepted_positions(head_pair, fast):
    """After every step the drafter's features equal the target's final-normed hidden states of
    the sequence so far (one full pass), one per position the target's cache holds; its own
    cache holds no position fed with a predicted feature."""
    seen = []

    def check(ids, cache, drafter):
        assert len(drafter.features) == cache_len(cache) == len(ids) - 1
        assert cache_len(drafter.cache) <= len(ids) - 1
        full = forward(head_pair.target, torch.tensor([ids[:-1]]), new_cache(), hidden=True)[1][0]
        assert torch.allclose(drafter.features, full, atol=1e-4)
        seen.append(len(ids))

    s = DecodeSettings(gamma=3, temperature=0.0, max_new_tokens=20, fast=fast)
    list(speculative_generate(head_pair, _prompt(head_pair), s, after_step=check))
    assert len(seen) >= 2


def test_decoding_and_training_compute_the_same_head(head_pair):
    """The head's logits at every position, fed step by step with the target's features as in
    decoding (head_forward over a cache), equal the training forward over the whole sequence
    (distill_features.collate + head_out): the one-position shift of F is the same in both."""
    ids = torch.tensor(_prompt(head_pair, 20))
    feats = forward(head_pair.target, ids[None], new_cache(), hidden=True)[1][0]   # [n, hidden]
    from app.draft_vocab import DraftVocab
    vocab = DraftVocab.of(head_pair.draft)
    example = {"ids": ids, "first": 0, "F": feats, "tk_ids": torch.zeros(len(ids), 2, dtype=torch.long),
               "tk_lp": torch.zeros(len(ids), 2)}
    rows, mask, f_prev, pos, _, _, _ = collate([example], 0, vocab)
    with torch.no_grad():
        train_logits = head_out(head_pair.draft, rows, mask, f_prev, pos)[0]       # [n, K]
    cache, step_logits = new_cache(), []
    for j in range(len(ids)):
        prev = feats[j - 1:j] if j else torch.zeros(1, feats.shape[1])
        logits = head_forward(head_pair.draft, ids[None, j:j + 1], prev[None], cache)[0][0, 0]
        step_logits.append(logits[vocab.ids])
    assert torch.allclose(torch.stack(step_logits), train_logits, atol=1e-4)


@pytest.mark.parametrize("fast,int8", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_output_is_the_targets(head_pair, fast, int8, gamma):
    ids = _prompt(head_pair)
    s = DecodeSettings(gamma=gamma, temperature=0.0, max_new_tokens=24, fast=fast, draft_int8=int8)
    steps = list(speculative_generate(head_pair, ids, s))
    plain = [t for e in autoregressive_generate(head_pair, ids, s) for t in e.emitted_ids]
    assert [t for e in steps for t in e.emitted_ids] == plain
    assert sum(len(e.draft_ids) for e in steps) > 0
    assert any(f.model == "draft" for e in steps for f in e.forwards)


def test_a_head_that_computes_the_target_is_always_accepted(tiny_dirs, tmp_path_factory, tiny_pair):
    """A one-layer target, and a head that is that target (its layer, norm and embedding, the
    feature projection zero): its q equals p at every depth, so greedy drafts are all accepted.
    Checks that the head's cache positions line up with the target's through every rollback."""
    from transformers import AutoTokenizer
    from tests.conftest import save_random
    tok = AutoTokenizer.from_pretrained(tiny_dirs[0])
    root = tmp_path_factory.mktemp("one_layer")
    target = load_model(save_random(tok, root / "target", 1, 64, 5), "cpu", torch.float32)
    head = make_head(target, list(range(len(tok))))
    with torch.no_grad():
        head.get_input_embeddings().weight[:-1] = target.get_input_embeddings().weight
    save_head(head, tok, root / "head")
    pair = ModelPair(target, load_model(str(root / "head"), "cpu", torch.float32), tok, "cpu", torch.float32,
                     "t", "h", {})
    s = DecodeSettings(gamma=4, temperature=0.0, max_new_tokens=30)
    steps = list(speculative_generate(pair, _prompt(pair), s))
    drafted, accepted = sum(len(e.draft_ids) for e in steps), sum(e.n_accepted for e in steps)
    assert drafted > 0 and accepted == drafted


def test_sampled_first_token_follows_the_target(head_pair):
    """Speculative sampling with the head: the first new token over many seeds is distributed
    as p_target at T = 1, while the head's own first drafts (its q, before verification) are
    not: the test can tell the two apart."""
    ids = _prompt(head_pair)
    p = torch.softmax(forward(head_pair.target, torch.tensor([ids]), new_cache())[0, -1].double(), -1)
    emitted, drafted = torch.zeros_like(p), torch.zeros_like(p)
    for seed in range(600):
        s = DecodeSettings(gamma=3, temperature=1.0, max_new_tokens=4, seed=seed)
        event = next(iter(speculative_generate(head_pair, ids, s, drafter=FeatureDrafter(head_pair.draft, "cpu"))))
        emitted[event.emitted_ids[0]] += 1
        drafted[event.draft_ids[0]] += 1
    assert chi2_p_value(emitted, p) > 1e-3
    assert chi2_p_value(drafted, p) < 1e-3


def test_lossless_lesson_drafts_with_the_heads_features(head_pair):
    """The lossless lesson's batched sampler feeds the head the target's features: its
    first-token q is the head's given the true F (as the engine's first draft); its exact arm
    matches the target while the broken one is caught."""
    from app.lessons.lossless import Sampler, lossless
    ids = _prompt(head_pair)
    sampler = Sampler(head_pair, ids, 1.0, torch.Generator().manual_seed(0))
    x = torch.tensor([ids])
    f = forward(head_pair.target, x, new_cache(), hidden=True)[1]                  # [1, L, hidden]
    q = torch.softmax(head_forward(head_pair.draft, x, one_back(f), new_cache())[0][0, -1], -1)
    assert torch.allclose(sampler.q_first, q, atol=1e-5)
    featureless = torch.softmax(forward(head_pair.draft, x, new_cache())[0, -1], -1)
    assert not torch.allclose(sampler.q_first, featureless, atol=1e-3)
    r = lossless(head_pair, prompt=head_pair.tokenizer.decode(ids), n=2000, k=1, gamma=3,
                 variants=("exact", "no_residual"), seed=2)
    arms = {a.variant: a for a in r.arms}
    assert arms["exact"].p_value > 0.01
    assert arms["no_residual"].p_value <= 0.01


def test_standardised_training_folds_into_the_saved_projection(head_pair):
    """Training feeds F / scale (distill_features.feature_scale); the saved projection is
    W / scale, so decoding with raw F computes what training computed."""
    import copy

    from app.draft_vocab import DraftVocab
    from research.distill_features import feature_scale
    ids = torch.tensor(_prompt(head_pair, 16))
    feats = forward(head_pair.target, ids[None], new_cache(), hidden=True)[1][0]   # [n, hidden]
    example = {"ids": ids, "first": 0, "F": feats, "tk_ids": torch.zeros(len(ids), 2, dtype=torch.long),
               "tk_lp": torch.zeros(len(ids), 2)}
    scale = feature_scale([example])
    assert scale.max() / scale.min() > 2  # the fold is not a no-op here
    vocab = DraftVocab.of(head_pair.draft)
    rows, mask, f_prev, pos, _, _, _ = collate([example], 0, vocab, scale)
    with torch.no_grad():
        trained = head_out(head_pair.draft, rows, mask, f_prev, pos)[0]
        saved = copy.deepcopy(head_pair.draft)
        saved.feature_proj.weight.div_(scale)
    f_raw = torch.cat([torch.zeros(1, feats.shape[1]), feats[:-1]])[None]
    decoded = head_forward(saved, ids[None], f_raw, new_cache())[0][0][:, vocab.ids]
    assert torch.allclose(decoded, trained, atol=1e-4)


def test_cli_generates_with_a_feature_draft_directory(tiny_dirs, tmp_path_factory, capsys):
    """`--draft DIR` with a saved head: the CLI loads it (projection included), drafts with the
    target's features, and its greedy output equals plain decoding's."""
    from app.cli import main
    head = _head_dir(tiny_dirs, tmp_path_factory)
    code = main(["generate", "--prompt", "It is a truth", "--max-new-tokens", "12", "--gamma", "3",
                 "--baseline", "--target", tiny_dirs[0], "--draft", head, "--device", "cpu"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "greedy outputs identical: yes" in out.out


def test_cost_model_counts_the_feature_projection(head_pair):
    """The roofline prices a head's passes from its config: its parameter count is what loads
    (the projection included), and a pass does the projection's 2 * hidden^2 FLOPs a token."""
    from app.costmodel import forward_cost, param_count
    cfg = head_pair.draft.config
    assert param_count(cfg) == head_pair.draft.num_parameters()
    plain = cfg.to_dict() | {"feature_draft": False}
    extra = forward_cost(cfg, 1, 3, 10, 4).linear_flops - forward_cost(plain, 1, 3, 10, 4).linear_flops
    assert extra == 2 * 3 * cfg.hidden_size ** 2


def test_cached_features_are_each_examples_own_prefill(tiny_pair):
    """features_smollm2.features batches examples of different lengths (right-padded); each
    example's F equals its own unpadded pass, to fp16 rounding."""
    from research.features_smollm2 import features
    gen = torch.Generator().manual_seed(0)
    examples = [{"ids": torch.randint(0, 300, (n,), generator=gen)} for n in (5, 17, 9, 30, 12)]
    got = features(tiny_pair.target, examples, batch_tokens=40)
    for e, f in zip(examples, got):
        want = tiny_pair.target.model(input_ids=e["ids"][None]).last_hidden_state[0]
        assert f.dtype == torch.float16 and f.shape == want.shape
        assert torch.allclose(f.float(), want, atol=2e-2, rtol=1e-2)
