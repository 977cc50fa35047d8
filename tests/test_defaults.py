"""The default run (issue 38): one set of defaults for the app and the CLI, the roofline policy
that may choose plain decoding (gamma 0) and stays exact when it does, the fast path chosen by
measurement, the interleaved baseline, and chat end markers hidden in the CLI's text."""
import json
import shutil

import pytest

from app import runner
from app.cli import build_parser, check_generate_args, generate_request, main
from app.engine import DecodeSettings, autoregressive_generate, run
from app.policies import RooflineDepth, make_policy
from app.settings import DEFAULTS, InputError
from app.trace import ForwardTiming, StepEvent

PROMPT = "It is a truth"


def ids_of(pair, text):
    return pair.tokenizer(text, add_special_tokens=False)["input_ids"]


def emitted(events):
    return [t for e in events for t in e.emitted_ids]


def event(gamma, accepted):
    """A step that drafted gamma tokens and examined accepted + 1 of them (or all gamma)."""
    examined = min(accepted + 1, gamma)
    return StepEvent(index=0, gamma=gamma, draft_ids=[0] * gamma, q_draft=[0.5] * gamma,
                     checks=[object()] * examined, n_accepted=accepted, emitted_ids=[0], pieces=[], forwards=[])


# --------------------------------------------------------------------------- the policy

STEEP = dict(t_draft=0.5, t_target=[1.0 + q for q in range(5)], gamma_max=4)  # drafting never pays
CHEAP = dict(t_draft=0.05, t_target=[1.0, 1.1, 1.2, 1.3, 1.4], gamma_max=4)   # pays at alpha 0.5


def test_plain_decoding_is_chosen_and_said_when_no_gamma_pays():
    p = RooflineDepth(**STEEP, gamma_min=0)
    # gamma 1 at alpha 0.5: 1.5 tokens / (0.5 + 2.0) s = 0.6 tokens/s < 1 token / 1 s plain
    assert p.rate(1) == pytest.approx(0.6) and p.rate(0) == 1.0
    assert p.gamma() == 0 and p.drafts_nothing
    assert p.note().startswith("plain decoding: with the measured pass times (draft 500.00 ms, target "
                               "1000.00 ms for 1 token, 2000.00 ms for 2) no γ ≥ 1 is predicted to beat it")
    assert RooflineDepth(**STEEP).gamma() == 1  # gamma_min 1 (lesson 3's roofline) still drafts
    assert make_policy("roofline", 4, 4, 0.5, (STEEP["t_draft"], STEEP["t_target"]), gamma_min=0).gamma() == 0


def test_the_note_gives_the_pass_times_it_chose_by():
    """A run's depth-policy note says what it chose and from which timings, so a run that drafted
    shorter on another machine says why (t(q) grew faster there)."""
    p = RooflineDepth(**CHEAP)
    chosen = [p.gamma() for _ in range(3)]
    assert p.note() == (f"γ per step: {chosen[0]} (3×); final α estimate 0.50; timed before the run: draft 50.00 ms, "
                        "target 1000.0, 1100.0, 1200.0, 1300.0, 1400.0 ms for 1–5 tokens")


def test_after_rejections_it_decodes_plainly_then_tries_again():
    p = RooflineDepth(**CHEAP, gamma_min=0)
    assert not p.drafts_nothing and p.gamma() >= 1
    for _ in range(4):
        p.update(event(1, 0))  # every draft rejected: alpha falls
    d = 0.8  # the decay: A = d^4 * 1, N = d^4 * 2 + (1 + d + d^2 + d^3)
    assert p.alpha == pytest.approx(d ** 4 / (2 * d ** 4 + 1 + d + d ** 2 + d ** 3))  # 0.109
    # gamma 1 then: 1.109 tokens / (0.05 + 1.1) s = 0.96 < 1 token/s plain; but it pays at alpha0
    assert p.gamma() == 0 and not p.drafts_nothing
    plain_steps = 0
    while p.gamma() == 0:
        p.update(event(0, 0))  # nothing examined: alpha relaxes toward alpha0 = 0.5
        plain_steps += 1
        assert plain_steps < 20
    assert p.gamma() >= 1 and p.alpha < 0.5


