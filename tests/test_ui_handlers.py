"""The Live tab's handlers without a server or a browser: pure helpers on a saved trace, and
the decode generator driven directly with a tiny random pair (ceilings faked: no timing)."""
import csv
import json
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

from app.hardware import Ceilings
from app.trace import Trace
from app import annotate, runner
from app.ui import handlers, stream, views
from app.validation import InputError

DATA = Path(__file__).parent / "data" / "trace_small.json"
END = 'id="stream-end"'
# prompt, preset, drafter, gamma, depth policy, temperature, top-p, top-k, seed, max new, device, fast,
# baseline, prompt mode
GOOD = ("It is a truth universally acknowledged", "embedded", "model", 4, "fixed", 0.0, 1.0, 0, 0,
        12, "cpu", False, False, "auto", False)
DEVICES = ["auto", "cpu"]  # app.runner.parse_request's device choices (app.ui.turns.device_choices)


@pytest.fixture
def trace():
    return Trace.from_json(DATA.read_text())


@pytest.fixture
def fake_ceilings(monkeypatch):
    c = Ceilings(device="cpu", device_name="test CPU", dtype="float32",
                 measured_flops_per_s=1e11, measured_bytes_per_s=2e10)
    monkeypatch.setattr(annotate, "ceilings", lambda device, dtype, progress=None: c)
    return c


def run_decode(pair, inputs=GOOD, request=None):
    return list(handlers.decode(inputs, loader=lambda *a, **k: pair, request=request))


def with_(**changes):
    names = ("prompt", "preset", "drafter", "gamma", "policy", "temperature", "top_p", "top_k",
             "seed", "max_new_tokens", "device", "fast_path", "baseline", "prompt_mode", "draft_int8")
    values = dict(zip(names, GOOD)) | changes
    return tuple(values[n] for n in names)


# --------------------------------------------------------------------------- pure helpers

def test_csv_rows_one_per_forward_with_every_field(trace):
    rows = views.csv_rows(trace)
    baseline = sum(len(s.forwards) for s in trace.baseline.steps)
    assert len(rows) == len(trace.forwards()) + baseline
    assert set(views.CSV_FIELDS) <= set(rows[0])
    assert rows[0]["run"] == "speculative" and rows[-1]["run"] == "baseline"
    assert [r["step"] for r in rows if r["run"] == "speculative"] == \
        [s.index for s in trace.steps for _ in s.forwards]


def test_exports_round_trip(trace, tmp_path):
    json_path, csv_path = views.write_exports(trace, tmp_path)
    assert Path(json_path).parent.parent == tmp_path
    assert Trace.from_json(Path(json_path).read_text()) == trace
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(views.csv_rows(trace))
    assert float(rows[0]["seconds"]) == trace.steps[0].forwards[0].seconds


def test_exports_are_pruned(trace, tmp_path, monkeypatch):
    monkeypatch.setattr(views, "KEEP_EXPORTS", 2)
    for _ in range(4):
        views.write_exports(trace, tmp_path)
        time.sleep(0.01)
    assert len(list(tmp_path.iterdir())) == 2


def test_stream_html_escapes_prompt_and_marks_the_end(trace):
    trace.prompt = '<script>alert("x")</script>'
    running, done = views.stream_html(trace, False), views.stream_html(trace, True)
    assert "<script>" not in running and "&lt;script&gt;" in running
    assert END not in running and END in done


def test_summary_json_is_plain(trace):
    out = views.summary_json(trace, {"device": "cpu"})
    assert json.loads(json.dumps(out)) == out
    assert out["output_text"] == trace.output_text and out["baseline"]["identical"] is not None


def test_safe_message_hides_paths():
    root = handlers.REPO_ROOT
    msg = handlers.safe_message(ValueError(f"{root}/demo_models/tiny/target: no model\nTraceback"))
    assert msg == "demo_models/tiny/target: no model"
    assert handlers.safe_message(OSError("/home/user/x/model.bin missing")) == "model.bin missing"


@pytest.mark.parametrize("changes, fragment", [
    ({"prompt": "   "}, "prompt is empty"), ({"gamma": 0}, "gamma"), ({"preset": "nope"}, "model pair"),
    ({"device": "tpu"}, "device"), ({"policy": "magic"}, "depth policy"), ({"top_p": 0}, "top_p"),
    ({"drafter": "oracle"}, "drafter"), ({"max_new_tokens": 2.5}, "max_new_tokens")])
def test_parse_request_rejects_bad_input(changes, fragment):
    with pytest.raises(InputError, match=fragment):
        runner.parse_request(*with_(**changes), devices=DEVICES)


