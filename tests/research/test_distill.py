"""The flagship draft's distillation pieces on made-up teacher outputs (no flagship needed): the
kept vocabulary, the draft built over it, and the loss / acceptance bound it is trained on."""
import json
from types import SimpleNamespace

import pytest
import torch

from app.assets import TINY_TARGET_DIR
from app.draft_vocab import DraftVocab
from research import distill_smollm2 as distill

V = distill.VOCAB_SIZE


def example(ids, first, tk_ids, tk_p):
    """One teacher example: ids [L], top-K ids / log-probs [n, TOP_K] from position `first`."""
    return {"ids": torch.tensor(ids), "first": first, "tk_ids": torch.tensor(tk_ids, dtype=torch.int32),
            "tk_lp": torch.tensor(tk_p).log().half()}


def top(ids_probs):
    """[(id, p), ...] padded to TOP_K entries with distinct unlikely ids."""
    ids = [i for i, _ in ids_probs] + [40_000 + j for j in range(distill.TOP_K - len(ids_probs))]
    ps = [p for _, p in ids_probs] + [1e-6] * (distill.TOP_K - len(ids_probs))
    return ids, ps


@pytest.fixture(scope="module")
def data():
    a, pa = top([(100, 0.6), (200, 0.3), (300, 0.1)])
    b, pb = top([(200, 0.5), (45_000, 0.5)])  # half the mass on a token no draft keeps (k small)
    return [example([5, 6, 7], 1, [a, b], [pa, pb]), example([7, 8, 9, 10], 2, [b, a], [pb, pa])]


def test_choose_vocab_keeps_specials_then_the_most_teacher_mass(data):
    kept = distill.choose_vocab(data, special=[0, 1, 2], k=8)
    assert kept == sorted(kept) and len(kept) == 8
    assert {0, 1, 2, 100, 200} <= set(kept)          # specials, then the highest mass
    assert 40_031 not in kept                           # 1e-6 mass loses to every input token


