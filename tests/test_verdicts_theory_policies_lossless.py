"""The verdicts of the theory, policies and lossless lessons (issue 37) as pure functions of
numbers: synthetic cases where the claim holds and where it fails flip the verdict, sanity
checks fire on impossible timings; lesson prompts go through the chat template; the lesson CLI
loads a preset with --pair and writes the verdict object."""
import copy
import json
from types import SimpleNamespace

import pytest

from app.lessons.common import CHAT_PROMPTS, PROMPTS, LessonError, encode, leviathan_speedup, prompts_for
from app.lessons.lossless import ArmResult, lossless_verdict, needed_n
from app.lessons.policies import noisiest, policies_verdict
from app.lessons.theory import position_acceptance, predicted_range, theory_verdict, theory_warnings
from app.lessons.verdict import Spread

S = lambda lo, mid, hi: Spread.of([lo, mid, hi])  # noqa: E731


# --------------------------------------------------------------------------- theory

def test_theory_holds_when_every_gamma_falls_in_the_predicted_range():
    held, evidence = theory_verdict([1, 2], [1.5, 1.8], [1.4, 1.7], [1.6, 1.9], [S(1.45, 1.5, 1.55), S(1.75, 1.8, 1.85)])
    assert held is True and "every γ" in evidence and "at most 0%" in evidence


def test_theory_best_gamma_mismatch_never_reads_as_agreement():
    """The issue's case: 'predicted best γ = 2 (1.26×), measured 1.67×' is a disagreement."""
    pred = [1.20, 1.26, 1.22]
    held, evidence = theory_verdict([1, 2, 3], pred, [p - 0.05 for p in pred], [p + 0.05 for p in pred],
                                    [S(1.5, 1.55, 1.6), S(1.6, 1.67, 1.7), S(1.5, 1.52, 1.55)])
    assert held is False and "predicted best γ = 2 (1.26×)" in evidence and "1.67×" in evidence
    assert "faster than predicted" in evidence and "3 of 3 γ" in evidence


def test_theory_slower_than_predicted_names_the_verify_cost_and_acceptance():
    held, evidence = theory_verdict([2, 4], [1.8, 2.0], [1.7, 1.9], [1.9, 2.1], [S(1.1, 1.2, 1.3), S(1.2, 1.3, 1.4)],
                                    e_pred=[2.1, 2.6], e_meas=[1.6, 1.9])
    assert held is False and "slower than predicted" in evidence and "leaves out" in evidence
    assert "acceptance" in evidence  # measured tokens per pass fell well short of the calibration α's
    held, evidence = theory_verdict([2, 4], [1.8, 2.0], [1.7, 1.9], [1.9, 2.1], [S(1.1, 1.2, 1.3), S(1.2, 1.3, 1.4)],
                                    verify=[1.25, 1.3])  # the measured verify time accounts for the gap
    assert held is False and "prediction fits" in evidence and "leaves out" not in evidence
    held, evidence = theory_verdict([2], [1.8], [1.7], [1.9], [S(1.1, 1.2, 1.3)], e_pred=[2.1], e_meas=[2.05])
    assert held is False and "α depends on the text" not in evidence


def test_theory_is_inconclusive_when_only_noisy_gammas_disagree():
    held, evidence = theory_verdict([1, 2], [1.5, 1.8], [1.4, 1.7], [1.6, 1.9], [S(1.45, 1.5, 1.55), S(0.6, 1.0, 1.65)])
    assert held is None and "spread is wider" in evidence
    # seen on a busy 2-core CPU: every range overlaps, one because it spans 0.17-1.67x
    held, evidence = theory_verdict([1, 4], [1.6, 2.1], [1.4, 1.6], [1.8, 2.5], [S(0.17, 0.91, 1.67), S(1.5, 1.6, 1.7)])
    assert held is None and "varied by more than 50% of its median at γ = 1" in evidence


