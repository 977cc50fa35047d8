"""benchmarks/policy_costs.py on the embedded pair: both roofline variants decode exactly, each
speed-up is over the plain runs beside it, and the summary's numbers come from the rows."""
import importlib.util
from pathlib import Path

from app.settings import DecodeSettings

SPEC = importlib.util.spec_from_file_location("policy_costs", Path(__file__).parents[1] / "benchmarks/policy_costs.py")
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def test_both_policies_decode_exactly_and_are_timed_against_plain_runs(tiny_pair):
    ids = tiny_pair.tokenizer("It is a truth", add_special_tokens=False)["input_ids"]
    row = bench.run_policies(tiny_pair, DecodeSettings(gamma=3, max_new_tokens=16), ids, rounds=2, k=0)
    assert row["identical"] is True
    assert set(row["speedup"]) == set(bench.POLICIES) and all(len(v) == 2 for v in row["rounds"].values())
    assert all(s > 0 for v in row["rounds"].values() for s in v)
    assert row["probe_draft_ms"] > 0 and (row["in_run_draft_ms"] is None or row["in_run_draft_ms"] > 0)


def test_the_summary_gives_medians_ratios_and_the_draft_pass_inside_a_decode():
    rows = [{"id": f"p{i}", "speedup": {"probe": 1.0 + i / 10, "in-run": 1.1 + i / 10},
             "probe_draft_ms": 2.0, "in_run_draft_ms": 3.0, "identical": True} for i in range(3)]
    lines = bench.summary(rows)
    assert lines[0].startswith("roofline, probe pass times: median 1.100x") and "over 3 prompts" in lines[0]
    assert lines[1].startswith("roofline, in-run pass times: median 1.200x")
    assert lines[2].startswith(f"in-run / probe: median per-prompt ratio {1.2 / 1.1:.3f}")
    assert "median 1.50x" in lines[3] and lines[4].endswith("3/3 prompts")
