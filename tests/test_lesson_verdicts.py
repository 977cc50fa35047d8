"""The verdicts of the knee, FLOPs, batch × depth and memory-wall lessons, as pure functions of
synthetic timings: each flips between held, not held and inconclusive with the numbers, and the
sanity checks fire on timings physics forbids (issue 37)."""
import pytest

from app.lessons.batch_depth import (batch2_verdict, boundary_verdict, emitted, impossible_cells,
                                     speedup_ranges, thresholds)
from app.lessons.common import recorded_gpu_run, repeat_decodes
from app.lessons.flops import flops_verdict, wasted_seconds
from app.lessons.knee import claim_q, knee_verdict
from app.lessons.memory_wall import memory_verdict
from app.lessons.verdict import Spread, paired_ratio


def S(*samples):
    return Spread.of(samples)


# --------------------------------------------------------------------------- knee

QS = (1, 2, 5, 8)


def knee(r5, **kw):
    return knee_verdict(QS, [S(1, 1, 1), S(1.0, 1.05, 1.1), r5, S(1.2, 1.3, 1.4)], **kw)


@pytest.mark.parametrize("r5, held", [(S(1.1, 1.2, 1.3), True), (S(1.6, 2.0, 2.5), False),
                                      (S(1.3, 1.45, 1.7), None)])
def test_knee_verdict_flips_with_t5_over_t1(r5, held):
    v = knee(r5)
    assert v.held is held and "t(5)/t(1)" in v.evidence and v.claim.startswith("a pass of 5 tokens")
    assert v.text().startswith({True: "**Held", False: "**Did not hold", None: "**Inconclusive"}[held])


def test_knee_verdict_explains_the_mechanism_from_the_roofline_class():
    assert "fixed cost" in knee(S(1.1, 1.2, 1.3), bound="overhead").evidence
    assert "weight is read once" in knee(S(1.1, 1.2, 1.3), bound="memory").evidence
    assert "no GPU run is recorded" in knee(S(1.6, 2, 2.5), on_cpu=True, gpu_run=recorded_gpu_run()).evidence


def test_knee_explanation_follows_the_verdict_not_only_the_class():
    """A memory-bound one-token pass with t(5)/t(1) above the bend (the flagship on a CPU): the
    text must not say the extra tokens ride on the same read, which the ratio contradicts."""
    failed = knee(S(1.58, 1.63, 1.76), bound="memory")
    assert failed.held is False and "ride on the same read" not in failed.evidence
    assert "slower code path" in failed.evidence
    assert "ride on the same read" in knee(S(1.1, 1.2, 1.3), bound="memory").evidence


def test_knee_floor_fires_on_an_impossible_ratio():
    v = knee_verdict((1, 2, 5), [S(1, 1, 1), S(0.1, 0.15, 0.2), S(1.1, 1.2, 1.3)])
    assert len(v.warnings) == 1 and "t(2)/t(1) = 0.15" in v.warnings[0]
    assert knee(S(1.1, 1.2, 1.3)).warnings == ()


def test_too_few_repeats_are_inconclusive():
    assert knee_verdict((1, 5), [S(1.0), S(1.1)]).held is None  # one round: no spread to judge
    assert batch2_verdict(S(1.0, 1.02, 1.05), repeats=1).held is None
    assert batch2_verdict(S(1.0, 1.02, 1.05), repeats=3).held is True


def test_knee_claim_q_without_five():
    assert claim_q((1, 2, 4, 16)) == 4 and claim_q((1, 16)) == 16 and claim_q((1,)) is None
    assert knee_verdict((1,), [S(1.0)]).held is None


def test_paired_ratio_takes_rounds_together():
    a, b = S(2.0, 4.0, 6.0), S(1.0, 2.0, 3.0)  # load doubled both in round 2, tripled in round 3
    assert paired_ratio(a, b).samples == (2.0, 2.0, 2.0)
    assert a.ratio(b).max == 6.0  # the conservative pairing would be far wider
    assert paired_ratio(S(1.0), b).max == 1.0  # unequal counts: the conservative ratio


