"""research.evaluate.speeds: each configuration's speed-up is paired with plain decoding run
on the same prompt in the same round, so a machine that slows down between rounds does not
move it; the runs themselves are real decodes (tiny random pair)."""
from research.evaluate import _speed_row, speeds


def _runs(rates: list[float], tokens: int = 60) -> list[tuple]:
    """(round, tokens, seconds, passes, drafted, accepted) for one run per rate, two per round."""
    return [(i // 2, tokens, tokens / rate, tokens // 2, tokens, tokens // 2) for i, rate in enumerate(rates)]


def test_speedup_is_paired_per_run_and_unmoved_by_drift():
    plain_rates = [20.0, 20.0, 10.0, 10.0, 5.0, 5.0]       # the machine halves its speed each round
    plain = _runs(plain_rates)
    spec = _runs([1.5 * r for r in plain_rates])           # always 1.5x the plain run beside it
    row = _speed_row(spec, plain)
    assert row["speedup"] == 1.5 and row["speedup_range"] == [1.5, 1.5]
    assert row["tokens_per_s"] == 15.0                     # median over rounds of each round's rate
    assert row["tokens_per_pass"] == 2.0 and row["acceptance"] == 0.5
    uneven = _speed_row(_runs([30.0, 20.0, 15.0, 10.0, 7.5, 5.0]), plain)  # 1.5, 1, 1.5, 1, 1.5, 1
    assert uneven["speedup"] == 1.25 and uneven["speedup_range"] == [1.0, 1.5]
    assert "acceptance" not in _speed_row([(0, 60, 3.0, 60, 0, 0)], [(0, 60, 3.0, 60, 0, 0)])


def test_speeds_times_every_configuration_on_every_prompt(tiny_pair):
    prompts = [[1, 2, 3, 4], [5, 6, 7]]
    table = speeds(tiny_pair, prompts, 0.0, 8, rounds=2, gammas=(1, 3))
    assert list(table) == ["plain", "gamma=1", "gamma=3"]
    assert table["plain"]["speedup"] == 1.0 and table["plain"]["speedup_range"] == [1.0, 1.0]
    for key in ("gamma=1", "gamma=3"):
        row = table[key]
        low, high = row["speedup_range"]
        assert 0 < low <= row["speedup"] <= high
        assert row["identical_to_plain"] is True and 0 <= row["acceptance"] <= 1
        assert 1 <= row["tokens_per_pass"] <= int(key.split("=")[1]) + 1


def test_step_budget_benchmark_splits_each_step_and_prices_the_target():
    """benchmarks/step_budget.py on the embedded pair, shortened: every configuration's step
    is its target, draft and other parts; plain decoding is the 1x reference; 'needed' is
    the target speed-up times the step's cost over plain decoding's."""
    import importlib.util
    import sys
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "step_budget.py"
    spec = importlib.util.spec_from_file_location("step_budget", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules["step_budget"] = bench  # its dataclass looks its module up there
    spec.loader.exec_module(bench)
    rows = bench.main(["--pair", "embedded", "--gammas", "1", "3", "--prompts", "2", "--rounds", "1",
                       "--max-new-tokens", "12", "--target", "2"])
    assert [r["config"] for r in rows] == ["plain", "gamma=1", "gamma=3"]
    plain = rows[0]
    assert plain["speedup"] == 1 and plain["draft_ms"] == 0 and plain["tokens_per_pass"] == 1
    assert plain["needed_tokens_per_pass"] == 2
    for r in rows:
        assert r["target_ms"] > 0 and r["other_ms"] > 0
        assert abs(r["target_ms"] + r["draft_ms"] + r["other_ms"] - r["step_ms"]) < 1e-9
        assert abs(r["needed_tokens_per_pass"] - 2 * r["step_ms"] / plain["step_ms"]) < 1e-9
    for r in rows[1:]:
        assert r["draft_ms"] > 0 and 1 <= r["tokens_per_pass"] <= int(r["config"].split("=")[1]) + 1