def test_predicted_range_brackets_the_prediction():
    c = S(0.1, 0.15, 0.2)
    low, high = predicted_range(0.5, 100, c, 3)  # alpha +- 2 * sqrt(0.25 / 100) = 0.4 .. 0.6
    assert low == pytest.approx(leviathan_speedup(0.4, 3, 0.2)) and high == pytest.approx(leviathan_speedup(0.6, 3, 0.1))
    assert low < leviathan_speedup(0.5, 3, 0.15) < high
    assert predicted_range(1.0, 50, S(0.1, 0.1, 0.1), 2) == pytest.approx((3 / 1.2, 3 / 1.2))


def test_position_acceptance_counts_runs_of_accepted_drafts():
    step = lambda drafted, accepted: SimpleNamespace(draft_ids=[0] * drafted, n_accepted=accepted)  # noqa: E731
    rates, counts = position_acceptance([step(4, 4), step(4, 0), step(4, 2), step(2, 1)], 4)
    assert counts == [4, 4, 3, 3]
    assert rates == pytest.approx([3 / 4, 2 / 4, 1 / 3, 1 / 3])


def test_theory_sanity_checks_fire_on_impossible_timings():
    """alpha 0.5, gamma 2, c 0.5: at most E / (2c + 1) = 1.75 / 2 = 0.875x; 1.5x is impossible."""
    plain, fine = S(100, 101, 102), S(80, 81, 82)
    found = theory_warnings([2], [S(1.4, 1.5, 1.6)], 0.5, 0.5, plain, [fine])
    assert any("Leviathan bound" in w for w in found)
    assert not any("Leviathan bound" in w for w in theory_warnings([2], [S(0.78, 0.8, 0.82)], 0.5, 0.5, plain, [fine]))
    noisy = theory_warnings([2], [S(0.7, 0.8, 0.9)], 0.5, 0.5, S(50, 100, 150), [S(20, 80, 160)])
    assert sum("varied by" in w for w in noisy) == 1 and "widest of 2" in " ".join(noisy)


# --------------------------------------------------------------------------- policies

def test_policies_adaptive_winner_clear_of_the_rest_holds():
    held, evidence = policies_verdict(S(60, 62, 64), {1: S(90, 95, 100), 2: S(100, 105, 110)},
                                      {"heuristic": S(120, 125, 130), "roofline": S(80, 85, 90)})
    assert held is True and "heuristic is fastest, clear of the rest" in evidence


def test_policies_says_plainly_when_nothing_beat_plain_decoding():
    held, evidence = policies_verdict(S(100, 105, 110), {1: S(60, 65, 70)}, {"heuristic": S(70, 75, 80)})
    assert held is False and "plain decoding is fastest" in evidence
    assert "no policy beat plain decoding" in evidence


def test_policies_judged_against_the_best_fixed_gamma_of_the_sweep():
    held, evidence = policies_verdict(S(50, 55, 60), {1: S(90, 95, 100), 3: S(130, 135, 140)},
                                      {"confidence": S(105, 110, 115)})
    assert held is False and "fixed γ = 3 is fastest" in evidence and "already sits" in evidence


def test_policies_overlapping_spreads_name_no_winner():
    held, evidence = policies_verdict(S(90, 100, 110), {2: S(95, 105, 115)}, {"heuristic": S(100, 108, 120)})
    assert held is None and "no winner" in evidence and "none was clearly faster than plain" in evidence
    held, evidence = policies_verdict(S(90, 100, 110), {2: S(95, 105, 115)}, {})
    assert held is None and "no adaptive policy" in evidence


def test_noisiest_reports_one_warning():
    assert noisiest([("a", S(10, 10, 10))]) is None
    warning = noisiest([("a", S(5, 10, 15)), ("b", S(1, 10, 20)), ("c", S(10, 10, 10))])
    assert "b" in warning and "widest of 2" in warning and "190%" in warning


# --------------------------------------------------------------------------- lossless

def arm(variant, tv, floor, p=0.5, predicted=None):
    return ArmResult(variant, variant, tv, floor / 2, floor, p, None, predicted, [])