# --------------------------------------------------------------------------- FLOPs

@pytest.mark.parametrize("ratio, held", [(S(0.7, 0.8, 0.9), True), (S(1.2, 1.39, 1.5), False),
                                         (S(0.9, 1.0, 1.1), None)])
def test_flops_verdict_flips_with_the_time_ratio(ratio, held):
    v = flops_verdict(1.6, ratio, gamma=2, why="MECHANISM")
    assert v.held is held and "1.60× the FLOPs (counted)" in v.evidence
    assert ("MECHANISM" in v.evidence) is (held is not True)  # the why only where it did not hold
    if held is False:
        assert "took 1.39× the time" in v.evidence


def test_flops_verdict_fails_without_more_flops():
    assert flops_verdict(0.9, S(0.7, 0.8, 0.9), gamma=1).held is False


class Pass:
    def __init__(self, phase, tokens, seconds):
        self.phase, self.tokens, self.seconds = phase, tokens, seconds


class Step:
    def __init__(self, n_accepted, forwards):
        self.n_accepted, self.forwards = n_accepted, forwards


def test_wasted_time_is_the_marginal_verify_and_the_rejected_drafts():
    t_pass = [1.0, 1.5, 2.0, 3.0]  # a pass of 1, 2, 3, 4 tokens
    drafts = [Pass("draft", 1, 0.1), Pass("draft", 1, 0.2), Pass("draft", 1, 0.4)]
    steps = [Step(1, drafts + [Pass("verify", 4, 3.0)]),  # 1 accepted: t(4) - t(2), drafts 2 and 3
             Step(3, drafts + [Pass("verify", 4, 3.0)])]  # all accepted: nothing wasted
    verify, draft = wasted_seconds(steps, t_pass)
    assert verify == pytest.approx(3.0 - 1.5) and draft == pytest.approx(0.2 + 0.4)


# --------------------------------------------------------------------------- batch x depth

@pytest.mark.parametrize("t2, held", [(S(1.0, 1.02, 1.05), True), (S(1.8, 2.0, 2.2), False),
                                      (S(1.2, 1.4, 1.7), None)])
def test_batch2_verdict_flips(t2, held):
    v = batch2_verdict(t2.ratio(S(1.0, 1.0, 1.0)))
    assert v.held is held and "t(b=2)/t(b=1)" in v.evidence


def test_batch2_floor_fires_on_a_batch_faster_than_one():
    assert batch2_verdict(S(0.4, 0.5, 0.6)).warnings


GAMMAS = (0, 1, 2)


def ranges(*rows):
    """Rows of (gamma 1, gamma 2) speedup ranges as (low, median, high); gamma 0 is 1."""
    return [[S(1.0)] + [S(*cell) for cell in row] for row in rows]


NONE_BAD = [[False] * 3] * 3


def test_boundary_verdict_held_failed_inconclusive():
    held = ranges([(1.2, 1.3, 1.4), (1.1, 1.2, 1.3)], [(1.0, 1.1, 1.2), (0.9, 1.0, 1.1)],
                  [(0.6, 0.7, 0.8), (0.5, 0.6, 0.7)])
    v = boundary_verdict((1, 2, 64), GAMMAS, held, NONE_BAD)
    assert v.held is True and "from batch 64 on" in v.evidence
    never = ranges(*[[(0.6, 0.7, 0.8), (0.5, 0.6, 0.7)]] * 3)
    assert boundary_verdict((1, 2, 64), GAMMAS, never, NONE_BAD).held is False
    always = ranges(*[[(1.2, 1.3, 1.4), (1.1, 1.2, 1.3)]] * 3)
    v = boundary_verdict((1, 2, 64), GAMMAS, always, NONE_BAD)
    assert v.held is False and "still pays at the largest batch measured, 64" in v.evidence
    assert boundary_verdict((1, 2, 64), GAMMAS, held, NONE_BAD, repeats=2).held is None
    noisy = ranges(*[[(0.8, 1.0, 1.3), (0.7, 1.0, 1.2)]] * 3)
    assert boundary_verdict((1, 2, 64), GAMMAS, noisy, NONE_BAD).held is None