def timed_step(gamma, accepted, t_draft, t_verify, draft_tokens=1):
    """event(gamma, accepted) with its passes timed: gamma draft passes (the first of
    draft_tokens tokens) of t_draft seconds, then the target's verify pass of gamma + 1 tokens."""
    step = event(gamma, accepted)
    step.forwards = [ForwardTiming("draft", "draft", 1, draft_tokens if i == 0 else 1, 50, t_draft)
                     for i in range(gamma)] + [ForwardTiming("target", "verify", 1, gamma + 1, 50, t_verify)]
    return step


@pytest.mark.parametrize("in_run", [True, False])
def test_the_runs_own_pass_times_replace_the_probes_once_three_are_seen(in_run):
    """A draft pass that costs 6x the probe's inside the decode (as a CPU's cache makes it) moves
    the choice from gamma 2 to gamma 1 once SEEN_MIN such passes are timed; alpha stays 0.5."""
    now = [0.0]
    p = RooflineDepth(**CHEAP, in_run=in_run, clock=lambda: now[0])

    def step(t_verify=1.2):  # a step of gamma 2: its passes, and 10 ms besides them
        chosen = p.gamma()
        now[0] += 2 * 0.3 + t_verify + 0.01
        p.update(timed_step(2, 1, t_draft=0.3, t_verify=t_verify))
        return chosen

    # at alpha 0.5, probe costs: gamma 2 1.75 / (0.1 + 1.2) = 1.35 tokens/s beats gamma 1's 1.30
    assert step() == 2  # then 2 draft passes seen: not yet 3
    assert p.alpha == pytest.approx(0.5) and p.cost("draft", 1) == 0.05
    assert step() == 2
    # now gamma 1: 1.5 / (0.3 + 1.1) = 1.07 against gamma 2: 1.75 / (0.6 + 1.2) = 0.97
    assert step(t_verify=1.3) == (1 if in_run else 2)
    assert p.cost("draft", 1) == (0.3 if in_run else 0.05) and p.cost("target", 2) == 1.1  # never run at q 2
    assert p.cost("step", 1) == pytest.approx(0.01 if in_run else 0.0)
    assert p.cost("step", 0) == p.cost("step", 1)  # no plain step yet: the drafting steps' rest stands in
    assert p.note().endswith("; then the run's own (median of its last 9): draft 300.00 ms, target 1200.00 ms "
                             "for 3 tokens, besides the passes 10.00 ms a drafting step" if in_run
                             else "1400.0 ms for 1–5 tokens")


def test_the_rest_of_a_step_is_its_wall_time_less_its_own_passes():
    """Timed from gamma() to update(): a prefill (run before the step) is not subtracted, and the
    drafting and plain steps are kept apart, each added to its own rate."""
    now = [0.0]
    p = RooflineDepth(**CHEAP, gamma_min=0, clock=lambda: now[0])
    for gamma, rest in ((1, 0.02), (0, 0.005)) * 3:
        p.gamma()
        step = timed_step(gamma, 0, t_draft=0.05, t_verify=1.1) if gamma else event(0, 0)
        step.forwards += [ForwardTiming("target", "prefill", 1, 40, 0, 5.0)]
        if not gamma:
            step.forwards.append(ForwardTiming("target", "decode", 1, 1, 50, 1.0))
        now[0] += sum(f.seconds for f in step.forwards if f.phase != "prefill") + rest
        p.update(step)
    assert p.cost("step", 1) == pytest.approx(0.02) and p.cost("step", 0) == pytest.approx(0.005)
    alpha = p.alpha
    assert p.rate(1) == pytest.approx((1 + alpha) / (0.05 + 1.1 + 0.02))
    assert p.rate(0) == pytest.approx(1 / (1.0 + 0.005))


def test_prefills_and_two_token_draft_passes_are_not_taken_for_a_draft_pass():
    p = RooflineDepth(**CHEAP)
    for _ in range(3):
        step = timed_step(1, 1, t_draft=0.9, t_verify=1.1, draft_tokens=2)  # after a fully accepted step
        step.forwards += [ForwardTiming("draft", "prefill", 1, 1, 0, 5.0), ForwardTiming("target", "prefill", 1, 40, 0, 5.0)]
        p.update(step)
    assert p.cost("draft", 1) == 0.05 and p.cost("target", 2) == 1.1 and set(p.seen) == {("target", 2)}


