"""app.metrics against hand-counted toy traces: the serving engines' definitions (vLLM,
llama.cpp) of mean acceptance length, draft acceptance rate and per-position acceptance, with
steps of different gamma, a fully accepted step, a step that drafted nothing, and a run of the
baseline alone; and the same counts in the engine's Summary and the stats table."""
from pathlib import Path

import pytest

from app import metrics
from app.engine import summarize
from app.trace import Baseline, ForwardTiming, Piece, StepEvent, Summary, Trace
from visualizations import stats_markdown

FIXTURE = Path(__file__).parent / "data" / "trace_embedded.json"


def fwd(model, phase, seconds, bound="", tokens=1):
    return ForwardTiming(model=model, phase=phase, batch=1, tokens=tokens, kv_len=8, seconds=seconds,
                         bound=bound)


def step(index, drafted, accepted, emitted=None, prefill=False):
    """A step that drafted `drafted` tokens (one draft pass each, 1 ms, memory-bound) and
    accepted `accepted`; one target pass of 10 ms (compute-bound); emitted = accepted + 1."""
    emitted = accepted + 1 if emitted is None else emitted
    forwards = [fwd("target", "prefill", 0.02, "overhead", tokens=8)] if prefill else []
    forwards += [fwd("draft", "draft", 0.001, "memory") for _ in range(drafted)]
    forwards.append(fwd("target", "verify" if drafted else "decode", 0.01, "compute", tokens=drafted + 1))
    ids = list(range(100 + 10 * index, 100 + 10 * index + emitted))
    fate = "target" if not drafted else "accepted"
    pieces = [Piece(t, "x", fate, index) for t in ids]
    return StepEvent(index=index, gamma=drafted, draft_ids=list(range(drafted)), q_draft=[0.5] * drafted,
                     checks=[], n_accepted=accepted, emitted_ids=ids, pieces=pieces, forwards=forwards)


def toy_trace(seconds=0.1) -> Trace:
    """Four steps, hand-counted:
        step 0: gamma 4, all 4 accepted (+ bonus)   emits 5   (and the prefill, 20 ms)
        step 1: gamma 4, 1 accepted (+ correction)   emits 2
        step 2: gamma 2, 0 accepted (+ correction)   emits 1
        step 3: drafted nothing (the last token)     emits 1
    drafting steps 3, drafted 10, accepted 5, new tokens 9, target passes 4 (prefill excluded)."""
    steps = [step(0, 4, 4, prefill=True), step(1, 4, 1), step(2, 2, 0), step(3, 0, 0)]
    trace = Trace(prompt="p", settings={"gamma": 4, "temperature": 0.0}, prompt_ids=[1, 2, 3], steps=steps,
                  output_ids=[t for s in steps for t in s.emitted_ids], stopped="max_new_tokens",
                  device={"device": "cpu", "dtype": "float32", "device_name": "Toy CPU",
                          "measured": {"flops_per_s": 2e11, "bytes_per_s": 2e10}, "datasheet": None},
                  models={"target": "t", "draft": "d"})
    trace.summary = summarize(steps, seconds)
    return trace


def test_acceptance_in_the_serving_engines_definitions():
    steps = toy_trace().steps
    assert metrics.mean_acceptance_length(steps) == pytest.approx(1 + 5 / 3)
    assert metrics.draft_acceptance_rate(steps) == pytest.approx(5 / 10)
    # position 1: 2 of the 3 drafting steps accepted it; position 2: 1 of 3 (step 2 drafted two);
    # positions 3 and 4: 1 of the 2 steps that drafted that deep
    assert metrics.per_position_acceptance(steps) == pytest.approx([2 / 3, 1 / 3, 1 / 2, 1 / 2])


def test_a_fully_accepted_step_alone():
    steps = [step(0, 3, 3)]
    assert metrics.mean_acceptance_length(steps) == 4.0
    assert metrics.draft_acceptance_rate(steps) == 1.0
    assert metrics.per_position_acceptance(steps) == [1.0, 1.0, 1.0]