def test_in_background_skips_nothing_it_must_and_reraises():
    assert list(stream.in_background(iter([1, 2, 3])))[-1] == 3

    def boom():
        yield 1
        raise RuntimeError("engine broke")
    with pytest.raises(RuntimeError, match="engine broke"):
        list(stream.in_background(boom()))


def test_in_background_asks_for_the_pause_after_every_item():
    asked = []
    items = list(stream.in_background(iter(range(3)), min_interval=lambda: asked.append(1) or 0.0))
    assert items[-1] == 2 and len(asked) == len(items)


def test_updates_are_paced_by_their_measured_cost(tiny_pair, fake_ceilings, trace):
    """Text updates wait COST_X x their cost (at least FRAME_S); chart updates push the next
    charts COST_X x their cost away (at least CHART_EVERY_S)."""
    state = stream._Run(runner.parse_request(*GOOD, devices=DEVICES), tiny_pair, fake_ceilings)
    state.view(trace, "decoding", charts=False)
    state.sent(0.001)
    assert state.frame_s == stream.FRAME_S
    state.sent(0.05)
    assert state.frame_s == pytest.approx(stream.COST_X * 0.05)
    state.view(trace, "decoding", charts=True)
    before = time.perf_counter()
    state.sent(0.2)
    assert state.next_charts >= before + stream.COST_X * 0.2
    assert state.frame_s == pytest.approx(stream.COST_X * 0.05)  # text pacing untouched


def test_the_roofline_note_says_once_when_the_ceilings_are_too_low(tiny_pair, fake_ceilings, trace):
    import dataclasses
    low = dataclasses.replace(fake_ceilings, measured_bytes_per_s=1e6, measured_flops_per_s=1e6)
    state = stream._Run(runner.parse_request(*GOOD, devices=DEVICES), tiny_pair, low)
    state.view(trace, "decoding", charts=True)
    note = state.roof["note"]
    assert "too low" in note and "python -m app roofline --refresh" in note
    state.view(trace, "decoding", charts=True)
    assert state.roof["note"] == note  # said once
    fine = stream._Run(runner.parse_request(*GOOD, devices=DEVICES), tiny_pair, fake_ceilings)
    fine.view(trace, "decoding", charts=True)
    assert "note" not in fine.roof  # passes at or above their floors: nothing to say


# --------------------------------------------------------------------------- the decode generator

def test_decode_streams_then_ends_with_marker_and_exports(tiny_pair, fake_ceilings):
    views = run_decode(tiny_pair)
    assert len(views) >= 3
    # the end marker arrives with the finished text, then once more with the final charts
    assert [i for i, v in enumerate(views) if END in v.stream] == [len(views) - 2, len(views) - 1]
    # the downloads are emptied until the last view (after a skip, their copies escape the sweep)
    assert views[-2].timeline == gr.skip() and views[-2].json_file is None
    assert "drawing the charts" in views[-2].status and views[-2].text == views[-1].text
    last = views[-1]
    assert last.summary["stopped"] in ("max_new_tokens", "eos")
    assert last.summary["summary"]["flops"] > 0
    assert last.text == last.record.trace.output_text
    assert Path(last.json_file).is_file() and Path(last.csv_file).is_file()
    assert all(f.bound in ("memory", "compute", "overhead") for f in last.record.trace.forwards())
    assert not isinstance(last.timeline, dict) and "throughput" in last.stats


def test_decode_matches_the_engine(tiny_pair, fake_ceilings):
    from app import validation
    from app.engine import run
    settings = validation.settings(gamma=4, max_new_tokens=12)
    ids = validation.prompt_ids(tiny_pair.tokenizer, GOOD[0], tiny_pair.context, 12)
    *_, expected = run(tiny_pair, ids, GOOD[0], settings)
    assert run_decode(tiny_pair)[-1].record.trace.output_ids == expected.output_ids


def test_decode_with_baseline_reports_speedup(tiny_pair, fake_ceilings):
    last = run_decode(tiny_pair, with_(baseline=True))[-1]
    assert last.summary["baseline"]["identical"] is True
    assert "measured speedup" in last.stats
    assert any(r["run"] == "baseline" for r in views.csv_rows(last.record.trace))