def test_a_real_decode_feeds_the_policy_its_own_passes(tiny_pair):
    ids = ids_of(tiny_pair, PROMPT)
    policy = RooflineDepth(**CHEAP)
    trace = list(run(tiny_pair, ids, PROMPT, DecodeSettings(gamma=4, max_new_tokens=40), policy=policy))[-1]
    passes = [(f.model, f.tokens, f.seconds) for f in trace.forwards() if f.phase != "prefill"]
    for (model, q), seen in policy.seen.items():
        if model != "step":
            timed = [s for m, n, s in passes if (m, n) == (model, q)]
            assert list(seen) == timed[-RooflineDepth.SEEN_WINDOW:]  # the last 9, in the run's order
    assert ("draft", 1) in policy.seen and any(m == "target" for m, _ in policy.seen)
    assert all(x >= 0 for k in (("step", 0), ("step", 1)) for x in policy.seen.get(k, ()))
    for kind in (0, 1):  # one rest per step, kept apart for drafting (1) and plain (0) steps
        steps = sum(int(s.gamma > 0) == kind for s in trace.steps)
        assert len(policy.seen.get(("step", kind), ())) == min(steps, RooflineDepth.SEEN_WINDOW)


@pytest.mark.parametrize("costs", [STEEP, CHEAP], ids=["always-plain", "mixed"])
def test_greedy_output_is_the_targets_whatever_gamma_the_policy_chooses(tiny_pair, costs):
    ids = ids_of(tiny_pair, PROMPT)
    s = DecodeSettings(gamma=4, max_new_tokens=40)
    plain = emitted(autoregressive_generate(tiny_pair, ids, s))
    policy = RooflineDepth(**costs, gamma_min=0)
    trace = list(run(tiny_pair, ids, PROMPT, s, policy=policy))[-1]
    assert trace.output_ids == plain
    gammas = {step.gamma for step in trace.steps}
    if costs is STEEP:  # no drafter at all: no draft prefill, no draft pass
        assert gammas == {0} and not [f for f in trace.forwards() if f.model == "draft"]
        assert trace.settings["policy_note"].startswith("plain decoding")
    else:  # the random tiny pair's drafts are mostly rejected: plain steps and drafting steps mix
        assert 0 in gammas and gammas - {0}


def test_the_default_request_decodes_exactly_through_the_runner(tiny_pair):
    req = runner.parse_request(PROMPT, "embedded", DEFAULTS.drafter, DEFAULTS.gamma, DEFAULTS.depth_policy,
                               DEFAULTS.temperature, DEFAULTS.top_p, DEFAULTS.top_k, DEFAULTS.seed, 24,
                               DEFAULTS.device, DEFAULTS.fast_path, DEFAULTS.baseline, DEFAULTS.prompt_mode,
                               DEFAULTS.draft_int8, devices=["auto", "cpu"])
    assert req.fast_auto and req.int8_auto and req.policy == "roofline"
    prepared = runner.prepare(req, lambda *a, **k: tiny_pair, lambda *a, **k: None, regime=False)
    assert isinstance(prepared.policy, RooflineDepth) and prepared.policy.gamma_min == 0
    trace = list(runner.start(prepared, req))[-1]
    assert trace.baseline.identical is True
    assert trace.output_ids == emitted(autoregressive_generate(tiny_pair, prepared.ids, req.settings))
    # the measured choice of the fast path is recorded with its numbers, and agrees with the run
    choice = trace.settings["fast_path_choice"]
    assert choice.startswith("on: " if trace.settings["fast"] else "off: ") and " ms on the fast path" in choice
    from app.ui.views import summary_json  # what the /decode API returns: the serving engines' terms too
    api = summary_json(trace)
    assert api["speedup_spread"]["n"] == 2 * DEFAULTS.rounds - 1 and api["speedup"] == api["speedup_spread"]["median"]
    assert isinstance(api["per_position_acceptance"], list) and "mean_acceptance_length" in api


# --------------------------------------------------------------------------- paths and the baseline

