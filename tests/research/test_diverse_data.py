"""research.diverse_prompts and research.diverse_data: the diverse teacher prompts share nothing
with the realistic evaluation set, and the teacher's replies are recorded, resumed and packed."""
import json
import re
from collections import Counter

import pytest

from research import diverse_prompts
from research.diverse_prompts import prompts, task_forms
from research.eval_set import load as load_eval
from research.eval_set import overlap_check
from research.prompts import HELDOUT_TOPICS

def pool_texts() -> list[str]:
    """Every user text the pool can send: first turns, follow-ups, continued conversations' turns."""
    return diverse_prompts.texts(prompts()) + diverse_prompts.FOLLOW_UPS


def test_pool_shape():
    pool = prompts()
    assert len(pool) >= 800 and task_forms() >= 300                      # hundreds of task forms
    ids = [p["id"] for p in pool]
    assert len(set(ids)) == len(ids)
    kinds = Counter(p["kind"] for p in pool)
    assert set(kinds) == {"coding", "maths", "languages", "advice", "creative", "factual", "summarise",
                          "planning", "multiturn"}
    assert all(p["follow_up"] for p in pool if p["kind"] == "multiturn")
    assert all(len(p["messages"]) == 1 and p["messages"][0]["role"] == "user" for p in pool)
    assert prompts() == pool and prompts(seed=1) != pool                  # deterministic, seeded order
    assert all("{" not in t and "}" not in t for t in pool_texts())      # every slot filled


def test_disjoint_from_the_evaluation_set():
    """No pool text equals, contains or is contained in an evaluation message (case and
    whitespace ignored, punctuation ignored as runs of whole words), and no 8-word run is shared."""
    overlaps = overlap_check(load_eval())
    assert not [text for text in pool_texts() if overlaps(text)]


@pytest.mark.parametrize("leak", ["{m} Keep it short.", "Please: {m}", "x {m} y"])
def test_the_disjointness_check_can_fail(leak):
    """The same check catches an evaluation prompt slipped into the pool, inside other words,
    and an 8-word run of one."""
    ev = load_eval()
    overlaps = overlap_check(ev)
    m = ev[0]["messages"][0]["content"]
    assert overlaps(leak.format(m=m))
    long = next(x["content"] for p in ev for x in p["messages"] if len(x["content"].split()) > 12)
    assert overlaps("Intro words here. " + " ".join(long.split()[2:10]) + " and more")
    assert not overlaps("A sentence that no evaluation prompt could contain, zebra quartz.")


def test_no_held_out_topic_is_a_subject():
    """The held-out template prompts' topics (the secondary evaluation) are no subject here; a
    summarising passage may use a common word such as "water" in passing, so passages are left out."""
    subjects = [s.lower() for _, _, subs in diverse_prompts.GROUPS if subs is not diverse_prompts.PASSAGES
                for s in subs]
    for topic in HELDOUT_TOPICS:
        assert not [s for s in subjects if re.search(rf"\b{re.escape(topic)}\b", s)], topic


TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"


def test_run_resume_and_pack_on_the_embedded_pair(embedded_pair, monkeypatch, tmp_path):
    """Replies from the real (tiny) pair: a single-turn and a multi-turn prompt at two
    temperatures; a rerun answers nothing new; the pack reads back as a teacher record."""
    from research.diverse_data import pack, run
    from research.eval_set import chat_ids
    from research.teacher_record import load_record
    monkeypatch.setattr(embedded_pair.tokenizer, "chat_template", TEMPLATE, raising=False)
    pool = [p for p in prompts() if p["kind"] == "multiturn"][:1] + [p for p in prompts() if p["kind"] == "maths"][:1]
    out = tmp_path / "replies.jsonl"
    assert run(embedded_pair, pool, out, (0.7, 1.0), tokens=6) == 4
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["kind"], r["turn"], r["temperature"]) for r in rows] == [
        ("multiturn", 1, 0.7), ("multiturn", 2, 0.7), ("multiturn", 1, 1.0), ("multiturn", 2, 1.0),
        ("maths", 1, 0.7), ("maths", 1, 1.0)]
    for r, p in zip(rows[:1] + rows[4:5], pool):
        prompt = chat_ids(embedded_pair.tokenizer, p["messages"])
        assert r["ids"][:len(prompt)] == prompt and r["first"] == len(prompt) - 1
        assert 0 < len(r["ids"]) - len(prompt) <= 6
    second = embedded_pair.tokenizer.decode(rows[1]["ids"])
    assert second.startswith("<user>" + pool[0]["messages"][0]["content"] + "<assistant>")
    assert ("<user>" + pool[0]["follow_up"] + "<assistant>") in second
    assert run(embedded_pair, pool, out, (0.7, 1.0), tokens=6) == 0        # resumed: all done
    n = pack(out, tmp_path / "replies.npz")
    back = load_record(tmp_path / "replies.npz")
    assert n == 6 and [b["ids"].tolist() for b in back] == [r["ids"] for r in rows]
    assert [b["first"] for b in back] == [r["first"] for r in rows]