def test_bad_input_raises_gr_error_before_any_update(tiny_pair, fake_ceilings):
    gen = handlers.decode(with_(prompt=""), loader=lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises(gr.Error, match="prompt is empty"):
        next(gen)


def test_stop_ends_the_run_cleanly(tiny_pair, fake_ceilings):
    request = SimpleNamespace(session_hash="s1")
    gen = handlers.decode(with_(max_new_tokens=150), loader=lambda *a, **k: tiny_pair, request=request)
    first = next(gen)
    assert END not in first.stream
    handlers.stop(request)
    last = list(gen)[-1]
    assert END in last.stream
    assert last.summary["stopped"] == "cancelled" and last.summary["new_tokens"] < 150
    assert "s1" not in handlers._cancels


def test_error_mid_run_ends_the_stream_then_raises(tiny_pair, fake_ceilings, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("out of memory at /secret/path/model.bin")
        yield
    monkeypatch.setattr(runner, "run", broken)
    gen = handlers.decode(GOOD, loader=lambda *a, **k: tiny_pair)
    assert END in next(gen).stream
    with pytest.raises(gr.Error) as err:
        next(gen)
    assert "/secret" not in str(err.value) and "model.bin" in str(err.value)


def test_inspector_for_steps_and_positions(tiny_pair, fake_ceilings):
    record = run_decode(tiny_pair)[-1].record
    assert set(record.token_text) >= {t for s in record.trace.steps for t in s.emitted_ids}
    fig = views.inspect(record, 0, 99)  # position clamped to the checked ones
    assert "Step 0" in fig.layout.title.text
    assert views.inspect(record, 10_000, 1).layout.title.text  # step clamped too
    assert views.inspect(None, 0, 1).layout.title.text


def test_decode_embedded_preset_with_the_default_loader(embedded_pair, fake_ceilings):
    from app.pairs import get_pair
    views = list(handlers.decode(with_(max_new_tokens=8), loader=get_pair))
    assert END in views[-1].stream and views[-1].summary["new_tokens"] == 8


def test_progress_is_reported_even_by_a_falsy_tracker(tiny_pair, fake_ceilings):
    class Tracker(list):  # like gr.Progress: len() == 0 until it tracks an iterable
        def __call__(self, fraction, desc=None):
            self.append(desc)
    tracker = Tracker()
    list(handlers.decode(GOOD, loader=lambda *a, **k: tiny_pair, progress=tracker))
    assert any("loading model pair" in d for d in tracker)


@pytest.mark.parametrize("mode,templated", [("auto", True), ("chat", True), ("continue", False)])
def test_prompt_mode_sends_the_prompt_through_the_chat_template_or_not(tiny_pair, fake_ceilings,
                                                                       monkeypatch, mode, templated):
    monkeypatch.setattr(tiny_pair.tokenizer, "chat_template",
                        "{% for m in messages %}<user>{{ m['content'] }}</user>{% endfor %}<bot>", raising=False)
    last = run_decode(tiny_pair, with_(prompt_mode=mode, max_new_tokens=3))[-1]
    shown = tiny_pair.tokenizer.decode(last.record.trace.prompt_ids)
    assert shown.startswith("<user>") == templated and ("<bot>" in shown) == templated


def test_fast_path_checkbox_reaches_the_engine(tiny_pair, fake_ceilings):
    last = run_decode(tiny_pair, with_(fast_path=True, max_new_tokens=6))[-1]
    assert last.record.trace.settings["fast"] is True and "fast path: lean decoder" in last.status
    eager = run_decode(tiny_pair, with_(max_new_tokens=6))[-1]
    assert last.text == eager.text
    with pytest.raises(gr.Error, match="prompt mode"):
        next(handlers.decode(with_(prompt_mode="poem"), loader=lambda *a, **k: pytest.fail("loaded")))


@pytest.mark.parametrize("fast, int8", [(False, False), (True, False), (True, True)])
def test_the_live_roofline_policy_times_the_path_the_run_takes(tiny_dirs, fast, int8):
    """The roofline depth policy picks γ from measured t(q): with the fast path (and int8 draft
    weights) ticked it must time those passes, not the eager ones. A freshly loaded pair has no
    lean runner until something runs it on the fast path (app.fastpath keeps one per model)."""
    from app import fastpath
    from app.models import load_pair
    pair = load_pair(tiny_dirs[0], tiny_dirs[1], device="cpu")
    policy = runner.depth_policy("roofline", pair, 3, 16, fast=fast, int8=int8)
    assert policy.name == "roofline" and len(policy.t_target) == 4 and policy.t_draft > 0
    assert (pair.target in fastpath._lean[False]) == fast
    assert (pair.draft in fastpath._lean[int8]) == fast
    assert policy.gamma_min == 0 and 0 <= policy.gamma() <= 3  # 0: plain decoding predicted faster