def test_fast_path_and_int8_take_auto_on_or_off_and_nothing_else():
    assert [runner.path_choice("fast_path", v) for v in ("auto", "on", "off", True, False)] == \
        [None, True, False, True, False]
    for bad in ("yes", 1, None, "AUTO"):
        with pytest.raises(InputError, match="fast_path must be auto, on or off"):
            runner.path_choice("fast_path", bad)


def test_a_measured_pass_is_measured_once(tiny_pair):
    first = runner.pass_times(tiny_pair.target, "cpu", [(True, False)])
    assert runner.pass_times(tiny_pair.target, "cpu", [(True, False)]) == first  # cached, not re-timed


def test_the_path_choice_interleaves_rounds_so_one_stall_cannot_decide_it(tiny_pair, monkeypatch):
    """fast_measured times plain and fast passes in PATH_ROUNDS alternating rounds and compares
    medians: a fast-path round slowed 3x by a stall (simulated) still leaves the fast path on,
    where a single timing of each would have turned it off."""
    from app import knee
    calls = []

    def fake(model, *, fast, int8, **kw):
        calls.append((fast, int8))
        stalled = fast and calls.count((True, False)) == 1  # the first fast round
        return (0.8 if fast else 1.0) * (3 if stalled else 1)
    monkeypatch.setattr(knee, "time_forward", fake)
    monkeypatch.setattr(runner, "_pass_times", type(runner._pass_times)())
    fast, why = runner.fast_measured(tiny_pair)
    assert calls == [(False, False), (True, False)] * runner.PATH_ROUNDS
    assert fast and "0.80 ms" not in why and "800.00 ms on the fast path, 1000.00 ms without" in why
    assert runner.fast_measured(tiny_pair)[0] and len(calls) == 2 * runner.PATH_ROUNDS  # known: not re-timed


def test_the_baseline_interleaves_plain_and_speculative_runs(tiny_pair):
    ids = ids_of(tiny_pair, PROMPT)
    s = DecodeSettings(gamma=3, max_new_tokens=16)
    for rounds in (1, 2, 3):
        b = list(run(tiny_pair, ids, PROMPT, s, baseline=True, rounds=rounds))[-1].baseline
        assert len(b.spec_tokens_per_s) == len(b.plain_tokens_per_s) == rounds
        assert all(x > 0 for x in b.spec_tokens_per_s + b.plain_tokens_per_s)
        assert b.identical is True and b.cores >= 1 and len(b.load_avg) == 2
        assert b.tokens_per_s == b.plain_tokens_per_s[0]  # the Baseline is the first plain run


def test_a_stop_during_the_interleaving_keeps_the_finished_pairs(tiny_pair):
    ids = ids_of(tiny_pair, PROMPT)
    s = DecodeSettings(gamma=3, max_new_tokens=16)
    calls = {"n": 0}

    def cancel():  # let the streamed run and the first plain run finish, then stop
        calls["n"] += 1
        return calls["n"] > 40
    trace = list(run(tiny_pair, ids, PROMPT, s, baseline=True, rounds=5, cancel=cancel))[-1]
    b = trace.baseline
    assert 1 <= len(b.spec_tokens_per_s) == len(b.plain_tokens_per_s) < 5


# --------------------------------------------------------------------------- one set of defaults

def test_the_app_and_the_cli_start_from_the_same_defaults(tiny_pair):
    import gradio as gr

    from app.ui import live
    with gr.Blocks() as demo:
        live.build(lambda *a, **k: tiny_pair)
    decode = next(fn for fn in demo.fns.values() if fn.api_name == "decode")
    app = {name: c.value for name, c in zip(runner.INPUTS, decode.inputs)}
    for name in ("drafter", "gamma", "depth_policy", "temperature", "top_p", "top_k", "seed",
                 "max_new_tokens", "device", "fast_path", "draft_int8", "prompt_mode", "baseline"):
        assert app[name] == getattr(DEFAULTS, name), name
    cli = build_parser().parse_args(["generate", PROMPT])
    assert {k: getattr(cli, k) for k in ("drafter", "gamma", "depth_policy", "temperature", "top_p", "top_k",
                                         "seed", "max_new_tokens", "device")} == \
        {k: getattr(DEFAULTS, k) for k in ("drafter", "gamma", "depth_policy", "temperature", "top_p", "top_k",
                                           "seed", "max_new_tokens", "device")}
    # unset --fast / --draft-int8 / --chat are the app's "auto"; --baseline is the app's tick
    assert (cli.fast, cli.draft_int8, cli.chat) == (None, None, None)
    assert DEFAULTS.fast_path == DEFAULTS.draft_int8 == DEFAULTS.prompt_mode == "auto" and DEFAULTS.baseline
    cli.prompt = cli.text  # as main() does
    req = generate_request(cli, check_generate_args(cli))
    assert (req.policy, req.fast_auto, req.int8_auto, req.prompt_mode) == ("roofline", True, True, "auto")