@pytest.fixture(scope="module")
def draft(data):
    torch.manual_seed(0)
    cfg = SimpleNamespace(vocab_size=V, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    kept = distill.choose_vocab(data, special=[0, 1, 2], k=12)
    return distill.make_draft(cfg, torch.randn(V, 576), kept)


def test_draft_rows_and_special_ids_are_mapped(draft):
    kept = draft.config.draft_vocab_ids
    assert draft.config.vocab_size == len(kept) + 1 and draft.config.target_vocab_size == V
    assert draft.config.eos_token_id == kept.index(2)
    assert draft.get_input_embeddings().weight.shape == (len(kept) + 1, distill.DRAFT_SHAPE["hidden_size"])


def test_draft_shape_sets_width_and_depth(data):
    cfg = SimpleNamespace(vocab_size=V, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    kept = distill.choose_vocab(data, special=[0, 1, 2], k=12)
    wide = distill.make_draft(cfg, torch.randn(V, 576), kept, distill.draft_shape(384, 2))
    assert wide.get_input_embeddings().weight.shape == (len(kept) + 1, 384)
    assert len(wide.model.layers) == 2 and wide.config.num_attention_heads == 6
    assert wide.model.layers[0].mlp.up_proj.weight.shape == (3 * 384, 384)
    assert distill.draft_shape() == distill.DRAFT_SHAPE and distill.DRAFT_SHAPE["hidden_size"] == 320
    with pytest.raises(ValueError, match="multiple of the 64"):
        distill.draft_shape(100)


def test_loss_and_alpha_bound_count_untrainable_mass_as_lost(draft, data):
    batch = distill.collate(data, pad=2, vocab=DraftVocab.of(draft))
    ids, mask, pos, tk_rows, p_target = batch
    assert ids.max() <= len(draft.config.draft_vocab_ids)       # draft rows, extra row included
    assert len(pos) == 4 and tk_rows.shape == (4, distill.TOP_K)
    loss, alpha = distill.soft_ce(draft, *batch)
    loss.backward()
    assert torch.isfinite(loss) and draft.lm_head.weight.grad is not None
    # position 1 of example 0 has half its mass on token 45,000, which the draft cannot propose
    assert 0 < alpha[1] <= 0.5 + 1e-3 and (alpha <= 1 + 1e-4).all()
    assert 0 < distill.alpha_by_scale(draft, data, 2, 0.7, [1.0])[1.0] <= 1


def test_tvd_term_is_the_rejection_rate_at_its_temperature(draft, data):
    """soft_ce(tvd=w) adds w * (1 - alpha bound at T = 0.7) to the cross-entropy, exactly the
    number alpha_by_scale reports for the same positions."""
    batch = distill.collate(data, pad=2, vocab=DraftVocab.of(draft))
    with torch.no_grad():
        ce, _ = distill.soft_ce(draft, *batch)
        both, _ = distill.soft_ce(draft, *batch, tvd=2.0, tvd_t=0.7)
    bound = distill.alpha_by_scale(draft, data, 2, 0.7, [1.0])[1.0]
    assert both - ce == pytest.approx(2.0 * (1 - bound), abs=1e-3)


def test_descending_the_tvd_term_alone_raises_the_acceptance_bound(data):
    torch.manual_seed(1)
    cfg = SimpleNamespace(vocab_size=V, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    draft = distill.make_draft(cfg, torch.randn(V, 576), distill.choose_vocab(data, special=[0, 1, 2], k=12))
    batch = distill.collate(data, pad=2, vocab=DraftVocab.of(draft))
    before = distill.alpha_by_scale(draft, data, 2, 0.7, [1.0])[1.0]
    opt = torch.optim.Adam(draft.parameters(), lr=1e-3)
    for _ in range(15):
        term = distill.soft_ce(draft.train(), *batch, tvd=1.0)[0] - distill.soft_ce(draft, *batch)[0]
        term.backward()
        opt.step()
        opt.zero_grad()
    assert distill.alpha_by_scale(draft, data, 2, 0.7, [1.0])[1.0] > before + 0.05


def test_distill_temperature_keeps_the_minimiser_and_matches_the_tempered_bound():
    """kept_ce at T = 0.7 (`--distill-temperature`): the draft logits log p + c still minimise it
    (zero gradient, bound 1), its bound is tempered_alpha's at 0.7, and T = 1 is the plain
    cross-entropy to p."""
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.7, 0.1, 0.1, 0.1]])               # [n, TOP_K]
    rows = torch.tensor([[2, 0, 3, 1], [1, 3, 0, 2]])                             # their draft rows
    at_log_p = torch.full((2, 4), -9.0).scatter(1, rows, p.log()) + 0.4           # [n, K]: log p + c
    exact = at_log_p.clone().requires_grad_()
    loss, bound = distill.kept_ce(exact, rows, p, 0.7)
    loss.backward()
    assert exact.grad.abs().max() < 1e-6 and bound.tolist() == pytest.approx([1.0, 1.0], abs=1e-5)
    off = at_log_p * 1.4 + torch.tensor([[0.0, 0.5, -0.3, 0.2]])                   # too sharp, and shifted
    loss_t, bound_t = distill.kept_ce(off, rows, p, 0.7)
    assert bound_t.tolist() == pytest.approx(distill.tempered_alpha(p, off, rows, 0.7).tolist())
    assert (bound_t < 1 - 1e-3).all()
    plain = -(p * torch.log_softmax(off, -1).gather(1, rows)).sum(-1).mean()
    assert distill.kept_ce(off, rows, p)[0] == pytest.approx(plain.item()) and loss_t != pytest.approx(plain.item())