def test_the_summary_counts_tokens_passes_and_time():
    s = metrics.summary(toy_trace())
    assert (s["new_tokens"], s["steps"], s["drafting_steps"], s["drafted"], s["accepted"]) == (9, 4, 3, 10, 5)
    assert (s["target_passes"], s["draft_passes"]) == (4, 10)
    assert s["tokens_per_target_pass"] == pytest.approx(9 / 4)
    assert s["tokens_per_s"] == pytest.approx(9 / 0.1) and s["seconds_from"] == "wall clock"
    # draft: 10 passes x 1 ms; target: the 20 ms prefill + 4 x 10 ms; the rest of the 100 ms is other
    assert s["time_by_model_s"] == pytest.approx({"draft": 0.01, "target": 0.06, "other": 0.03})
    assert s["time_by_class_s"] == pytest.approx({"memory": 0.01, "compute": 0.04, "overhead": 0.02,
                                                  "unclassified": 0.0})
    assert s["device"] == {"device": "cpu", "dtype": "float32", "name": "Toy CPU",
                           "measured_flops_per_s": 2e11, "measured_bytes_per_s": 2e10,
                           "ridge_flops_per_byte": 10.0}
    assert s["baseline"] is None and s["speedup"] is None


def test_the_engine_summary_counts_the_same():
    t = toy_trace()
    assert t.summary == Summary(new_tokens=9, seconds=0.1, tokens_per_s=pytest.approx(90.0), target_passes=4,
                                draft_passes=10, drafted=10, accepted=5, acceptance_rate=0.5,
                                tokens_per_pass=2.25, flops=0.0)
    md = stats_markdown(t)
    assert "| mean acceptance length | 2.67 tokens per drafting step (1 + accepted / drafting steps" in md
    assert "| acceptance rate | 50.0% (5 of 10 drafted) |" in md
    assert "| acceptance by draft position | 1: 67% · 2: 33% · 3: 50% · 4: 50% |" in md
    t.settings |= {"depth_policy": "roofline", "policy_note": "γ per step: 1 (3×)",
                   "fast_path_choice": "on: a target pass of 1 token took 1.00 ms on the fast path, 2.00 ms without"}
    md = stats_markdown(t)
    assert "| depth policy (roofline) | γ per step: 1 (3×) |" in md
    assert "| fast path (measured) | on: a target pass of 1 token took 1.00 ms" in md and "int8 draft" not in md


def test_a_baseline_only_run_has_no_acceptance():
    steps = [step(i, 0, 0) for i in range(5)]
    trace = Trace(prompt="p", settings={}, prompt_ids=[1], steps=steps, summary=summarize(steps, 0.05))
    s = metrics.summary(trace)
    assert s["mean_acceptance_length"] is None and s["draft_acceptance_rate"] is None
    assert s["per_position_acceptance"] == [] and s["drafting_steps"] == 0
    assert s["tokens_per_target_pass"] == 1.0 and s["tokens_per_s"] == pytest.approx(100.0)
    assert s["time_by_model_s"]["draft"] == 0.0
    lines = "\n".join(metrics.summary_lines(s))
    assert "mean acceptance length   n/a" in lines and "draft acceptance rate    n/a" in lines
    assert "mean acceptance length" not in stats_markdown(trace)  # no drafts: no acceptance rows


def test_an_unfinished_run_times_its_passes_and_the_baseline_gives_a_speedup():
    t = toy_trace()
    t.summary = None
    s = metrics.summary(t)
    assert s["seconds"] == pytest.approx(0.07) and s["seconds_from"] == "forward passes"
    assert s["time_by_model_s"]["other"] == 0.0
    t = toy_trace()
    t.baseline = Baseline(output_ids=list(range(9)), output_text="", tokens_per_s=45.0, seconds=0.2, identical=True)
    s = metrics.summary(t)
    assert s["speedup"] == pytest.approx(2.0) and s["baseline"]["identical"] is True
    assert s["speedup_spread"] == {"min": 2.0, "median": 2.0, "max": 2.0, "n": 1}
    assert "speedup                  2.00x (one plain run" in "\n".join(metrics.summary_lines(s))


def interleaved(spec, plain, load=(0.5, 0.7), cores=4) -> Baseline:
    return Baseline(output_ids=[1], output_text="", tokens_per_s=plain[0], seconds=1 / plain[0], identical=True,
                    spec_tokens_per_s=list(spec), plain_tokens_per_s=list(plain), load_avg=list(load), cores=cores)


def test_interleaved_runs_pair_each_run_with_its_neighbours():
    # runs in the order s0 p0 s1 p1 s2: every neighbouring pair is one sample, spec over plain
    assert metrics.interleaved_speedups([30, 40, 33], [20, 25]) == pytest.approx([1.5, 2.0, 1.6, 1.32])
    assert metrics.interleaved_speedups([30, 40], [20, 25]) == pytest.approx([1.5, 2.0, 1.6])
    assert metrics.interleaved_speedups([30], [20]) == [1.5]
    assert metrics.interleaved_speedups([30, 0.0], [20, 25]) == [1.5]  # a run of 0 tokens/s pairs with nothing
    assert metrics.interleaved_speedups([], []) == []


