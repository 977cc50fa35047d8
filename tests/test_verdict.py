"""app.lessons.verdict: spreads, ratio verdicts that flip with the data, sanity checks."""
import pytest

from app.lessons.verdict import (Spread, Verdict, check_knee_floor, check_leviathan_bound,
                                 check_memory_floor, check_spread, fired, interleave, ratio_verdict)


def test_spread_statistics_and_conservative_ratio():
    a, b = Spread.of([2.0, 1.0, 3.0]), Spread.of([1.0, 2.0])
    assert (a.min, a.median, a.max, a.n) == (1.0, 2.0, 3.0, 3)
    r = a.ratio(b)
    assert (r.min, r.median, r.max) == (0.5, 2.0 / 1.5, 3.0)
    assert a.to_dict() == {"min": 1.0, "median": 2.0, "max": 3.0, "n": 3}
    with pytest.raises(ValueError):
        Spread.of([])


@pytest.mark.parametrize("samples, held", [((0.6, 0.7, 0.8), True), ((1.1, 1.2, 1.4), False),
                                           ((0.8, 0.95, 1.1), None)])
def test_ratio_verdict_flips_with_the_data(samples, held):
    assert ratio_verdict(Spread.of(samples), below=1.0) is held
    flipped = {True: False, False: True, None: None}[held]
    assert ratio_verdict(Spread.of(samples), above=1.0) is flipped


def test_ratio_verdict_needs_one_threshold():
    with pytest.raises(ValueError):
        ratio_verdict(Spread.of([1.0]))


def test_verdict_text_names_the_outcome_and_warnings():
    assert Verdict("c", True, "e").text().startswith("**Held on this device:**")
    assert Verdict("c", False, "e").text().startswith("**Did not hold here:**")
    text = Verdict("c", None, "e", ("busy",)).text()
    assert text.startswith("**Inconclusive:**") and "⚠ busy" in text
    assert Verdict("c", None, "e").to_dict() == {"claim": "c", "held": None, "evidence": "e", "warnings": []}


def test_interleave_alternates_the_runs():
    order = []
    runs = {"a": lambda: order.append("a") or 1.0, "b": lambda: order.append("b") or 2.0}
    out = interleave(runs, 3)
    assert order == ["a", "b"] * 3 and out["b"].median == 2.0 and out["a"].n == 3


def test_sanity_checks_fire_on_impossible_timings_only():
    assert check_knee_floor(2, Spread.of([0.15])) is not None       # the reported 0.15 ratio
    assert check_knee_floor(2, Spread.of([1.02])) is None
    assert check_knee_floor(1, Spread.of([0.5])) is None
    # alpha 0.3, gamma 2, c 0: E = 1.39, so 1.59x is impossible (issue 37's batch cell)
    assert check_leviathan_bound(1.59, 0.30, 2, 0.0) is not None
    assert check_leviathan_bound(1.30, 0.30, 2, 0.0) is None
    assert check_memory_floor(1e-3, 1e9, 100e9) is not None        # 1 GB in 1 ms at 100 GB/s
    assert check_memory_floor(20e-3, 1e9, 100e9) is None
    assert check_spread("t", Spread.of([1.0, 2.0, 3.0])) is not None
    assert check_spread("t", Spread.of([1.0, 1.05, 1.1])) is None
    assert fired(None, "x", None) == ("x",)


def test_busy_advice_fits_the_threads_used():
    wide = Spread.of([1.0, 2.0, 3.0])
    assert "--threads 1" in check_spread("t", wide, threads=2)
    one = check_spread("t", wide, threads=1)
    assert "--threads 1" not in one and "already used one thread" in one