def test_training_at_a_distill_temperature_chooses_its_checkpoint_by_the_bound_there(draft, data, tmp_path):
    """train_draft end to end on made-up teacher shards (--resume: no flagship needed): with
    --distill-temperature 0.7 every held-out row logs the bounds at 1 and 0.7, and the saved
    draft is the one with the best bound at 0.7, which the log names."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    src, cache, out = tmp_path / "src", tmp_path / "cache", tmp_path / "out"
    draft.save_pretrained(src)
    AutoTokenizer.from_pretrained(str(TINY_TARGET_DIR)).save_pretrained(src)
    (src / "train_log.json").write_text("{}")
    cache.mkdir()
    for name in distill.reply_files([0.7]) + ["corpus.pt"]:
        torch.save(data, cache / name)
    torch.save(data[:1], cache / "heldout.pt")
    (cache / "data_log.json").write_text("{}")
    distill.train_draft(distill.parse_args(
        ["train", "--cache", str(cache), "--out", str(out), "--resume", str(src), "--wide-rounds", "0",
         "--temperatures", "0.7", "--steps", "101", "--batch", "2", "--corpus-per-batch", "1", "--lr", "1e-3",
         "--distill-temperature", "0.7", "--no-bf16"]))
    log = json.loads((out / "train_log.json").read_text())
    rows = [r for r in log["curve"] if "heldout_alpha_topk" in r]
    assert [r["step"] for r in rows] == [0, 100] and all("heldout_alpha_topk_T0.7" in r for r in rows)
    assert log["selected_by"] == "heldout_alpha_topk_T0.7" and log["distill_temperature"] == 0.7
    assert log["heldout_alpha_topk_T0.7"] >= max(r["heldout_alpha_topk_T0.7"] for r in rows)
    saved = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    # fp16 on disk: the log keeps the saved file's own bounds (round_as_saved), which a reload
    # reproduces to the log's rounding (4 decimals); the fp32 bound that chose it may differ more
    assert distill.alpha_by_scale(saved, data[:1], 2, 0.7, [1.0])[1.0] == pytest.approx(  # heldout.pt
        log["as_saved"]["heldout_alpha_topk_T0.7"], abs=1e-4)
    # beside it, the bound on training replies (the memorisation gap), here on other examples
    assert all("seen_alpha_topk" in r for r in rows) and log["seen_replies"] == 1
    seen = distill.seen_sample(distill.load_data(cache, [0.7], 0)[0], 1, 1234)
    assert distill.heldout_alpha(saved, seen, 2) == pytest.approx(log["seen_alpha_topk"], abs=1e-4)
    assert log["seen_alpha_topk"] != pytest.approx(log["heldout_alpha_topk"], abs=1e-3)


def test_resume_starts_from_the_saved_draft_and_keeps_its_log(draft, tmp_path):
    from transformers import AutoTokenizer
    draft.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(str(TINY_TARGET_DIR)).save_pretrained(tmp_path)
    (tmp_path / "train_log.json").write_text('{"steps_done": 7}')
    again, tok, before = distill.start_draft(SimpleNamespace(resume=str(tmp_path)), [])
    assert before == {"steps_done": 7} and again.training and tok is not None
    assert again.config.draft_vocab_ids == draft.config.draft_vocab_ids
    assert torch.equal(again.lm_head.weight, draft.lm_head.weight)


def test_a_calibrated_parents_scale_is_divided_back_out_before_training(draft):
    """unfold_scale undoes what calibrate folded into the final norm (exactly, for a power of
    two), so the resumed draft's logits are its uncalibrated ones; an uncalibrated parent is left
    as it is."""
    norm = draft.model.norm.weight.detach().clone()
    assert distill.unfold_scale(draft, {"steps_done": 7}) is None and torch.equal(draft.model.norm.weight, norm)
    assert distill.unfold_scale(draft, {"calibration": {"scale": 2.0}}) == 2.0
    assert torch.equal(draft.model.norm.weight, norm / 2)


def test_a_bf16_autocast_step_keeps_fp32_weights_and_lowers_the_loss(data):
    """train_step(bf16=True): the matrix products run in bf16 (its first loss differs from an
    fp32 step's on the same weights, by rounding only), the weights and the loss stay fp32, and
    a few steps descend the same soft cross-entropy as fp32 training."""
    import copy
    torch.manual_seed(2)
    cfg = SimpleNamespace(vocab_size=V, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    draft = distill.make_draft(cfg, torch.randn(V, 576), distill.choose_vocab(data, special=[0, 1, 2], k=12))
    batch = distill.collate(data, pad=2, vocab=DraftVocab.of(draft))
    twin = copy.deepcopy(draft).train()
    fp32, _ = distill.train_step(twin, torch.optim.AdamW(twin.parameters(), lr=1e-3), batch, bf16=False)
    opt = torch.optim.AdamW(draft.parameters(), lr=1e-3)
    first, _ = distill.train_step(draft.train(), opt, batch, bf16=True)
    assert first.item() != fp32.item() and first.item() == pytest.approx(fp32.item(), rel=0.02)
    for _ in range(10):
        loss, alpha = distill.train_step(draft, opt, batch, bf16=True)
    assert first.dtype == torch.float32 and alpha.shape == (4,)
    assert all(p.dtype == torch.float32 for p in draft.parameters())
    assert loss < first - 0.1


def test_bf16_autocast_is_the_default_only_where_the_cpu_has_bf16_kernels(monkeypatch):
    """--bf16 defaults to cpu_has_bf16() (oneDNN's check), read when the arguments are parsed;
    either flag overrides it. On the AVX2 EPYC it is False, and a bf16 step there was far slower."""
    for has in (True, False):
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda has=has: has)
        assert distill.cpu_has_bf16() is has and distill.parse_args(["train"]).bf16 is has
        assert distill.parse_args(["train", "--bf16"]).bf16 and not distill.parse_args(["train", "--no-bf16"]).bf16


def test_a_draft_sliced_from_every_target_layer_computes_the_targets_logits():
    """make_sliced_draft (`--slice`) on the tiny target: all its layers and a kept subset of
    its tokens give the target's logits at the kept ids; two layers give a different model
    with the target's own first layers, norm and rows."""
    from transformers import AutoModelForCausalLM
    target = AutoModelForCausalLM.from_pretrained(str(TINY_TARGET_DIR), dtype=torch.float32).eval()
    n = target.config.num_hidden_layers
    kept = sorted(set(range(0, target.config.vocab_size, 3)) | {0})
    ids = torch.tensor([kept[5:25]])                                        # [1, 20], all kept
    whole = distill.make_sliced_draft(target, kept, list(range(n))).eval()
    vocab = DraftVocab.of(whole)
    with torch.no_grad():
        p_logits = target(ids).logits[0][:, kept]                           # [20, K]
        q_logits = whole(vocab.draft_input(ids)).logits[0, :, :-1]          # [20, K]
        assert torch.allclose(q_logits, p_logits, atol=1e-4)
        cut = distill.make_sliced_draft(target, kept, [0, 1]).eval()
        assert cut.config.num_hidden_layers == 2 and cut.config.draft_vocab_ids == kept
        assert torch.equal(cut.model.layers[1].mlp.up_proj.weight, target.model.layers[1].mlp.up_proj.weight)
        assert not torch.allclose(cut(vocab.draft_input(ids)).logits[0, :, :-1], p_logits, atol=1e-2)


def test_no_training_topic_names_a_held_out_topic():
    """The draft is evaluated on questions about subjects it never saw the target answer: no
    training topic list (train, more, every wide round) names a held-out topic as a whole word, and no
    training prompt is a held-out prompt."""
    import re
    from research import prompts
    fresh = [topics for topics, _, skip, _ in prompts.WIDE_LISTS if skip == 0]  # later rounds re-ask these
    topics = prompts.TRAIN_TOPICS + prompts.MORE_TOPICS + [t for topics in fresh for t in topics]
    assert all(any(topics is f for f in fresh) for topics, *_ in prompts.WIDE_LISTS)
    for held in prompts.HELDOUT_TOPICS:
        word = re.compile(rf"\b{re.escape(held)}\b", re.I)
        assert not [t for t in topics if word.search(t)], held
    assert len({t.lower() for t in topics}) == len(topics)  # each list adds only new subjects
    train = prompts.train_prompts() + prompts.more_prompts() + [p for r in range(len(prompts.WIDE_LISTS))
                                                                for p in prompts.wide_prompts(r)]
    assert len(set(train)) == len(train) and not set(train) & set(prompts.heldout_prompts())


def test_wide_prompts_use_every_template_about_equally_and_each_round_adds_one_shard():
    """Rounds over new topics use every template about equally; a round over earlier topics
    gives each topic `per` templates it has not had (train prompts are all distinct: above)."""
    from collections import Counter
    from research import prompts
    tasks = prompts.TASKS + prompts.MORE_TASKS
    assert prompts.WIDE_LISTS[0] == (prompts.WIDE_TOPICS, 5, 0, 5)  # the shipped draft's round, unchanged
    had: dict[str, set[int]] = {}
    for r, (topics, _, skip, per) in enumerate(prompts.WIDE_LISTS):
        wide = prompts.wide_prompts(r)
        assert len(wide) == per * len(topics) == per * len(set(topics))
        used = [(topic, next(i for i, task in enumerate(tasks) if task.format(t=topic) == p))
                for p, topic in zip(wide, [t for t in topics for _ in range(per)])]
        assert not [u for u in used if u[1] in had.get(u[0], set())]
        for topic, i in used:
            had.setdefault(topic, set()).add(i)
        if skip == 0:
            uses = Counter(i for _, i in used)
            assert set(uses) == set(range(len(tasks))) and max(uses.values()) - min(uses.values()) <= 1
    previous = distill.reply_files([0.7, 1.0])
    assert distill.reply_files([0.7, 1.0], wide=1) == previous + ["replies_wide_T0.7.pt"]
    assert distill.reply_files([0.7, 1.0], wide=2) == previous + ["replies_wide_T0.7.pt", "replies_wide2_T0.7.pt"]
    rounds = lambda *flags: distill.parse_args(["data", *flags]).wide_rounds  # noqa: E731
    assert (rounds(), rounds("--wide-topics"), rounds("--no-wide-topics"), rounds("--wide-rounds", "2")) == (1, 1, 0, 2)


def test_shipped_draft_was_made_by_the_gpu_route_its_log_describes():
    """The shipped draft came from research/distill_gpu.py (research/RESULTS.md, "Trained on a GPU"):
    its log names that command and the shipped shape, its data are fresh replies to the GPU
    route's prompts (every round but the last answered all of them), it ran at most the epochs
    it was allowed, and the saved checkpoint is the best held-out one of its curve."""
    from research.distill_gpu import LOGGED_COMMANDS, parse_args, training_prompts
    log = json.loads((distill.DRAFT_DIR / "train_log.json").read_text())
    log = distill.lineage(log)[0]  # a fine-tuned draft: the GPU route made the draft it started from
    assert log["command"].startswith(LOGGED_COMMANDS)  # as it ran (then demo_models.distill_gpu)
    assert log["shape"] == distill.DRAFT_SHAPE and log["draft_vocab"] == distill.DRAFT_VOCAB
    data = log["data"]
    assert data["replies"] >= len(training_prompts()) * (data["rounds_begun"] - 1) > 0
    assert data["heldout_examples"] == distill.HELDOUT_FOR_TRAINING
    epochs = parse_args(["--out", "x"]).epochs
    assert log["steps_done"] <= int(epochs * data["replies"] / log["batch"])
    bounds = [r["heldout_alpha_topk"] for r in log["curve"]]
    assert log["heldout_alpha_topk"] == max(bounds) and log["selected_by"] == "heldout_alpha_topk"
    assert log["calibration"]["scale"] > 0  # calibrated on the CPU afterwards


def test_training_on_named_shards_logs_each_and_chooses_by_their_held_out_file(draft, data, tmp_path):
    """--shards (research.diverse_data's rounds) with --heldout-shard and no corpus: the log lists
    each file with its replies and tokens, and the held-out bound is the held-out file's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    src, cache, out = tmp_path / "src", tmp_path / "cache", tmp_path / "out"
    draft.save_pretrained(src)
    AutoTokenizer.from_pretrained(str(TINY_TARGET_DIR)).save_pretrained(src)
    (src / "train_log.json").write_text('{"calibration": {"scale": 2.0}}')
    cache.mkdir()
    torch.save(data[:1], cache / "a.pt")
    torch.save(data[1:], cache / "b.pt")
    torch.save(data[1:], cache / "held.pt")
    distill.train_draft(distill.parse_args(
        ["train", "--shards", str(cache / "a.pt"), str(cache / "b.pt"), "--heldout-shard", str(cache / "held.pt"),
         "--out", str(out), "--resume", str(src), "--steps", "3", "--batch", "2", "--corpus-per-batch", "0",
         "--no-bf16"]))
    log = json.loads((out / "train_log.json").read_text())
    assert log["data"]["replies"] == {"a.pt": {"examples": 1, "tokens": 2}, "b.pt": {"examples": 1, "tokens": 2}}
    assert log["data"]["heldout"] == {"file": "held.pt", "examples": 1, "tokens": 2}
    saved = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert distill.heldout_alpha(saved, data[1:], 2) == pytest.approx(log["as_saved"]["heldout_alpha_topk"], abs=1e-4)
    with pytest.raises(SystemExit):
        distill.parse_args(["train", "--shards", str(cache / "a.pt")])
    assert log["keep"] == "best" and log["saved_step"] in (0, 2)
    # --keep last: the final weights, whatever step 0's bound was
    distill.train_draft(distill.parse_args(
        ["train", "--shards", str(cache / "a.pt"), str(cache / "b.pt"), "--heldout-shard", str(cache / "held.pt"),
         "--keep", "last",
         "--out", str(tmp_path / "last"), "--resume", str(src), "--steps", "3", "--batch", "2",
         "--corpus-per-batch", "0", "--no-bf16", "--no-unfold-scale"]))
    last = json.loads((tmp_path / "last" / "train_log.json").read_text())
    assert last["keep"] == "last" and last["saved_step"] == 2
    assert log["unfolded_scale"] == 2.0 and last["unfolded_scale"] is None  # the second: --no-unfold-scale
    assert last["heldout_alpha_topk"] == last["final_heldout_alpha_topk"]


def test_widening_adds_rows_keeps_the_old_ones_and_maps_new_ones_by_the_fitted_projection():
    """widen_vocab: the kept ids grow by the extra tokens, tied rows stay tied, the old tokens'
    hidden states are unchanged and their logits too (up to the output product's reassociation),
    and a new token's row is its target embedding through the linear map that takes the old
    kept tokens' target rows to their draft rows (exact here, where such a map exists)."""
    import copy

    from tests.support import assert_reassociation_close
    d = distill.DRAFT_SHAPE["hidden_size"]
    torch.manual_seed(1)
    e_t = torch.randn(V, 576)
    cfg = SimpleNamespace(vocab_size=V, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    old = list(range(0, 2 * 700, 2))                                     # more kept rows than 576: the map is determined
    base = distill.make_draft(cfg, e_t, old, distill.draft_shape(d, 1))
    m = torch.randn(576, d) / 24                                         # the map to recover
    with torch.no_grad():
        base.get_input_embeddings().weight[:len(old)] = e_t[old] @ m
    wide = distill.widen_vocab(copy.deepcopy(base), cfg, e_t, [45_000, 30_000])
    kept = wide.config.draft_vocab_ids
    assert kept == sorted(set(old) | {45_000, 30_000}) and wide.config.vocab_size == len(kept) + 1
    assert wide.lm_head.weight.data_ptr() == wide.get_input_embeddings().weight.data_ptr()
    assert wide.config.eos_token_id == kept.index(2)
    rows = wide.get_input_embeddings().weight
    for t in (45_000, 30_000):
        # fp32 least squares on a consistent 700 x 576 Gaussian system: condition number about
        # (sqrt(700) + sqrt(576)) / (sqrt(700) - sqrt(576)) ~ 20, so a backward-stable solver's relative
        # error is about 20 eps ~ 2e-6 times a modest dimension factor: 1e-3 leaves a wide margin
        torch.testing.assert_close(rows[kept.index(t)], e_t[t] @ m, rtol=1e-3, atol=1e-4)
    assert torch.equal(rows[-1], base.get_input_embeddings().weight[-1])  # the extra input row
    ids = torch.tensor([[old.index(t) for t in old[:6]]])                  # old tokens only, old rows
    new_ids = torch.tensor([[kept.index(t) for t in old[:6]]])
    with torch.no_grad():
        h_old = base.model(input_ids=ids).last_hidden_state[0]             # [6, d]
        h_new = wide.model(input_ids=new_ids).last_hidden_state[0]
        assert torch.equal(h_old, h_new)
        got = wide.lm_head(h_new)[:, [kept.index(t) for t in old]]          # [6, K_old]
    assert_reassociation_close(got, h_new, base.lm_head.weight[:len(old)])


def test_extra_tokens_are_the_unkept_ones_with_the_most_teacher_mass(data):
    assert distill.extra_tokens(data, kept=[100, 200], n=2) == [45_000, 300]


def test_a_fine_tuned_shipped_draft_learned_from_the_committed_diverse_records():
    """If the shipped draft was trained further (--resume --shards), its log names the shards of
    sampled rounds (any pool of research.diverse_data) whose token ids are committed in
    demo_models/smollm2_replies/ (same replies, same reply tokens), it chose its checkpoint on the
    held-out diverse prompts, and it saved the best held-out step of its curve (or, trained with --keep last, its final weights)."""
    from research.diverse_data import HELDOUT, POOLS
    from research.teacher_record import RECORD_DIR, load_record
    log = json.loads((distill.DRAFT_DIR / "train_log.json").read_text())
    if "resumed_from" not in log:
        pytest.skip("the shipped draft was not fine-tuned")
    for step in distill.lineage(log)[1:]:                                 # each fine-tune, first first
        assert "--resume" in step["command"] and "--shards" in step["command"]
        replies = step["data"]["replies"]
        assert any(name.startswith(tuple(f"{pool}_r" for pool in POOLS)) for name in replies)  # a sampled round
        for name, v in replies.items():
            record = load_record(RECORD_DIR / name.replace(".pt", ".npz"))
            assert v["examples"] == len(record)
            assert v["tokens"] == sum(len(e["ids"]) - e["first"] - 1 for e in record)
        assert step["data"]["heldout"]["file"] == "diverse_heldout.pt"
        assert step["data"]["heldout"]["examples"] >= HELDOUT
        bounds = [r["heldout_alpha_topk"] for r in step["curve"] if "heldout_alpha_topk" in r]
        final = step["final_heldout_alpha_topk"]
        if step.get("keep", "best") == "last":                              # --keep last: the final weights
            assert step["heldout_alpha_topk"] == final and step["saved_step"] == step["steps_done"] - 1
        else:
            assert step["heldout_alpha_topk"] == max(bounds + [final])
    assert log["draft_vocab"] == len(json.loads((distill.DRAFT_DIR / "config.json").read_text())["draft_vocab_ids"])


@pytest.mark.parametrize("n", [1, 3])
def test_deepening_adds_identity_blocks_so_the_draft_computes_what_it_did(n):
    """deepen: L + n layers, each new one a copy of the layer before it with its output
    projections zero, so every hidden state and logit is the old draft's exactly (adding a zero
    vector changes no float); the new blocks' other weights are the copied layer's, and the
    config keeps the draft's vocabulary fields."""
    torch.manual_seed(2)
    cfg = SimpleNamespace(vocab_size=V, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    base = distill.make_draft(cfg, torch.randn(V, 576), list(range(0, 400, 2)), distill.draft_shape(64, 4)).eval()
    with torch.no_grad():  # make every block matter: nonzero outputs everywhere
        for layer in base.model.layers:
            layer.mlp.down_proj.weight.normal_(0, 0.05)
            layer.self_attn.o_proj.weight.normal_(0, 0.05)
    deep = distill.deepen(base, n).eval()
    assert deep.config.num_hidden_layers == 4 + n and len(deep.model.layers) == 4 + n
    assert deep.config.draft_vocab_ids == base.config.draft_vocab_ids
    assert [layer.self_attn.layer_idx for layer in deep.model.layers] == list(range(4 + n))
    zeroed = [i for i, layer in enumerate(deep.model.layers) if not layer.mlp.down_proj.weight.any()]
    assert len(zeroed) == n and all(not deep.model.layers[i].self_attn.o_proj.weight.any() for i in zeroed)
    for i in zeroed:  # a copy of the block before it
        assert torch.equal(deep.model.layers[i].mlp.up_proj.weight, deep.model.layers[i - 1].mlp.up_proj.weight)
    ids = torch.tensor([[3, 17, 40, 5, 99, 120]])
    with torch.no_grad():
        assert torch.equal(deep(input_ids=ids).logits, base(input_ids=ids).logits)
    with pytest.raises(ValueError, match="1..4 new layers"):              # two after one old layer: refused
        distill.deepen(base, 5)


def test_broadening_adds_zero_dimensions_so_the_draft_computes_what_it_did():
    """broaden: a wider draft (more heads, a wider MLP) whose logits equal the old draft's up to
    rounding: padding adds exact zeros to every sum and RMSNorm's rescaled weight and eps restore
    each normalised vector, but transformers' RMSNorm computes in float32 even in a float64 model,
    so each of the five norms may round differently (a few float32 ulps, 2^-24 relative): 64 ulps
    of the largest logit bound it. Everything writing a new dimension is zero, everything reading
    one is not, and the config keeps the vocabulary."""
    torch.manual_seed(4)
    cfg = SimpleNamespace(vocab_size=V, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    base = distill.make_draft(cfg, torch.randn(V, 576), list(range(0, 400, 2)), distill.draft_shape(64, 2))
    with torch.no_grad():
        for layer in base.model.layers:
            layer.mlp.down_proj.weight.normal_(0, 0.05)
            layer.input_layernorm.weight.uniform_(0.5, 1.5)
    wide = distill.broaden(base, 128, 256).double().eval()
    assert (wide.config.hidden_size, wide.config.intermediate_size, wide.config.num_attention_heads) == (128, 256, 2)
    assert wide.config.draft_vocab_ids == base.config.draft_vocab_ids
    emb, layer = wide.get_input_embeddings().weight, wide.model.layers[0]
    assert not emb[:, 64:].any() and not layer.self_attn.o_proj.weight[64:].any()
    assert not layer.self_attn.o_proj.weight[:, 64:].any() and not layer.mlp.down_proj.weight[:, 192:].any()
    assert layer.self_attn.q_proj.weight[64:].all() and layer.mlp.up_proj.weight[192:].all()
    assert layer.input_layernorm.weight[64:].all()                         # or no gradient could pass
    ids = torch.tensor([[3, 17, 40, 5, 99, 120]])
    with torch.no_grad():
        old, new = base.double().eval()(input_ids=ids).logits, wide(input_ids=ids).logits
    assert torch.allclose(new, old, rtol=0, atol=64 * 2 ** -24 * old.abs().max().item())
    wide.float().train()(input_ids=ids).logits.logsumexp(-1).sum().backward()
    assert emb.grad[:, 64:].any() and layer.mlp.down_proj.weight.grad[:, 192:].any()  # the zeros can grow
    with pytest.raises(ValueError, match="larger multiple of head_dim"):
        distill.broaden(base, 96, 256)
    for flags in (["--broaden", "384x1024"], ["--deepen", "2"], ["--grown-lr", "10"]):  # growth needs a parent
        with pytest.raises(SystemExit):
            distill.parse_args(["train", *flags])


@pytest.mark.parametrize("grow", ["broaden", "deepen"])
def test_grown_elements_take_k_times_the_step_and_the_parent_elements_the_same(grow):
    """grown_masks marks exactly what broaden or deepen added (every element outside the old
    block, or every element of a new layer); boost_grown scales their AdamW update by k and
    leaves every other element's update as the same step without it would make it."""
    import copy
    torch.manual_seed(5)
    cfg = SimpleNamespace(vocab_size=V, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    base = distill.make_draft(cfg, torch.randn(V, 576), list(range(0, 400, 2)), distill.draft_shape(64, 2))
    shapes = {n: tuple(w.shape) for n, w in base.named_parameters()}
    if grow == "broaden":
        grown, new_layers = distill.broaden(base, 128, 256), set()
        added = grown.num_parameters() - base.num_parameters()
    else:
        grown, new_layers = distill.deepen(base, 1), distill.added_layers(2, 1)
        (j,) = new_layers
        assert not grown.model.layers[j].mlp.down_proj.weight.any()            # deepen's zeroed copy
        added = sum(w.numel() for w in grown.model.layers[j].parameters())
    masks = distill.grown_masks(grown, shapes, new_layers)
    assert sum(int(m.sum()) for m in masks.values()) == added
    twin = copy.deepcopy(grown)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (grown, twin)]
    distill.boost_grown(opts[0], grown, masks, 10.0)
    before = {n: w.detach().clone() for n, w in grown.named_parameters()}
    ids = torch.tensor([[3, 17, 40, 5]])
    for model, opt in zip((grown, twin), opts):
        model(input_ids=ids).logits.logsumexp(-1).sum().backward()
        opt.step()
    plain = dict(twin.named_parameters())
    for name, w in grown.named_parameters():
        step, step1 = w.detach() - before[name], plain[name].detach() - before[name]
        m = masks.get(name, torch.zeros_like(w, dtype=torch.bool))
        assert torch.equal(step[~m], step1[~m])                 # the same arithmetic on the same weights
        # w = b + 10 (w' - b), rounded where it is added to b: a float32 ulp of |w| (< 4 here) each
        assert torch.allclose(step[m], 10 * step1[m], rtol=0, atol=4 * 2 ** -23 * 4)
    assert any(step.abs().max() > 0 for step in (plain[n].detach() - before[n] for n in masks))


def test_training_only_the_new_layers_leaves_every_old_weight_as_it_was():
    """train_only_new_layers: after a training step the old layers, embedding and norm are
    bit-identical, the new layers moved; the flag needs --deepen."""
    torch.manual_seed(3)
    cfg = SimpleNamespace(vocab_size=V, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    base = distill.make_draft(cfg, torch.randn(V, 576), list(range(0, 400, 2)), distill.draft_shape(64, 4))
    deep = distill.deepen(base, 2).train()
    trainable = distill.train_only_new_layers(deep, 2)
    new = sorted(distill.added_layers(4, 2))
    assert new == [2, 5] and trainable == 2 * sum(w.numel() for w in deep.model.layers[0].parameters())
    before = {k: v.clone() for k, v in deep.state_dict().items()}
    opt = torch.optim.AdamW([w for w in deep.parameters() if w.requires_grad], lr=1e-2)
    deep(input_ids=torch.tensor([[3, 17, 40, 5]])).logits.logsumexp(-1).sum().backward()
    opt.step()
    moved = {k.split(".")[2] for k, v in deep.state_dict().items() if not torch.equal(v, before[k])}
    assert moved == {"2", "5"}
    with pytest.raises(SystemExit):
        distill.parse_args(["train", "--train-new-only"])