def test_the_spread_of_the_speedup_from_synthetic_timings():
    t = toy_trace()  # 90 tokens/s: the streamed run
    t.baseline = interleaved([90.0, 88.0], [60.0, 55.0])  # samples 1.5, 88/60, 1.6
    s = metrics.summary(t)
    assert s["speedup_spread"] == pytest.approx({"min": 88 / 60, "median": 1.5, "max": 1.6, "n": 3})
    assert s["speedup"] == pytest.approx(1.5) and s["speedup_notes"] == []  # (1.6 - 1.467) / 1.5 = 9%
    assert stats_speedup(t) == pytest.approx(1.5)
    md = stats_markdown(t)
    assert "**1.50×** (range 1.47–1.60× over 3 neighbouring pairs of 2 speculative and 2 plain runs" in md
    assert "⚠" not in md
    lines = "\n".join(metrics.summary_lines(s))
    assert "1.50x median, range 1.47–1.60x (3 neighbouring pairs" in lines and "note" not in lines


def stats_speedup(trace):
    from visualizations.stats import speedup
    return speedup(trace)


def test_a_wide_spread_and_a_busy_machine_are_said_in_words():
    t = toy_trace()
    t.baseline = interleaved([90.0, 60.0], [60.0, 60.0], load=(1.0, 4.5), cores=4)  # 1.5, 1.0, 1.0
    s = metrics.summary(t)
    assert s["speedup"] == pytest.approx(1.0)  # the median, not the streamed run's 1.5
    wide, busy = s["speedup_notes"]
    assert wide.startswith("wide spread: the speed-up varied by 50% of its median") and "more than 20%" in wide
    assert busy.startswith("busy machine: the 1-minute load average was 4.5 on 4 cores")
    md = stats_markdown(t)
    assert "| ⚠ wide spread | the speed-up varied by 50%" in md and "| ⚠ busy machine |" in md
    # below the bounds nothing is said: a spread of (1.2 - 1.0) / 1.1 = 18%, a load equal to the cores
    assert metrics.measurement_notes(metrics.Spread.of([1.0, 1.1, 1.2]), [4.0], 4) == []
    assert len(metrics.measurement_notes(metrics.Spread.of([1.0, 1.1, 1.23]), [4.01], 4)) == 2


def test_a_baseline_file_with_bad_interleaved_numbers_is_refused_in_one_line():
    from app.recorded import parse_trace
    from app.settings import InputError
    t = toy_trace()
    t.baseline = interleaved([90.0, 88.0], [60.0, 55.0])
    assert parse_trace(t.to_json()).baseline.plain_tokens_per_s == [60.0, 55.0]
    for key, bad, said in (("spec_tokens_per_s", ["fast"], "baseline.spec_tokens_per_s[0] must be a finite"),
                           ("load_avg", "high", "baseline.load_avg must be a list"),
                           ("cores", -2, "baseline.cores must be a finite number >= 0")):
        d = t.to_json().replace(f'"{key}": ', f'"{key}": {json_value(bad)}, "was_{key}": ')
        with pytest.raises(InputError, match=said.replace("[", r"\[")):
            parse_trace(d)


def json_value(x) -> str:
    import json
    return json.dumps(x)


def test_a_real_trace_agrees_with_its_recorded_summary():
    t = Trace.from_json(FIXTURE.read_text())
    s = metrics.summary(t)
    assert (s["accepted"], s["drafted"], s["new_tokens"]) == (t.summary.accepted, t.summary.drafted, 48)
    assert s["draft_acceptance_rate"] == pytest.approx(t.summary.acceptance_rate)
    assert s["tokens_per_target_pass"] == pytest.approx(t.summary.tokens_per_pass)
    assert s["tokens_per_s"] == pytest.approx(t.summary.tokens_per_s)
    # every step drafted: the mean acceptance length is the tokens per pass (48 / 17)
    assert s["mean_acceptance_length"] == pytest.approx(1 + 31 / 17)
    assert len(s["per_position_acceptance"]) == 4
    assert all(a >= b for a, b in zip(s["per_position_acceptance"], s["per_position_acceptance"][1:]))


def test_summary_lines_escape_what_a_file_says():
    t = toy_trace()
    t.device["device_name"] = "evil\x1b[2J\nname"
    t.recorded = {"pair": "p\rq"}
    text = "\n".join(metrics.summary_lines(metrics.summary(t)))
    assert "\x1b" not in text and "\r" not in text and "evil\\x1b[2J\\nname" in text
    assert len(text.splitlines()) == len(metrics.summary_lines(metrics.summary(t)))