def test_the_held_out_prompts_are_the_pools_last_and_never_trained_on():
    from research.diverse_data import HELDOUT, split
    pool = prompts()
    train, held = split(pool)
    assert len(held) == HELDOUT and train + held == pool
    assert not {p["id"] for p in train} & {p["id"] for p in held}


def test_a_batched_shard_keeps_the_teachers_top_k_and_both_turns(embedded_pair, monkeypatch):
    """research.diverse_data.shard on the real (tiny) target: one example per turn, tagged with its
    prompt; each reply's top-K rows are the target's own log-probabilities at those positions."""
    import torch
    from research import distill_smollm2 as distill
    from research.diverse_data import shard
    from research.eval_set import chat_ids
    tok, model = embedded_pair.tokenizer, embedded_pair.target
    monkeypatch.setattr(tok, "chat_template", TEMPLATE, raising=False)
    monkeypatch.setattr(distill, "MAX_NEW", 5)
    monkeypatch.setattr(distill, "TOP_K", 4)
    pool = [p for p in prompts() if p["kind"] == "multiturn"][:1] + [p for p in prompts() if p["kind"] == "maths"][:2]
    out = shard(model, tok, pool, 0.7, batch=2, seed=0, deadline=float("inf"))
    rows = [chat_ids(tok, p["messages"]) for p in pool]
    assert len(distill.sample_rows(model, tok, rows, 0.7, 2, 0, deadline=0.0)) == 2   # a past cap: one batch
    assert sorted((e["prompt_id"], e["turn"]) for e in out) == sorted(
        [(p["id"], 1) for p in pool] + [(pool[0]["id"], 2)])
    for e in out:
        n = len(e["ids"]) - e["first"] - 1                               # reply tokens
        assert 0 < n <= 5 and e["tk_ids"].shape == e["tk_lp"].shape == (n, 4)
        if e["turn"] == 1:
            p = next(q for q in pool if q["id"] == e["prompt_id"])
            assert e["ids"][:e["first"] + 1].tolist() == chat_ids(tok, p["messages"])
        with torch.no_grad():
            logits = model(input_ids=e["ids"][None]).logits[0, e["first"]:e["first"] + n]  # [n, V]
        full = torch.log_softmax(logits.float(), -1)                      # [n, V], this pass alone
        got = full.gather(1, e["tk_ids"].long())                          # the kept ids' log-probs
        # generate ran the rows left-padded in a batch: the same fp32 sums in another order, which
        # can move a value across an fp16 rounding boundary: at most one fp16 ulp, 2^-10 relative
        torch.testing.assert_close(e["tk_lp"].float(), got.half().float(), rtol=2 ** -10, atol=1e-5)
        # and they are the top 4 here too, up to the same ulp (near-ties may swap places)
        fourth = full.topk(4, -1).values[:, -1:]
        assert (got >= fourth - fourth.abs() * 2 ** -10 - 1e-5).all()


