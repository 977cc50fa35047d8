"""research.eval_report: issue 42's goals judged from synthetic per-prompt rows (no model), and
research.eval_full's ordering and resumption."""
import json
from pathlib import Path

import pytest

from research.eval_report import (GOAL_ALPHA_CATEGORY, GOAL_ALPHA_OVERALL, GOAL_SPEEDUP, read_rows, report,
                                  speedups, summary, verdict)


def rows_with(alpha_by_cat: dict, prompts: int = 4, spread: float = 0.0, speedup=None) -> list[dict]:
    """`prompts` rows per category, alphas alpha +- spread (alternating), 10 positions each."""
    out = []
    for cat, alpha in alpha_by_cat.items():
        for i in range(prompts):
            a = alpha + (spread if i % 2 else -spread)
            row = {"id": f"{cat}-{i}", "category": cat, "alphas": [a] * 10}
            if speedup is not None:
                row["greedy"] = {"gamma=1": {"speedup": speedup[i % len(speedup)], "identical": True},
                                 "gamma=2": {"speedup": speedup[i % len(speedup)] - 0.1, "identical": True}}
            out.append(row)
    return out


def test_verdict_reads_the_interval_not_the_point():
    assert verdict([0.56, 0.60], 0.55) == "met"
    assert verdict([0.55, 0.60], 0.55) == "met"                 # at the goal counts
    assert verdict([0.40, 0.54], 0.55) == "not met"
    assert verdict([0.50, 0.60], 0.55) == "not settled"
    assert verdict([None, None], 0.55) == "not measured"
    assert verdict([0.9, 0.9], 0.55, prompts=1) == "too few prompts"


def test_all_goals_met():
    s = summary(rows_with({"a": 0.6, "b": 0.7}, speedup=[1.4, 1.35, 1.5, 1.32]), n_boot=200)
    assert [g["verdict"] for g in s["goals"]] == ["met", "met", "met", "met"]
    assert s["speedup"]["gamma=1"] == {"median": pytest.approx(1.375), "range": [1.32, 1.5], "prompts": 8,
                                       "identical": True}
    assert s["goals"][-1]["at"] == "gamma=1"                     # the gamma with the best median


def test_goals_fail_one_by_one():
    s = summary(rows_with({"a": 0.6, "b": 0.3}, speedup=[1.2, 1.25]), n_boot=200)
    by_goal = {g["goal"]: g["verdict"] for g in s["goals"]}
    assert by_goal == {f"alpha >= {GOAL_ALPHA_OVERALL} overall": "not met",         # 0.45 overall
                       f"alpha >= {GOAL_ALPHA_CATEGORY} in a": "met",
                       f"alpha >= {GOAL_ALPHA_CATEGORY} in b": "not met",
                       f"median speed-up >= {GOAL_SPEEDUP}x": "not met"}
    assert s["alpha"]["overall"]["alpha"] == pytest.approx(0.45)


def test_noisy_category_near_the_goal_is_not_settled():
    s = summary(rows_with({"a": 0.42}, prompts=6, spread=0.3), n_boot=500)
    low, high = s["alpha"]["a"]["ci95"]
    assert low < GOAL_ALPHA_CATEGORY < high
    assert s["goals"][1]["verdict"] == "not settled"


def test_no_speed_rows_means_no_speed_goal():
    s = summary(rows_with({"a": 0.6}), n_boot=100)
    assert s["speedup"] == {} and len(s["goals"]) == 2
    assert speedups([]) == {}


def test_greedy_agreement_is_token_weighted():
    rows = [{"category": "a", "alphas": [0.5] * 10, "positions": 10, "greedy_agreement": 0.2},
            {"category": "a", "alphas": [0.5] * 30, "positions": 30, "greedy_agreement": 0.6},
            {"category": "b", "alphas": [0.5] * 20, "positions": 20, "greedy_agreement": 1.0}]
    s = summary(rows, n_boot=50)
    assert s["greedy_agreement"] == {"a": 0.5, "b": 1.0, "overall": pytest.approx((2 + 18 + 20) / 60, abs=1e-4)}
    assert list(s["greedy_agreement"])[-1] == "overall"
    assert "| a | 2 | 40 | 0.500 | 0.500–0.500 | met | 0.500 |" in report(rows)


def test_speedups_flag_a_mismatch():
    rows = rows_with({"a": 0.6}, prompts=2, speedup=[1.4])
    rows[1]["greedy"]["gamma=2"]["identical"] = False
    s = speedups(rows)
    assert s["gamma=1"]["identical"] and not s["gamma=2"]["identical"]


