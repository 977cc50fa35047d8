"""The flagship teacher's record of sampled replies (research/teacher_record.py) and the data
stage's use of it: the ids round-trip, the top-K rebuilt from them by one forward pass is the one
that sampling kept, and training logs exactly the shards it loaded. A tiny random Llama stands in
for the teacher (the flagship is not needed)."""
import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from research import distill_smollm2 as distill
from research.teacher_record import RECORD_DIR, load_record, record_path, recorded_seconds, repack, save_record


class CharTokenizer:
    """Just what distill.replies() asks of a tokenizer: a chat template and ids for its text."""
    pad_token_id, eos_token_id = 0, 2

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "<" + messages[0]["content"] + ">"

    def __call__(self, text, add_special_tokens):
        return {"input_ids": [3 + ord(c) % 37 for c in text]}


@pytest.fixture(scope="module")
def teacher():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, pad_token_id=0, eos_token_id=2)
    return LlamaForCausalLM(cfg).eval()


def test_record_round_trips_ids_and_first(tmp_path):
    examples = [{"ids": torch.tensor([5, 49151, 7]), "first": 1, "tk_ids": None},
                {"ids": torch.tensor([9]), "first": 0}]
    path = record_path("replies_T0.7.pt", tmp_path)
    assert path.name == "replies_T0.7.npz"
    save_record(examples, path)
    back = load_record(path)
    assert recorded_seconds(path) is None
    save_record(examples, path, seconds=12.5)
    assert recorded_seconds(path) == 12.5
    assert [e["ids"].tolist() for e in back] == [[5, 49151, 7], [9]] and [e["first"] for e in back] == [1, 0]
    with pytest.raises(ValueError, match="uint16"):
        save_record([{"ids": torch.tensor([70_000]), "first": 0}], tmp_path / "bad.npz")


def test_records_are_lzma_zips_that_np_load_reads_and_repack_keeps_the_arrays(tmp_path):
    """LZMA keeps the committed records small enough for one device call (test_demo_models); a
    record written by np.savez_compressed (deflate) repacks to the same arrays, smaller."""
    import zipfile

    import numpy as np
    ids = np.tile(np.arange(300, 700, dtype=np.uint16), 50)  # [20000], repetitive like replies
    old = tmp_path / "old.npz"
    np.savez_compressed(old, ids=ids, lengths=np.array([20000], dtype=np.int32),
                        first=np.array([3], dtype=np.int32), seconds=np.float64(np.nan))
    before, after = repack(old)
    assert after < before
    assert [e["ids"].tolist() for e in load_record(old)] == [ids.tolist()] and recorded_seconds(old) is None
    save_record([{"ids": torch.tensor([5, 6]), "first": 0}], tmp_path / "new.npz")
    for path in [old, tmp_path / "new.npz", *sorted(RECORD_DIR.glob("*.npz"))]:
        with zipfile.ZipFile(path) as z:
            assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_LZMA}, path.name


def test_rebuilt_topk_is_the_one_sampling_kept(teacher, monkeypatch):
    monkeypatch.setattr(distill, "MAX_NEW", 12)
    prompts = ["a", "a longer prompt", "mid length", "zz", "another one", "x"]  # left padding varies
    sampled = distill.replies(teacher, CharTokenizer(), prompts, 0.7, batch=3, seed=1, deadline=float("inf"))
    recorded = [{"ids": e["ids"], "first": e["first"]} for e in sampled]
    rebuilt = distill.teacher_topk(teacher, recorded, batch=4)   # other batches, right padding
    assert len(rebuilt) == len(sampled)
    for s, r in zip(sampled, rebuilt):
        assert torch.equal(s["ids"], r["ids"]) and s["first"] == r["first"]
        assert r["tk_ids"].shape == s["tk_ids"].shape == (len(s["ids"]) - s["first"] - 1, distill.TOP_K)
        assert torch.equal(s["tk_ids"], r["tk_ids"])
        torch.testing.assert_close(s["tk_lp"].float(), r["tk_lp"].float(), atol=2e-3, rtol=0)