def test_continued_prompts_go_on_from_the_teachers_own_reply(embedded_pair, monkeypatch):
    """research.diverse_data.continued: each turn-1 reply becomes a summarising prompt (only for
    REPLY_SUMMARY_KINDS) or the same conversation with the reply as the assistant's turn and a
    FOLLOW_UPS turn after it; a reply that quotes the evaluation set is dropped."""
    import torch
    from research.diverse_data import continued
    from research.eval_set import chat_ids
    tok = embedded_pair.tokenizer
    monkeypatch.setattr(tok, "chat_template", TEMPLATE, raising=False)
    pool = prompts()[:60]
    said = ["the teacher's reply number %d, in words" % i for i in range(len(pool))]
    said[7] = load_eval()[3]["messages"][0]["content"]                    # a leak: must be dropped
    examples = [{"prompt_id": p["id"], "turn": 1, "first": len(c) - 1,
                 "ids": torch.tensor(c + tok(r, add_special_tokens=False)["input_ids"])}
                for p, r in zip(pool, said) for c in [chat_ids(tok, p["messages"])]]
    examples.append({**examples[0], "turn": 2})                           # turn 2: not continued
    out = continued(tok, examples, pool, seed=0)
    assert [q["id"].split("/")[0] for q in out] == [p["id"] for i, p in enumerate(pool) if i != 7]
    kinds = Counter(q["kind"] for q in out)
    assert kinds["summarise"] > 0 and kinds["multiturn"] > 0
    for q in out:
        i = next(i for i, p in enumerate(pool) if p["id"] == q["id"].split("/")[0])
        text = tok.decode(tok(said[i], add_special_tokens=False)["input_ids"], skip_special_tokens=True).strip()
        if q["kind"] == "summarise":
            assert pool[i]["kind"] in diverse_prompts.REPLY_SUMMARY_KINDS and q["id"].endswith("/summary")
            assert text in q["messages"][0]["content"] and len(q["messages"]) == 1
        else:
            assert q["messages"][:-2] == pool[i]["messages"] and q["messages"][-2] == {"role": "assistant",
                                                                                      "content": text}
            assert q["messages"][-1]["role"] == "user" and q["messages"][-1]["content"] in diverse_prompts.FOLLOW_UPS


def test_kinds_choose_an_extra_rounds_prompts():
    """--kinds keeps the training prompts of those kinds, and names only kinds the pool has."""
    from research.diverse_data import of_kinds, split
    from research.diverse_prompts import KINDS
    train, _ = split(prompts())
    assert KINDS == sorted({p["kind"] for p in prompts()})
    weak = of_kinds(train, ["languages", "summarise"])
    assert weak and {p["kind"] for p in weak} == {"languages", "summarise"}
    assert len(weak) == sum(p["kind"] in ("languages", "summarise") for p in train)
    assert of_kinds(train, []) == train
    from argparse import Namespace
    from research.diverse_data import shard_name
    args = Namespace(heldout=False, round=5, temperature=0.7, continue_from=None, kinds=["summarise", "languages"],
                     pool="diverse", writer="target")
    assert shard_name(args) == "diverse_r5_T0.7_languages+summarise"
    assert shard_name(Namespace(**{**vars(args), "kinds": [], "continue_from": "x"})) == "diverse_c5_T0.7"
    assert shard_name(Namespace(**{**vars(args), "kinds": [], "pool": "typed"})) == "typed_r5_T0.7"
    from research.diverse_data import shard_kinds                          # the card names such rounds
    assert shard_kinds(shard_name(args) + ".pt") == shard_kinds(shard_name(args) + ".npz") == "languages+summarise"
    assert shard_kinds("diverse_c5_T0.7.pt") is None and shard_kinds("replies_T0.7.pt") is None
    from research.diverse_data import shard_round                          # and names each round's pool
    assert shard_round(shard_name(args) + ".pt") == ("diverse", "r")
    assert shard_round("typed2_c0_T0.7.npz") == ("typed2", "c") and shard_round("typed_r1_T0.7.pt") == ("typed", "r")
    assert shard_round("typed3_r0_T1.0.npz") == ("typed3", "r")
    assert shard_round("diverse_heldout.pt") is None and shard_round("replies_T0.7.pt") is None
    from research.diverse_data import main
    with pytest.raises(SystemExit):
        main(["--cache", "unused", "--kinds", "poetry"])