def test_report_markdown(tmp_path):
    rows = rows_with({"a": 0.6, "b": 0.3}, speedup=[1.4, 1.2])
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    assert read_rows(path) == rows
    text = report(rows)
    assert "| a | 4 | 40 | 0.600 | 0.600–0.600 | met | – |" in text
    assert "| b | 4 | 40 | 0.300 | 0.300–0.300 | not met | – |" in text
    assert "| 1 | 8 | 1.300× | 1.200–1.400× | yes |" in text
    assert "median speed-up ≥ 1.3×: met" in text and "α ≥ 0.55 overall: not met" in text
    assert "every category: not met or not settled in b." in text


def test_round_robin_and_resume(tmp_path):
    from research.eval_full import done_ids, round_robin
    prompts = [{"id": i, "category": c} for i, c in enumerate("aaabbc")]
    assert [p["id"] for p in round_robin(prompts)] == [0, 3, 5, 1, 4, 2]
    assert round_robin([]) == []
    path = tmp_path / "run.jsonl"
    assert done_ids(path) == set()
    path.write_text('{"id": "x"}\n\n{"id": "y"}\n')
    assert done_ids(path) == {"x", "y"}


TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"


def test_measure_one_on_the_embedded_pair(embedded_pair, monkeypatch):
    """A real row: alpha over the reply, the greedy speed-up at gamma 1 and 2 with output
    identical to plain decoding, seeded by the prompt's index; summary reads such rows."""
    from research.eval_full import measure_one
    from research.eval_set import load
    monkeypatch.setattr(embedded_pair.tokenizer, "chat_template", TEMPLATE, raising=False)
    prompts = [p for p in load() if p["id"] in ("code-01", "creative-01")]
    rows = [measure_one(embedded_pair, p, i, 0.7, 8, (1, 2), False, False) for i, p in enumerate(prompts)]
    for row in rows:
        assert 0 < row["positions"] <= 8 and 0 <= row["alpha"] < 1
        assert set(row["greedy"]) == {"gamma=1", "gamma=2"}
        assert all(v["identical"] and v["speedup"] > 0 for v in row["greedy"].values())
    again = measure_one(embedded_pair, prompts[0], 0, 0.7, 8, (), False, False)
    assert again["alphas"] == rows[0]["alphas"] and "greedy" not in again
    speed_only = measure_one(embedded_pair, prompts[0], 0, 0.7, 8, (1,), False, False, rounds=2, alpha=False)
    assert set(speed_only) == {"id", "category", "greedy", "plain_tokens_per_s", "seconds"}
    assert speed_only["greedy"]["gamma=1"]["identical"]
    s = summary(rows, n_boot=100)
    assert s["alpha"]["overall"]["prompts"] == 2 and s["speedup"]["gamma=1"]["prompts"] == 2


def test_realistic_stage_on_the_embedded_pair(embedded_pair, monkeypatch):
    """evaluate_smollm2.realistic: alpha per category on the first prompt of each category."""
    from research.evaluate_smollm2 import realistic
    monkeypatch.setattr(embedded_pair.tokenizer, "chat_template", TEMPLATE, raising=False)
    out = realistic(embedded_pair, 1, 4)
    assert out["prompts_per_category"] == 1 and len(out["per_prompt"]) == 9
    assert out["alpha"]["overall"]["prompts"] == 9 and out["speedup"] == {}
    assert all(g["verdict"] == "too few prompts" for g in out["goals"] if "category" in g)