# --------------------------------------------------------------------------- end markers

def test_the_cli_prints_no_end_marker(capsys, tiny_dirs, tmp_path):
    """A copy of the tiny pair whose end-of-text token is one the target emits greedily at the
    third step or later: the run ends there, and the printed text is the decoded text without it."""
    from transformers import AutoTokenizer
    args = ["--max-new-tokens", "12", "--device", "cpu", "--depth-policy", "fixed"]
    first = tmp_path / "first.json"
    assert main(["generate", PROMPT, "--target", tiny_dirs[0], "--draft", tiny_dirs[1], "--json", str(first),
                 *args]) == 0
    capsys.readouterr()
    trace = json.loads(first.read_text())
    out_ids, prompt_ids = trace["output_ids"], trace["prompt_ids"]
    i = next(i for i in range(2, len(out_ids)) if out_ids[i] not in out_ids[:i] + prompt_ids)
    dirs = [shutil.copytree(d, tmp_path / name) for d, name in zip(tiny_dirs[:2], ("target", "draft"))]
    tok = AutoTokenizer.from_pretrained(dirs[0])
    tok.add_special_tokens({"eos_token": tok.convert_ids_to_tokens(out_ids[i])})
    assert tok.eos_token_id == out_ids[i]
    for d in dirs:
        tok.save_pretrained(d)
    second = tmp_path / "second.json"
    assert main(["generate", PROMPT, "--target", str(dirs[0]), "--draft", str(dirs[1]), "--json", str(second),
                 *args]) == 0
    out = capsys.readouterr().out
    ended = json.loads(second.read_text())
    assert ended["output_ids"] == out_ids[:i + 1] and ended["stopped"] == "eos"
    text = tok.decode(out_ids[:i])  # without the end marker
    assert tok.decode(out_ids[:i + 1]) != text  # the marker has a text of its own
    assert out.startswith(PROMPT + text + "\nacceptance rate")


def test_the_roofline_costs_are_measured_once_per_prompt_length_bucket(tiny_pair):
    first = runner.pass_costs(tiny_pair, 3, 70, fast=False, int8=False)
    assert len(first[1]) == 4 and first[0] > 0 and all(t > 0 for t in first[1])
    assert runner.pass_costs(tiny_pair, 3, 127, fast=False, int8=False) is first  # 70 and 127: timed at 64
    assert runner.pass_costs(tiny_pair, 3, 128, fast=False, int8=False) is not first


@pytest.mark.parametrize("fast, int8, expected", [
    ("auto", "on", (True, True, False, False)),   # int8 needs the fast path: on, not measured
    ("auto", "off", (False, False, True, False)),
    ("on", "auto", (True, False, False, True)),
    ("off", "off", (False, False, False, False)),
])
def test_what_is_left_to_measurement(fast, int8, expected):
    req = runner.parse_request(PROMPT, "embedded", "model", 4, "roofline", 0.0, 1.0, 0, 0, 8, "auto", fast, True,
                               "auto", int8, devices=["auto", "cpu"])
    assert (req.settings.fast, req.settings.draft_int8, req.fast_auto, req.int8_auto) == expected


def test_int8_with_the_fast_path_turned_off_is_refused(capsys):
    with pytest.raises(InputError, match="int8 draft weights run on the fast path"):
        runner.parse_request(PROMPT, "embedded", "model", 4, "roofline", 0.0, 1.0, 0, 0, 8, "auto", "off", True,
                             "auto", "on", devices=["auto", "cpu"])
    assert main(["generate", PROMPT, "--no-fast", "--draft-int8"]) == 2
    assert "int8 draft weights run on the fast path" in capsys.readouterr().err
