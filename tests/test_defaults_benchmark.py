"""benchmarks/defaults_speedup.py without running a decode: the command of each run, the
interleaving of configurations, and the summary's numbers from given rows."""
import importlib.util
import json
from pathlib import Path

import pytest

from app.trace import CHOICE_NOTES

SPEC = importlib.util.spec_from_file_location("defaults_speedup", Path(__file__).parents[1] / "benchmarks/defaults_speedup.py")
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def test_default_threads_add_no_flag_and_a_count_adds_it():
    default = bench.generate_args("D", "default", "t.json", "hi")
    assert "--threads" not in default and default[-2:] == ["--prompt", "hi"] and "--baseline" in default
    one = bench.generate_args("D", "1", "t.json", "hi")
    assert one[one.index("--threads") + 1] == "1"


def test_every_configuration_goes_first_equally_often():
    configs = ["a", "b", "c"]
    firsts = [bench.turns(configs, k)[0] for k in range(9)]
    assert {c: firsts.count(c) for c in configs} == {"a": 3, "b": 3, "c": 3}
    assert all(sorted(bench.turns(configs, k)) == configs for k in range(9))


def test_the_prompts_are_three_per_category_of_the_evaluation_set():
    from research.eval_set import load
    ids = {p["id"] for p in load()}
    assert len(bench.PROMPT_IDS) == 24 and set(bench.PROMPT_IDS) <= ids


def test_per_category_takes_the_first_k_of_each_single_turn_category():
    from research.eval_set import load
    by_id = {p["id"]: p for p in load()}
    ids = bench.prompt_ids(16)
    assert len(ids) == len(set(ids)) == 16 * len(bench.CATEGORIES)
    assert all(len(by_id[i]["messages"]) == 1 for i in ids)  # one user turn: a --prompt
    assert bench.prompt_ids(6)[:9] == [f"{c}-01" for c in bench.CATEGORIES] + ["code-02"]
    assert bench.prompt_ids(3) == bench.PROMPT_IDS


def test_per_category_outside_the_set_is_refused(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--per-category", "17"])
    assert "smallest category" in capsys.readouterr().err


def row(pid, threads, median, identical=True):
    return {"id": pid, "draft": "d", "threads": threads, "speedup": {"median": median}, "identical": identical}


def test_summary_gives_each_configurations_median_range_identical_count_and_ratio():
    rows = [row("p1", "default", 1.5), row("p1", "1", 1.0), row("p2", "default", 1.2), row("p2", "1", 1.2),
            row("p3", "default", 1.8, identical=False), row("p3", "1", 0.9)]
    lines = bench.summary(rows)
    assert lines[0].startswith("d, threads default: median 1.50x") and "prompts 1.20-1.80x" in lines[0]
    assert "identical 2/3" in lines[0]
    assert lines[1].startswith("d, threads 1: median 1.00x") and "identical 3/3" in lines[1]
    # per-prompt ratios threads 1 / default: 0.667, 1.0, 0.5 -> median 0.667
    assert "median per-prompt ratio 0.67 (0.50-1.00)" in lines[2]


def test_a_row_keeps_the_runs_measured_choices_in_words():
    """A run that fell back to plain decoding must say what it timed: the trace's settings notes
    (app.runner.choose_paths, the depth policy) go into the row under "choices"."""
    from app.assets import RECORDED_DIR
    settings = json.loads(sorted(RECORDED_DIR.glob("cpu-*.json"))[0].read_text())["settings"]  # a gallery trace
    assert set(CHOICE_NOTES) <= set(settings)  # the keys the app writes into a trace
    s = {"speedup_spread": {"median": 1.0, "n": 3}, "mean_acceptance_length": None, "new_tokens": 64,
         "baseline": {"identical": True, "tokens_per_s": 20.0}, "tokens_per_s": 20.0, "depth_policy": "roofline",
         "settings": {k: settings.get(k) for k in ("gamma", "fast", "draft_int8", "max_new_tokens", "temperature")},
         "choices": {k: settings[k] for k in CHOICE_NOTES}}
    r = bench.row_of("code-01", "d", "default", s, [1.0, 1.1])
    assert r["choices"]["fast_path_choice"].startswith(("on:", "off:")) and r["mean_acceptance_length"] == 0