def test_card_section_from_a_written_summary():
    """card_smollm2._realistic prints the summary's table, settings and coverage; nothing without it."""
    from research.card_smollm2 import _realistic
    from research.eval_report import markdown
    rows = rows_with({"a": 0.6, "b": 0.3}, speedup=[1.4, 1.2])
    doc = {"settings": {"draft": "shipped", "temperature": 0.7, "tokens": 48, "fast": True, "int8": True,
                        "mkl_cbwr": "AVX512", "threads": 1},
           "prompts_done": 8, "prompts_in_set": 148, "seconds": 600, "cpu": "AMD EPYC", "cpu_isa": "AVX512",
           "written_on": "2000-01-02", **summary(rows)}
    text = _realistic(doc)
    assert markdown(doc) in text and "2000-01-02" in text and "8 of the 148" in text
    assert "`MKL_CBWR=AVX512 python -m research.eval_full --tokens 48 --fast --int8`" in text
    assert "stopped when its time ran out" in text and "{" not in text
    assert "with `--gammas 1 2` for its first prompts, decoded the first 8 prompts of the run's order (4 of" in text
    assert _realistic(None) == ""
    cov = [{"category": "a", "positions": 10, "mass_T=0.7": 0.9, "mass_T=1.0": 0.8, "argmax_kept": 1.0},
           {"category": "b", "positions": 30, "mass_T=0.7": 0.5, "mass_T=1.0": 0.4, "argmax_kept": 0.5}]
    with_cov = _realistic(doc, cov)
    assert "kept tokens hold 0.600 of the target's probability at T = 0.7" in with_cov
    assert "2 replies, each resampled exactly): b 0.500, a 0.900." in with_cov
    assert "ran out" not in _realistic({**doc, "prompts_done": 148})
    assert "--gammas" not in _realistic({**doc, "speedup": {}})
    speed_run = {**doc, "speed_settings": {**doc["settings"], "rounds": 3}, "speed_seconds": 120}
    assert ("`MKL_CBWR=AVX512 python -m research.eval_full --speed-only --gammas 1 2 --rounds 3 --tokens 48 "
            "--fast --int8` (2 min)") in _realistic(speed_run)
    assert "3 rounds:" in _realistic(speed_run)


def test_summary_takes_speed_ups_from_a_separate_run():
    alpha_rows = rows_with({"a": 0.6, "b": 0.7}, speedup=[9.0])
    speed_rows = [{"id": r["id"], "category": r["category"], "greedy": r["greedy"]}
                  for r in rows_with({"a": 0.6}, prompts=3, speedup=[1.1, 1.2, 1.6])]
    s = summary(alpha_rows, n_boot=50, speed_rows=speed_rows)
    assert s["speedup"]["gamma=1"]["median"] == 1.2 and s["speedup"]["gamma=1"]["prompts"] == 3
    assert s["goals"][-1]["verdict"] == "not met"
    assert summary(alpha_rows, n_boot=50)["speedup"]["gamma=1"]["median"] == 9.0


def test_the_shipped_card_quotes_the_committed_realistic_run():
    """demo_models/smollm2_draft/README.md carries the table of research/runs/eval_full_shipped.json,
    and that summary is what its JSON lines give (no model needed)."""
    from app.assets import SMOLLM2_DRAFT_DIR
    from research.card_smollm2 import COVERAGE, REALISTIC, _realistic, before_label
    from research.eval_report import markdown
    doc = json.loads(REALISTIC.read_text())
    coverage = read_rows(COVERAGE)
    train = json.loads((SMOLLM2_DRAFT_DIR / "train_log.json").read_text())
    whose = before_label(train)  # a fine-tuned draft: that run measured the draft it started from
    assert _realistic(doc, coverage, whose) in (SMOLLM2_DRAFT_DIR / "README.md").read_text()
    assert {r["id"] for r in coverage} == {r["id"] for r in read_rows(REALISTIC.parent / "eval_full_shipped.jsonl")}
    alpha_rows = read_rows(REALISTIC.parent / "eval_full_shipped.jsonl")
    speed_rows = read_rows(REALISTIC.parent / Path(doc["speed_source"]).name) if doc.get("speed_source") else None
    assert markdown(summary(alpha_rows, speed_rows=speed_rows)) == markdown(doc)
    assert doc["prompts_done"] == len(alpha_rows)


def test_the_shipped_card_is_what_its_logs_write():
    """demo_models/smollm2_draft/README.md is exactly research.card_smollm2's output from the
    committed logs and runs; for a fine-tuned draft it carries the before/after table of its
    compare_realistic.json, and the log it started from is the GPU route's."""
    from app.assets import SMOLLM2_DRAFT_DIR
    from research import card_smollm2
    card = (SMOLLM2_DRAFT_DIR / "README.md").read_text()
    before = card
    try:
        card_smollm2.main()
        assert (SMOLLM2_DRAFT_DIR / "README.md").read_text() == before
    finally:
        (SMOLLM2_DRAFT_DIR / "README.md").write_text(before)
    tuned = SMOLLM2_DRAFT_DIR / card_smollm2.FINETUNE_COMPARE
    step = SMOLLM2_DRAFT_DIR / card_smollm2.FINETUNE_STEP_COMPARE  # against the draft it replaced
    if tuned.is_file():
        table = card_smollm2._finetune_table(json.loads(tuned.read_text()),
                                             json.loads(step.read_text()) if step.is_file() else None)
        assert table in card
    else:
        assert "## Fine-tuned" not in card