def test_lossless_holds_when_exact_is_within_and_each_broken_above():
    arms = [arm("exact", 0.05, 0.09, 0.4, 0.0), arm("greedy_draft", 0.6, 0.07, 0.005, 0.64),
            arm("no_residual", 0.19, 0.09, 0.005, 0.14)]
    held, evidence = lossless_verdict(2000, arms)
    assert held is True and "N = 2,000" in evidence and "0.090" in evidence  # the power, stated


def test_lossless_without_power_is_inconclusive_and_names_the_n_that_would_see_it():
    """The issue's case: N = 400, no-residual TV 0.136 under the noise floor 0.17."""
    arms = [arm("exact", 0.10, 0.17, 0.4, 0.0), arm("no_residual", 0.136, 0.17, 0.2, 0.136)]
    held, evidence = lossless_verdict(400, arms)
    assert needed_n(400, 0.17, 0.136) == 1407  # 400 * (1.5 * 0.17 / 0.136)^2 = 1406.25
    assert held is None and "N ≈ 1,407" in evidence


def test_lossless_fails_when_exact_moves_or_a_visible_bug_goes_unseen():
    held, evidence = lossless_verdict(2000, [arm("exact", 0.3, 0.09, 0.005, 0.0)])
    assert held is False and "differs from the target" in evidence
    held, evidence = lossless_verdict(2000, [arm("exact", 0.10, 0.09, 0.03, 0.0)])
    assert held is None and "by chance" in evidence
    held, evidence = lossless_verdict(2000, [arm("exact", 0.05, 0.09), arm("greedy_draft", 0.06, 0.09, 0.3, 0.5)])
    assert held is False and "though this N can see it" in evidence


# --------------------------------------------------------------------------- chat template, --pair

TEMPLATE = ("{% for m in messages %}<user>{{ m['content'] }}</user>{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_encode_sends_an_instruct_target_through_its_chat_template(embedded_pair):
    plain = encode(embedded_pair, "It is a truth")
    assert plain == embedded_pair.tokenizer("It is a truth", add_special_tokens=False)["input_ids"]
    assert prompts_for(embedded_pair) == PROMPTS and prompts_for(embedded_pair, ["x"]) == ("x",)
    tokenizer = copy.deepcopy(embedded_pair.tokenizer)
    tokenizer.chat_template = TEMPLATE
    instruct = SimpleNamespace(tokenizer=tokenizer, context=embedded_pair.context)
    wrapped = tokenizer("<user>It is a truth</user><assistant>", add_special_tokens=False)["input_ids"]
    assert encode(instruct, "It is a truth") == wrapped and len(wrapped) > len(plain)
    assert encode(instruct, "It is a truth", chat=False) == plain
    assert prompts_for(instruct) == CHAT_PROMPTS
    with pytest.raises(LessonError, match="context"):
        encode(instruct, "It is a truth", room=embedded_pair.context)


def cli(argv, capsys):
    from app.cli import main
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.usefixtures("one_thread")
def test_cli_pair_preset_writes_the_verdict_and_spreads(embedded_pair, capsys):
    code, out, err = cli(["lesson", "theory", "--pair", "embedded", "--device", "cpu", "--gammas", "1,2",
                          "--max-new-tokens", "6", "--rounds", "2", "--json", "-"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert set(d["verdict"]) >= {"claim", "held", "evidence"} and d["verdict"]["held"] in (True, False, None)
    assert set(d["plain_tokens_per_s"]) == {"min", "median", "max", "n"} and d["plain_tokens_per_s"]["n"] == 2
    assert all(set(s) == {"min", "median", "max", "n"} for s in d["measured_speedup"])
    assert d["settings"]["alpha_prompts"] != d["settings"]["prompts"]


def test_cli_pair_errors_are_one_line(capsys):
    code, _, err = cli(["lesson", "lossless", "--pair", "no-such-pair"], capsys)
    assert code == 2 and err.startswith("error: unknown model pair") and err.count("\n") == 1
    code, _, err = cli(["lesson", "lossless", "--pair", "embedded", "--target", "x"], capsys)
    assert code == 2 and "--pair names a whole pair" in err and err.count("\n") == 1