def test_impossible_cells_are_flagged_and_left_out():
    """alpha 0.3, gamma 2, free drafts: E = 1.39, so a 1.59x cell is impossible (issue 37)."""
    t_target = [[S(1.0), S(1.0), S(0.8)]]  # a 3-token pass 'faster' than one token: noise
    t_draft = [S(1e-9)]
    e = [[1.0, 1.3, 1.39 * 1.0]]
    speedup = [[1.0, 1.3, 1.39 / 0.8 * 1.0]]
    bad = impossible_cells(speedup, t_target, t_draft, GAMMAS, alpha=0.3)
    assert bad == [[False, False, True]]
    assert speedup_ranges(t_target, t_draft, GAMMAS, e)[0][2].median == pytest.approx(1.39 / 0.8, rel=1e-6)
    lose, disable = thresholds([1], GAMMAS, [[1.0, 0.9, 1.7]], bad)
    assert disable == 1  # the impossible 1.7x does not count as a win
    v = boundary_verdict((1,), GAMMAS, [[S(1.0), S(0.8, 0.9, 0.95), S(1.6, 1.7, 1.8)]], bad)
    assert v.held is False and "best γ = 1" in v.evidence


def test_speedup_ranges_pair_the_timing_rounds():
    """Round 2 ran twice as slow for every pass: per round the speedup is the same, so the range
    is a point; with unequal sample counts the extreme pairings are used instead."""
    t_target = [[S(1.0, 2.0, 1.0), S(1.2, 2.4, 1.2)]]  # gamma 0, 1: t(b, 1), t(b, 2)
    t_draft = [S(0.1, 0.2, 0.1)]
    cell = speedup_ranges(t_target, t_draft, (0, 1), [[1.0, 1.5]])[0][1]
    assert cell.min == pytest.approx(1.5 * 1.0 / 1.3) and cell.max == pytest.approx(cell.min)
    wide = speedup_ranges([[S(1.0, 2.0, 1.0), S(1.2, 2.4)]], t_draft, (0, 1), [[1.0, 1.5]])[0][1]
    assert wide.min == pytest.approx(1.5 * 1.0 / (0.2 + 2.4)) and wide.max == pytest.approx(1.5 * 2.0 / 1.3)


def test_emitted_tokens_are_one_per_sequence_without_acceptance():
    assert emitted([1, 4], (0, 2), alpha=0.0, steps=10, seed=0) == [[1.0, 1.0], [4.0, 4.0]]
    assert emitted([2], (0, 3), alpha=1.0, steps=10, seed=0) == [[2.0, 8.0]]


# --------------------------------------------------------------------------- memory wall

def test_memory_verdict_flips_at_the_ridge():
    assert memory_verdict(1.0, 153.0, "A100").held is True
    assert memory_verdict(400.0, 153.0, "A100").held is False
    assert memory_verdict(1.0, None, "given bandwidth").held is None
    here = {"device_name": "cpu", "dtype": "fp32", "intensity": 0.5, "ridge": 9.0}
    assert "measured ridge of 9" in memory_verdict(1.0, 153.0, "A100", here).evidence
    assert memory_verdict(1.0, 153.0, "A100", here).held is True
    assert memory_verdict(1.0, 153.0, "A100", {**here, "intensity": 20.0}).held is False  # compute-bound here
    assert memory_verdict(1.0, None, "given", here).held is True  # this device's ridge is known


# --------------------------------------------------------------------------- interleaving

def test_repeat_decodes_interleaves_and_keeps_the_spread():
    from app.lessons.common import Run
    order, clock = [], iter([3.0, 1.0, 2.0, 2.0, 1.0, 3.0])

    def arm(name):
        return lambda: order.append(name) or Run([], next(clock))
    out = repeat_decodes({"plain": arm("plain"), "speculative": arm("speculative")}, 3)
    assert order == ["plain", "speculative"] * 3
    assert out["plain"].seconds.samples == (3.0, 2.0, 1.0) and out["plain"].run.seconds == 1.0
    assert out["speculative"].seconds.median == 2.0