def test_median_ci_resamples_prompts():
    """The median's bootstrap interval: a point for identical prompts, around the median for a
    tight set, and across both modes for a set split in two."""
    from research.eval_report import median_ci
    assert median_ci([1.5] * 8) == [1.5, 1.5]
    tight = median_ci([1.30 + 0.01 * i for i in range(21)])               # median 1.40
    assert 1.33 < tight[0] <= 1.40 <= tight[1] < 1.47
    split = median_ci([1.0] * 8 + [2.0] * 8)
    assert split == [1.0, 2.0]


def _defaults_rows(values: dict[str, list[float]]) -> list[dict]:
    return [{"id": f"p{i}", "draft": d, "speedup": {"min": v, "median": v, "max": v, "n": 3}, "identical": True,
             "settings": {"gamma": 4, "depth_policy": "roofline", "max_new_tokens": 64}, "load_avg": [1.0, 1.5],
             "command": "python -m app generate --baseline PROMPT"} for d, vs in values.items() for i, v in enumerate(vs)]


@pytest.mark.parametrize("after, word", [([1.5, 1.45, 1.6, 1.5, 1.55, 1.4], "met"),
                                         ([1.1, 1.2, 1.15, 1.05, 1.2, 1.1], "not met"),
                                         ([1.2, 1.4, 1.25, 1.35, 1.3, 1.32], "not settled")])
def test_the_app_defaults_paragraph_judges_this_draft_by_the_medians_interval(after, word):
    from research.card_smollm2 import _defaults_speed
    text = _defaults_speed(_defaults_rows({"old": [1.0] * 6, "new": after}), "x.jsonl")
    assert text.endswith(f"a median of at least {GOAL_SPEEDUP}× for this draft: {word}.\n")
    assert "old: **1.00×** median over 6 prompts" in text and "`research/runs/x.jsonl`" in text
    assert _defaults_speed(None) == ""


def test_a_draft_fine_tuned_twice_describes_each_fine_tune():
    """research.distill_smollm2.lineage walks "resumed_from" back to the first draft; the card
    gives every fine-tune its own section and calls the older speed runs by what they timed."""
    from app.assets import SMOLLM2_DRAFT_DIR
    from research.card_smollm2 import _finetune
    from research.distill_smollm2 import lineage
    shipped = json.loads((SMOLLM2_DRAFT_DIR / "train_log.json").read_text())
    if "resumed_from" not in shipped:
        pytest.skip("the shipped draft was not fine-tuned")
    root, log = lineage(shipped)[:2]                                      # the first draft, its first fine-tune
    twice = {**log, "resumed_from": log}
    assert lineage(twice) == [root, log, twice] and lineage(log) == [root, log]
    speed = {"before": [{"id": "a", "greedy": {"gamma=1": {"speedup": 1.1, "identical": True}}, "fast": True,
                         "int8": True, "rounds": 3, "tokens": 48, "threads": 1}]}
    speed["after"] = speed["before"]
    text = _finetune(twice, {"speed": speed})
    assert "trained further twice" in text and "### First fine-tune" in text and "### Second fine-tune" in text
    assert "after the first fine-tune, γ = 1" in text and "before the fine-tunes, γ = 1" in text
    once = _finetune(log, {"speed": speed})
    assert "### The fine-tune" in once and "after, γ = 1" in once and "Second" not in once


def test_the_defaults_paragraph_names_thread_settings_and_judges_the_default_one():
    """Rows of benchmarks/defaults_speedup.py carry "threads": each (draft, threads) is its own
    side, and the goal is judged on this draft at torch's default threads, not on whichever
    side came last."""
    from research.card_smollm2 import _defaults_speed
    rows = _defaults_rows({"old": [1.0] * 6, "new": [1.5, 1.45, 1.6, 1.5, 1.55, 1.4]})
    for r in rows:
        r.update(threads="default", torch_threads=2, draft_index=int(r["draft"] == "new"))
    ones = [{**r, "threads": "1", "speedup": {**r["speedup"], "median": 1.05},
             "command": r["command"].replace("--baseline", "--baseline --threads 1")} for r in rows if r["draft"] == "new"]
    text = _defaults_speed(rows + ones, "x.jsonl")
    reordered = _defaults_speed(ones + rows, "x.jsonl")  # the rows' order moves the sides, not the verdict
    assert reordered != text and reordered.endswith("for this draft at the default threads: met.\n")
    assert "new, torch's default threads (2): **1.50×**" in text and "new, --threads 1: **1.05×**" in text
    assert "`python -m app generate --baseline --threads 1 PROMPT`" in text
    assert text.endswith("for this draft at the default threads: met.\n")
