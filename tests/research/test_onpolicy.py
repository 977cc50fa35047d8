"""research.onpolicy: replies written by a draft over part of the vocabulary, read back as target
ids, sampled from the draft's own distribution, and scored by the teacher at every position."""
import pytest
import torch

from app.draft_vocab import DraftVocab
from app.models import load_model
from research.onpolicy import draft_rows, scored_rows
from tests.support import chi2_p_value, partial_copy

TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"


@pytest.fixture(scope="module")
def writer(tiny_pair, tmp_path_factory):
    """(partial draft, the target ids it cannot propose): the tiny draft without the 20 ids it
    likes best after the prompt, so its kept distribution is far from its full one there."""
    tok = tiny_pair.tokenizer
    ids = tok("It is a truth", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        p = tiny_pair.draft(input_ids=torch.tensor([ids])).logits[0, -1].softmax(-1)   # [V]
    special = {tok.eos_token_id, tok.pad_token_id}
    excluded = [i for i in p.argsort(descending=True).tolist() if i not in special][:20]
    kept = [i for i in range(tiny_pair.vocab) if i not in excluded]
    directory = partial_copy(tiny_pair.draft, kept, tmp_path_factory.mktemp("writer"), tok)
    return load_model(directory, "cpu", torch.float32), set(excluded)


def prompt_rows(tok, texts):
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_replies_are_target_ids_the_draft_can_propose(tiny_pair, writer):
    draft, excluded = writer
    tok = tiny_pair.tokenizer
    rows = prompt_rows(tok, ["It is a truth", "A long sentence, written to be longer than the other one"])
    out = draft_rows(draft, tok, rows, 1.0, seed=0, max_new=12)
    vocab = DraftVocab.of(draft)
    for e, r in zip(out, rows):
        assert e["ids"][:len(r)].tolist() == r and e["first"] == len(r) - 1      # prompt kept, unpadded
        reply = e["ids"][len(r):]
        assert 0 < len(reply) <= 12
        assert not set(reply.tolist()) & excluded                                # never an id it lacks
        assert (vocab.draft_input(reply) < vocab.other).all()                    # nor the extra row
        assert tok.eos_token_id not in reply[:-1].tolist()                       # cut at the first EOS
    again = draft_rows(draft, tok, rows, 1.0, seed=0, max_new=12)
    assert [a["ids"].tolist() for a in again] == [e["ids"].tolist() for e in out]  # seeded


def test_the_first_reply_token_follows_q_draft(tiny_pair, writer):
    """Over 3,000 rows the first sampled token follows the draft's own distribution at T = 0.7,
    over its kept tokens (chi-square); the same counts against the full tiny draft's are caught."""
    draft, _ = writer
    tok = tiny_pair.tokenizer
    row = prompt_rows(tok, ["It is a truth"])[0]
    out = draft_rows(draft, tok, [row] * 3000, 0.7, seed=1, max_new=1)
    counts = torch.zeros(tiny_pair.vocab, dtype=torch.float64)
    for e in out:
        counts[e["ids"][len(row)]] += 1
    vocab = DraftVocab.of(draft)
    with torch.no_grad():
        logits = draft(input_ids=vocab.draft_input(torch.tensor([row]))).logits[0, -1, :-1]   # [K]
        full = tiny_pair.draft(input_ids=torch.tensor([row])).logits[0, -1]                  # [V]
    q_draft = torch.zeros(tiny_pair.vocab, dtype=torch.float64)
    q_draft[vocab.ids] = torch.softmax(logits.double() / 0.7, -1)
    assert chi2_p_value(counts, q_draft) > 1e-3
    assert chi2_p_value(counts, torch.softmax(full.double() / 0.7, -1)) < 1e-3


def test_scored_rows_carry_the_teachers_top_k_at_every_reply_position(tiny_pair, writer, monkeypatch):
    from research import distill_smollm2 as distill
    monkeypatch.setattr(distill, "TOP_K", 4)
    draft, _ = writer
    tok, teacher = tiny_pair.tokenizer, tiny_pair.target
    rows = prompt_rows(tok, ["It is a truth", "Another prompt", "A third one here"])
    out = scored_rows(draft, teacher, tok, rows, 1.0, batch=2, seed=3, deadline=float("inf"), max_new=6)
    written = draft_rows(draft, tok, rows[:2], 1.0, seed=3, max_new=6)             # the first batch's seed
    assert [e["ids"].tolist() for e in out[:2]] == [w["ids"].tolist() for w in written]
    for e in out:
        n = len(e["ids"]) - e["first"] - 1
        assert e["tk_ids"].shape == e["tk_lp"].shape == (n, 4)
        with torch.no_grad():
            lp = teacher(input_ids=e["ids"][None]).logits[0, e["first"]:e["first"] + n].float().log_softmax(-1)
        top = lp.topk(4, -1)
        # teacher_topk ran the rows right-padded in a batch: fp32 sums in another order, rounded to fp16
        torch.testing.assert_close(e["tk_lp"].float(), top.values.half().float(), rtol=2 ** -10, atol=1e-5)
    capped = scored_rows(draft, teacher, tok, rows, 1.0, batch=2, seed=3, deadline=0.0, max_new=6)  # past the cap
    assert [e["ids"].tolist() for e in capped] == [e["ids"].tolist() for e in out[:2]]              # the first batch


def test_a_draft_written_round_is_named_and_kept_apart(tiny_pair, writer, monkeypatch):
    """diverse_data.shard with a draft: both turns of a multi-turn prompt, the follow-up after the
    draft's own first reply; the round's name carries "d"."""
    from argparse import Namespace
    from research import distill_smollm2 as distill
    from research.diverse_data import main, shard, shard_name, shard_round
    from research.diverse_prompts import prompts
    draft, _ = writer
    tok = tiny_pair.tokenizer
    monkeypatch.setattr(tok, "chat_template", TEMPLATE, raising=False)
    monkeypatch.setattr(distill, "MAX_NEW", 4)
    pool = [p for p in prompts() if p["kind"] == "multiturn"][:1] + [p for p in prompts() if p["kind"] == "maths"][:1]
    out = shard(tiny_pair.target, tok, pool, 0.7, batch=2, seed=0, deadline=float("inf"), draft=draft)
    assert sorted(e["turn"] for e in out) == [1, 1, 2]
    args = Namespace(heldout=False, round=4, temperature=0.7, continue_from=None, kinds=[], pool="typed2",
                     writer="draft")
    assert shard_name(args) == "typed2_d4_T0.7" and shard_round("typed2_d4_T0.7.pt") == ("typed2", "d")
    with pytest.raises(SystemExit):
        main(["--cache", "unused", "--writer", "draft", "--heldout"])
