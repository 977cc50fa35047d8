"""research.card_smollm2: a fine-tune's data paragraph names the rounds it learned from, so a new
pool or a continued round of it is described, not left to the reader to guess from file names."""
import copy
import json

from app.assets import SMOLLM2_DRAFT_DIR
from research.card_smollm2 import _finetune_step, _ordinal
from research.distill_smollm2 import lineage
from research.typed_prompts import prompts


def step_with_shards(names: list[str], **fields) -> str:
    """The shipped draft's last fine-tune paragraph, as if it had trained on shards `names`
    (and had these other log `fields`)."""
    chain = lineage(json.loads((SMOLLM2_DRAFT_DIR / "train_log.json").read_text()))
    parent, log = chain[-2], copy.deepcopy(chain[-1])
    log["data"]["replies"] = {f"{n}.pt": {"examples": 10, "tokens": 1000} for n in names}
    return _finetune_step({**log, **fields}, parent, "A fine-tune")


def test_a_step_that_unfolded_its_parents_scale_says_so():
    said = "The parent's calibrated logit scale (1.2) was divided back out"
    assert said in step_with_shards(["typed4_r0_T0.7"], unfolded_scale=1.2)
    assert "divided back out" not in step_with_shards(["typed4_r0_T0.7"], unfolded_scale=None)


def test_a_step_with_the_rejection_rate_as_a_loss_says_so():
    said = ", plus 1 × the rejection rate at T = 0.7 (1 − Σ min(p, q) over the kept top-32, both tempered"
    assert said in step_with_shards(["typed4_r0_T0.7"], tvd=1.0, tvd_temperature=0.7)
    assert "rejection rate" not in step_with_shards(["typed4_r0_T0.7"], tvd=0.0)


def test_continued_rounds_are_named_by_their_pool():
    text = step_with_shards(["diverse_c4_T0.7", "typed2_c0_T0.7", "typed2_r0_T1.0"])
    assert "The `diverse_c*` and `typed2_c*` rounds went on from a round's own first replies" in text
    assert "went on from" not in step_with_shards(["typed_r0_T0.7", "diverse_r8_T0.7"])


def test_every_typed_pool_has_a_card_sentence():
    from research.card_smollm2 import TYPED_POOLS
    from research.typed_prompts import POOL_DIRS
    assert list(TYPED_POOLS) == list(POOL_DIRS)


def test_each_typed_pool_is_described_with_its_size():
    both = step_with_shards(["typed_r1_T0.7", "typed2_r0_T0.7"])
    assert f"answered the {len(prompts()):,} prompts of `research/typed_prompts/`" in both
    assert f"answered the {len(prompts(pool='typed2')):,} prompts of `research/typed_prompts2/`" in both
    assert "typed_prompts2" not in step_with_shards(["typed_r1_T0.7"])
    third = step_with_shards(["typed3_r0_T0.7"])
    assert f"answered the {len(prompts(pool='typed3')):,} prompts of `research/typed_prompts3/`" in third
    assert "typed_prompts2" not in third
    fourth = step_with_shards(["typed4_r0_T0.7", "typed3_r1_T0.7"])
    assert f"answered the {len(prompts(pool='typed4')):,} prompts of `research/typed_prompts4/`" in fourth
    assert "typed_prompts4" not in third
    assert "research/typed_prompts/`" not in step_with_shards(["typed2_r0_T0.7"])


def test_the_first_pool_is_described_only_when_its_rounds_are_there():
    assert "`research/diverse_prompts.py`" in step_with_shards(["diverse_r8_T0.7", "typed_r0_T0.7"])
    assert "`research/diverse_prompts.py`" not in step_with_shards(["typed_r1_T0.7", "typed2_r0_T0.7"])