def test_shard_rebuilds_from_its_record_and_records_new_ones(tmp_path):
    made, rebuilt = [], []
    example = {"ids": torch.tensor([1, 2, 3]), "first": 0, "tk_ids": torch.zeros(2, 1), "tk_lp": torch.zeros(2, 1)}

    def make():
        made.append(1)
        return [example]

    def rebuild(recorded):
        rebuilt.append(recorded)
        return [dict(recorded[0], tk_ids=torch.ones(2, 1), tk_lp=torch.ones(2, 1))]

    record = tmp_path / "record" / "replies_T0.7.npz"
    part, how = distill._shard(tmp_path / "a.pt", make, rebuild, record)     # nothing yet: sampled
    assert made == [1] and record.is_file() and recorded_seconds(record) == how["seconds"]
    part, how = distill._shard(tmp_path / "b.pt", make, rebuild, record)     # no cache, a record
    assert made == [1] and rebuilt[0][0]["ids"].tolist() == [1, 2, 3]
    assert set(how) == {"seconds", "rebuilt_from_record_seconds"} and how["seconds"] == recorded_seconds(record)
    assert torch.equal(torch.load(tmp_path / "b.pt")[0]["tk_ids"], torch.ones(2, 1))
    part, how = distill._shard(tmp_path / "b.pt", make, rebuild, record, seconds=5.0)  # cached: nothing new
    assert how == {} and len(rebuilt) == 1 and made == [1]
    part, how = distill._shard(tmp_path / "b.pt", make, rebuild, record)     # cached, its log lost:
    assert how == {"seconds": recorded_seconds(record)} and len(rebuilt) == 1  # the record's time
    other = tmp_path / "record" / "replies_T1.0.npz"                         # cached, no record yet:
    distill._shard(tmp_path / "b.pt", make, rebuild, other, seconds=99.0)   # the log's sampling time
    assert recorded_seconds(other) == 99.0


def test_training_logs_the_shards_it_loaded_not_the_last_data_run(tmp_path):
    def shard(n):
        return [{"ids": torch.tensor([1, 2, 3]), "first": 0, "tk_ids": torch.zeros(k, 1), "tk_lp": torch.zeros(k, 1)}
                for k in range(1, n + 1)]
    for f, _ in distill.reply_shards([0.7], wide=1):
        torch.save(shard(2), tmp_path / f)
    torch.save(shard(1), tmp_path / "corpus.pt")
    torch.save(shard(1), tmp_path / "heldout.pt")
    (tmp_path / "data_log.json").write_text(json.dumps({"replies": {
        "T=0.7": {"prompts": 568, "seconds": 60.0},        # made earlier: kept, counts refreshed
        "more, round 3, T=0.7": {"examples": 9}}}))       # in the cache's log, not loaded
    replies, corpus, held, log = distill.load_data(tmp_path, [0.7], wide=1)
    assert list(log["replies"]) == [key for _, key in distill.reply_shards([0.7], wide=1)]
    assert log["replies"]["T=0.7"] == {"prompts": 568, "seconds": 60.0, "examples": 2, "tokens": 3}
    assert len(replies) == 2 * len(log["replies"]) and len(corpus) == len(held) == 1


def test_model_card_quotes_sampling_and_rebuild_times():
    from research import card_smollm2
    log = {"runs": [{"threads": 2, "seconds": 50.0}], "teacher_seconds": 6000.0,
           "replies": {"T=0.7": {"examples": 5, "tokens": 9, "seconds": 600.0},
                       "wide topics, T=0.7": {"examples": 5, "prompts": 2255, "tokens": 9, "seconds": 1200.0,
                                              "rebuilt_from_record_seconds": 300.0}}}
    text = card_smollm2._teacher_time(log)
    assert text.startswith("sampling the replies took 30 min on 2 CPU threads") and "1 of the 2 shards" in text
    assert "in 5 min" in text and "autocast" not in text
    log["replies"]["wide topics, T=0.7"]["teacher_autocast"] = "bf16"
    assert "(1 of them with the teacher's decoder under bf16 autocast" in card_smollm2._teacher_time(log)
    assert "2,255 more (451 further topics" in card_smollm2._wide(log["replies"])
    del log["replies"]["T=0.7"]["seconds"]        # a shard made before shards logged their time
    assert card_smollm2._teacher_time(log) == "100 min on 2 CPU threads"
    assert card_smollm2._wide({"T=0.7": {}}) == ""
    both = card_smollm2._wide({**log["replies"], "wide topics, round 2, T=0.7": {"prompts": 1917}})
    assert "451 further topics × 5 of the 20 templates" in both and "1,917 more (639 further topics × 3" in both


def test_corpus_windows_are_whole_with_the_teachers_topk_at_every_position(teacher, monkeypatch):
    """The corpus shard: every window asked for (no time cap cuts it: a cut shard would be cached
    and reused as if whole), CORPUS_WINDOW tokens each, and at every position the top-K of the
    teacher's own forward over that window; the same seed gives the same windows."""
    monkeypatch.setattr(distill, "CORPUS_WINDOW", 16)
    texts = ["It is a truth universally acknowledged, that a single man in possession", "of a good fortune"]
    windows = distill.corpus_windows(teacher, CharTokenizer(), texts, n_windows=5, batch=2, seed=7)
    assert len(windows) == 5 and all(w["first"] == 0 and w["ids"].shape == (16,) for w in windows)
    with torch.inference_mode():
        ids, _ = distill.topk_of(teacher(input_ids=windows[3]["ids"][None]).logits[0])    # [16, K]
    assert windows[3]["tk_ids"].shape == (16, distill.TOP_K) and torch.equal(windows[3]["tk_ids"], ids)
    again = distill.corpus_windows(teacher, CharTokenizer(), texts, n_windows=5, batch=3, seed=7)
    assert all(torch.equal(a["ids"], b["ids"]) for a, b in zip(windows, again))


def test_a_bf16_teacher_runs_its_decoder_in_bf16_and_its_output_layer_in_fp32(teacher):
    """`--teacher-bf16`: the decoder under bf16 autocast (its top-K log-probs move, a little),
    the output layer and log-softmax in fp32; without it the rebuild is bit-for-bit fp32."""
    ids = torch.tensor([3 + (7 * i) % 37 for i in range(30)])
    recorded = [{"ids": ids, "first": 4}, {"ids": ids[:20], "first": 2}]
    seen = []
    hook = teacher.lm_head.register_forward_hook(lambda m, i, out: seen.append((i[0].dtype, out.dtype)))
    try:
        exact = distill.teacher_topk(teacher, recorded, batch=2)
        fast = distill.teacher_topk(teacher, recorded, batch=2, bf16=True)
    finally:
        hook.remove()
    assert seen == [(torch.float32, torch.float32)] * 2
    gap = max((a["tk_lp"].float() - b["tk_lp"].float()).abs().max().item() for a, b in zip(exact, fast))
    assert 0 < gap < 0.1
    with torch.inference_mode():
        h = teacher.model(input_ids=ids[None]).last_hidden_state
        assert not torch.equal(distill.teacher_hidden(teacher, True, input_ids=ids[None]), h)
        assert torch.equal(distill.teacher_hidden(teacher, False, input_ids=ids[None]), h)


def test_the_data_log_marks_what_a_teacher_bf16_run_made(teacher, tmp_path, monkeypatch):
    """make_data end to end on the tiny teacher, every reply shard recorded: with
    `--teacher-bf16` the rebuilt reply shard, the held-out shard and the corpus windows are
    marked in the data log; without it, in a fresh cache, none is."""
    monkeypatch.setattr(distill, "load_teacher", lambda: (teacher, CharTokenizer()))
    monkeypatch.setattr(distill, "MORE_ROUNDS", 0)
    monkeypatch.setattr(distill, "CORPUS_WINDOW", 16)
    record = tmp_path / "record"
    for file in ("heldout.pt", "replies_T0.7.pt"):
        save_record([{"ids": torch.tensor([5, 6, 7, 8, 9, 10]), "first": 2}], record_path(file, record), 1.0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("It is a truth universally acknowledged, that a single man in possession", encoding="utf-8")
    for flag, cache in (["--teacher-bf16"], "bf16"), ([], "fp32"):
        distill.make_data(distill.parse_args(
            ["data", "--cache", str(tmp_path / cache), "--record", str(record), "--corpus", str(corpus),
             "--temperatures", "0.7", "--wide-rounds", "0", "--corpus-windows", "3", "--heldout", "1", *flag]))
        log = json.loads((tmp_path / cache / "data_log.json").read_text())
        marks = {k for k in log if k.endswith("teacher_autocast")} | {
            key for key, v in log["replies"].items() if v.get("teacher_autocast") == "bf16"}
        assert marks == ({"heldout_teacher_autocast", "corpus_teacher_autocast", "T=0.7"} if flag else set())


def test_every_round_record_has_one_row_whose_counts_are_the_files():
    """demo_models/smollm2_replies/README.md's table of the diverse and typed rounds: one row per
    record, and its replies, reply tokens and seconds are the .npz's own, so a committed round
    cannot go undescribed nor its row drift from the file."""
    import re

    import numpy as np

    from research.teacher_record import RECORD_DIR
    rows = {m[1]: m for m in re.finditer(r"^\| `([\w.+]+\.npz)` \| .* \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \|$",
                                           (RECORD_DIR / "README.md").read_text(encoding="utf-8"), re.M)}
    rounds = sorted(p.name for p in RECORD_DIR.glob("*.npz") if p.name.startswith(("diverse_", "typed")))
    assert rounds and sorted(rows) == rounds
    num = lambda text: int(text.replace(",", ""))  # noqa: E731
    for name, m in rows.items():
        with np.load(RECORD_DIR / name) as z:
            replies, tokens = len(z["lengths"]), int((z["lengths"] - z["first"] - 1).sum())
            seconds = round(float(z["seconds"]))
        assert (num(m[2]), num(m[3]), num(m[4])) == (replies, tokens, seconds), name