def test_a_current_run_is_shown_only_for_the_draft_it_timed(tmp_path, monkeypatch):
    """A current run (benchmarks/defaults_speedup.py rows, found by current_runs) enters the card while
    its last --draft's weights hash is the shipped draft's; once another draft ships, it drops out."""
    import research.card_smollm2 as card
    row = {"id": "p", "draft": "d", "draft_index": 1, "threads": "default", "speedup": {"median": 1.4, "n": 3},
           "identical": True, "load_avg": [0.1, 0.2], "command": "c",
           "settings": {"gamma": 4, "depth_policy": "roofline", "max_new_tokens": 64}}
    old = {**row, "draft_index": 0, "draft_sha256": "0" * 16}
    path = tmp_path / "defaults_threads.jsonl"
    monkeypatch.setattr(card, "RUNS", tmp_path)
    for sha, shown in ((card.weights_sha256(), True), ("f" * 16, False)):
        path.write_text("\n".join(json.dumps(r) for r in ({**row, "draft_sha256": sha}, old)) + "\n")
        assert card.read_finetune_runs(6).get("current", [(None, None)])[0][1] == (path.name if shown else None)


def test_the_card_names_mkls_code_path_only_as_the_train_log_records_it():
    """train_draft logs MKL_CBWR (None when unset); logs from before that field were all written
    under MKL_CBWR=AVX512, so their card says so."""
    import research.card_smollm2 as card
    assert card._mkl({"mkl_cbwr": None}) == ""
    assert card._mkl({"mkl_cbwr": "AVX2"}) == " (with `MKL_CBWR=AVX2`)"
    assert card._mkl({}) == " (with `MKL_CBWR=AVX512`)"


def test_every_fine_tune_gets_a_heading_however_many_there_are():
    assert [_ordinal(n) for n in (1, 7, 8, 10)] == ["First", "Seventh", "Eighth", "Tenth"]
    assert [_ordinal(n) for n in (11, 12, 13, 21, 22, 23, 101, 111)] == [
        "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th"]


def test_current_runs_are_the_defaults_runs_that_belong_to_no_fine_tune(tmp_path, monkeypatch):
    import research.card_smollm2 as card
    names = ("defaults_finetune.jsonl", "defaults_finetune9.jsonl", "defaults_threads.jsonl",
             "defaults_ninth_48prompts.jsonl", "eval_speed_parent.jsonl")
    for name in names:
        (tmp_path / name).write_text("")
    monkeypatch.setattr(card, "RUNS", tmp_path)
    assert [p.name for p in card.current_runs()] == ["defaults_ninth_48prompts.jsonl", "defaults_threads.jsonl"]


def test_each_committed_defaults_run_belongs_to_one_fine_tune():
    from research.card_smollm2 import RUNS, defaults_run
    files = sorted(RUNS.glob("defaults_finetune*.jsonl"))
    assert files == sorted(defaults_run(step) for step in range(1, len(files) + 1))
    assert defaults_run(1).name == "defaults_finetune.jsonl" and defaults_run(12).name == "defaults_finetune12.jsonl"


def test_the_fine_tune_section_gives_the_kept_tokens_coverage_per_category():
    """The card quotes the shipped vocabulary's share of the target's mass on the realistic set,
    overall and per category, as research.vocab_coverage.summarise computes it from
    FINETUNE_COVERAGE's rows (the card before quoted only the 16,384 tokens kept before widening)."""
    from research.card_smollm2 import FINETUNE_COVERAGE
    from research.eval_report import read_rows
    from research.vocab_coverage import summarise
    card = (SMOLLM2_DRAFT_DIR / "README.md").read_text()
    s = summarise(read_rows(FINETUNE_COVERAGE))
    kept = len(json.loads((SMOLLM2_DRAFT_DIR / "config.json").read_text())["draft_vocab_ids"])
    lead = f"On the same replies the {kept:,} tokens this draft keeps hold {s['overall']['mass_T=0.7']:.3f}"
    assert lead in card
    line = next(line for line in card.splitlines() if line.startswith(lead))
    for category in (k for k in s if k != "overall"):
        assert f"{category} {s[category]['mass_T=0.7']:.3f}" in line
