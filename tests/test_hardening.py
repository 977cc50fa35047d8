"""Hardening: faults, each followed by a request that works, and input validation everywhere.

Faults (each on CPU, injected): a client that cancels or drops its connection mid-stream, the
Stop endpoint, out of memory (torch.OutOfMemoryError raised by a forward), NaN / inf logits.
Validation: every decode input through the handlers, the API and the CLI, and a failed load
that leaves the loaded pairs alone. The server is launched in-process on a free port of
127.0.0.1 with a loader that serves the tiny random pair of conftest (ceilings faked: no
roofline measurement). Every wait is bounded.
"""
import gc
import http.client
import json
import threading
import time
import urllib.request
import uuid
import weakref
from types import SimpleNamespace

import gradio as gr
import pytest
import torch
from gradio_client import Client

from app import annotate, validation
from app.engine import NonFiniteLogits, speculative_generate
from app.models import ModelLoadError
from app.ui import handlers
from app.validation import InputError
from tests.support import STREAM, SUMMARY, FAKE_CEILINGS, free_port, wait_until, error_when_loading_fails

END = 'id="stream-end"'
PROMPT = "It is a truth universally acknowledged"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only


def args(prompt=PROMPT, preset="embedded", gamma=4, temperature=0.0, top_p=1.0, top_k=0, seed=0,
         max_new_tokens=8, device="cpu", baseline=False, drafter="model"):
    return (prompt, preset, drafter, gamma, "fixed", temperature, top_p, top_k, seed,
            max_new_tokens, device, False, baseline, "auto", False)  # raw HTTP: every input


def decode_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "speclab-decode" and t.is_alive()]


@pytest.fixture(scope="module")
def server(tiny_pair):
    """state.url: the app at 127.0.0.1; state.loads counts loader calls; state.fail, when set,
    is raised by the loader (a load that fails)."""
    from app.ui import build_demo
    state = SimpleNamespace(pair=tiny_pair, loads=0, fail=None)

    def loader(preset, device="auto", dtype="auto", ngram=False, progress=None):
        state.loads += 1
        if state.fail is not None:
            raise state.fail
        return state.pair

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(annotate, "ceilings", lambda device, dtype, progress=None: FAKE_CEILINGS)
        demo = build_demo(loader)  # the app's own queue settings
        port = free_port()
        demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
        state.url, state.port = f"http://127.0.0.1:{port}/", port
        yield state
        demo.close()


def new_client(server, tmp_path_factory) -> Client:
    return Client(server.url, analytics_enabled=False, verbose=False,
                  download_files=str(tmp_path_factory.mktemp("dl")))


@pytest.fixture(scope="module")
def client(server, tmp_path_factory):
    c = new_client(server, tmp_path_factory)
    yield c
    c.close()


@pytest.fixture
def fake_ceilings(monkeypatch):
    monkeypatch.setattr(annotate, "ceilings", lambda device, dtype, progress=None: FAKE_CEILINGS)


@pytest.fixture
def slow_target(tiny_pair, monkeypatch):
    """Each target forward sleeps 50 ms, so a long decode takes many seconds: a stop that
    works shows up as the decode thread ending early. Returns the list of call times."""
    calls, forward = [], tiny_pair.target.forward

    def slow(*a, **k):
        calls.append(time.monotonic())
        time.sleep(0.05)
        return forward(*a, **k)
    monkeypatch.setattr(tiny_pair.target, "forward", slow)
    return calls


def assert_next_request_works(client, n=4):
    result = client.predict(*args(max_new_tokens=n), api_name="/decode")
    assert END in result[STREAM] and result[SUMMARY]["new_tokens"] == n
    assert result[SUMMARY]["stopped"] == "max_new_tokens"


def clean(message: str) -> None:
    """No traceback, no path of the server's layout."""
    assert "Traceback" not in message and "site-packages" not in message
    assert handlers.REPO_ROOT not in message and "/tmp/" not in message


# --------------------------------------------------------------------------- disconnects, Stop

LONG = 200  # tokens (the tiny model's context is 256): over 100 target passes of 50 ms each


def test_cancelled_job_stops_the_decode_thread(server, client, slow_target):
    before = len(decode_threads())
    job = client.submit(*args(max_new_tokens=LONG, gamma=1), api_name="/decode")
    assert wait_until(lambda: len(job.outputs()) >= 2 or job.done(), 60) and not job.done(), \
        "the decode never started streaming"
    assert len(decode_threads()) > before
    started = time.monotonic()
    job.cancel()
    assert wait_until(lambda: len(decode_threads()) <= before, 10), "the decode thread kept running"
    stopped_after = time.monotonic() - started
    passes = len(slow_target)
    time.sleep(0.3)
    assert len(slow_target) == passes, "target passes continued after the thread ended"
    assert stopped_after < 3 and passes < LONG / 4
    assert_next_request_works(client)


def test_dropped_connection_stops_the_decode_thread(server, slow_target):
    """What a closed browser tab does: join the queue over plain HTTP, read the stream until
    tokens arrive, then close the socket."""
    config = json.loads(NO_PROXY.open(server.url + "config", timeout=30).read())
    fn_index = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "decode")
    session, before = uuid.uuid4().hex[:11], len(decode_threads())
    body = json.dumps({"data": list(args(max_new_tokens=LONG, gamma=1)), "fn_index": fn_index,
                       "session_hash": session, "event_data": None, "trigger_id": None}).encode()
    join = urllib.request.Request(server.url + "gradio_api/queue/join", data=body,
                                  headers={"Content-Type": "application/json"})
    assert "event_id" in json.loads(NO_PROXY.open(join, timeout=30).read())
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("GET", f"/gradio_api/queue/data?session_hash={session}")
    response = conn.getresponse()
    assert response.status == 200
    deadline, generating = time.monotonic() + 60, 0
    while generating < 2 and time.monotonic() < deadline:
        line = response.readline()
        generating += b"process_generating" in line
    assert generating >= 2, "no tokens streamed"
    assert len(decode_threads()) > before
    response.close()
    conn.close()
    assert wait_until(lambda: len(decode_threads()) <= before, 15), \
        "the decode thread kept running after the client went away"
    assert len(slow_target) < LONG / 4


def test_closed_client_stops_its_decode(server, slow_target, tmp_path_factory, monkeypatch):
    """A closed tab: the session's heartbeat ends, gradio runs the app's unload handler, which
    sets that session's cancel flag (the result stream itself stays open here)."""
    monkeypatch.setenv("GRADIO_HEARTBEAT_INTERVAL", "0.5")  # read per heartbeat connection
    before = len(decode_threads())
    leaving = new_client(server, tmp_path_factory)
    job = leaving.submit(*args(max_new_tokens=LONG, gamma=1), api_name="/decode")
    assert wait_until(lambda: len(job.outputs()) >= 2 or job.done(), 60) and not job.done()
    leaving.close()
    assert wait_until(lambda: len(decode_threads()) <= before, 15), "the decode outlived its session"
    assert len(slow_target) < LONG / 4


def test_stop_is_per_session_and_the_next_request_works(server, client, slow_target, tmp_path_factory):
    other = new_client(server, tmp_path_factory)
    try:
        job = client.submit(*args(max_new_tokens=LONG, gamma=1), api_name="/decode")
        assert wait_until(lambda: len(job.outputs()) >= 2 or job.done(), 60) and not job.done()
        other.predict(api_name="/stop")  # another session's Stop must not end this decode
        passes = len(slow_target)
        assert wait_until(lambda: len(slow_target) >= passes + 5, 10) and not job.done()
        client.predict(api_name="/stop")
        result = job.result(timeout=30)
    finally:
        other.close()
    assert END in result[STREAM]
    assert result[SUMMARY]["stopped"] == "cancelled" and result[SUMMARY]["new_tokens"] < LONG
    assert not decode_threads() or wait_until(lambda: not decode_threads(), 5)
    assert_next_request_works(client)


# --------------------------------------------------------------------------- out of memory

def oom_at_target_pass(monkeypatch, n: int, message: str):
    """app.engine.timed_forward raising torch.OutOfMemoryError at the n-th target pass after
    the prefill; returns a dict that gets a weak reference to that pass's KV cache."""
    import app.engine as engine
    real, seen = engine.timed_forward, {"passes": 0, "cache": None}

    def forward(model, x, cache, device, *, model_name, phase, **kw):
        if model_name == "target" and phase != "prefill":
            seen["passes"] += 1
            if seen["passes"] == n:
                seen["cache"] = weakref.ref(cache)
                raise torch.OutOfMemoryError(message)
        return real(model, x, cache, device, model_name=model_name, phase=phase, **kw)
    monkeypatch.setattr(engine, "timed_forward", forward)
    return seen


CUDA_OOM = ("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
            "of which 3.10 GiB is free. See /usr/lib/python3/site-packages/torch/cuda/memory.py")


def test_oom_mid_run_is_reported_and_frees_the_run(tiny_pair, fake_ceilings, monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    seen = oom_at_target_pass(monkeypatch, 3, CUDA_OOM)
    gen = handlers.decode(args(max_new_tokens=40, gamma=2), loader=lambda *a, **k: tiny_pair)
    views = []
    with pytest.raises(gr.Error) as err:
        for view in gen:
            views.append(view)
    message = err.value.message
    assert message.startswith("decoding failed: out of memory: try a smaller model pair")
    assert "(CUDA out of memory)" in message  # torch's first sentence, nothing after it
    clean(message)
    assert views and END in views[-1].stream and "Error" in views[-1].status
    assert emptied, "torch.cuda.empty_cache() was not called"
    gc.collect()
    # the error (which we still hold) no longer keeps the failed run's KV cache alive
    assert seen["cache"] is not None and seen["cache"]() is None


def test_oom_through_the_api_then_the_next_request_works(server, client, monkeypatch):
    seen = oom_at_target_pass(monkeypatch, 2, CUDA_OOM)
    job = client.submit(*args(max_new_tokens=40, gamma=2), api_name="/decode")
    with pytest.raises(Exception) as err:
        job.result(timeout=60)
    message = str(err.value)
    assert "out of memory" in message and "smaller model pair" in message
    clean(message)
    gc.collect()
    assert seen["cache"]() is None
    monkeypatch.undo()
    assert_next_request_works(client)


def test_oom_while_loading_says_so_and_the_server_stays_up(server, client):
    message = error_when_loading_fails(server, client, torch.OutOfMemoryError(CUDA_OOM), args())
    assert "could not start: out of memory" in message
    clean(message)
    assert_next_request_works(client)


# --------------------------------------------------------------------------- NaN / inf logits

def poison(monkeypatch, model, call: int, value: float):
    """model's forward returns logits full of `value` on its call-th call (1-based)."""
    forward, calls = model.forward, [0]

    def poisoned(*a, **k):
        out = forward(*a, **k)
        calls[0] += 1
        if calls[0] == call:
            out.logits[...] = value
        return out
    monkeypatch.setattr(model, "forward", poisoned)
    return calls


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_non_finite_target_logits_stop_the_engine(tiny_pair, monkeypatch, value, temperature):
    ids = tiny_pair.tokenizer(PROMPT)["input_ids"]
    settings = validation.settings(gamma=3, max_new_tokens=30, temperature=temperature)
    poison(monkeypatch, tiny_pair.target, 2, value)  # call 1: step 0, 2: step 1 (the prefill runs no lm_head forward)
    steps = []
    with pytest.raises(NonFiniteLogits) as err:
        for event in speculative_generate(tiny_pair, ids, settings):
            steps.append(event)
    assert err.value.model == "target" and err.value.step == 1 and len(steps) == 1
    assert "target model produced NaN or inf logits at step 1" in str(err.value)


def test_non_finite_draft_logits_name_the_draft(tiny_pair, monkeypatch):
    ids = tiny_pair.tokenizer(PROMPT)["input_ids"]
    # draft calls (the prefill fills the cache without one): 1-3 the drafts of step 0, 4 step 1's first
    poison(monkeypatch, tiny_pair.draft, 4, float("nan"))
    with pytest.raises(NonFiniteLogits) as err:
        list(speculative_generate(tiny_pair, ids, validation.settings(gamma=3, max_new_tokens=30)))
    assert err.value.model == "draft" and err.value.step == 1


def test_finite_logits_pass_the_check(tiny_pair):
    ids = tiny_pair.tokenizer(PROMPT)["input_ids"]
    events = list(speculative_generate(tiny_pair, ids, validation.settings(gamma=3, max_new_tokens=12)))
    assert sum(len(e.emitted_ids) for e in events) == 12


def test_nan_through_the_api_is_reported_then_the_next_request_works(server, client, tiny_pair,
                                                                     monkeypatch):
    poison(monkeypatch, tiny_pair.target, 2, float("nan"))  # step 1's pass (see above)
    with pytest.raises(Exception) as err:
        client.predict(*args(max_new_tokens=30, gamma=3), api_name="/decode")
    message = str(err.value)
    assert "decoding failed: the target model produced NaN or inf logits at step 1" in message
    clean(message)
    monkeypatch.undo()
    assert_next_request_works(client)


# --------------------------------------------------------------------------- validation

def test_validation_limits():
    assert validation.batch(1) == 1 and validation.batch(validation.MAX_BATCH) == validation.MAX_BATCH
    for bad in (0, -1, validation.MAX_BATCH + 1, 2.5, "8", True, float("nan")):
        with pytest.raises(InputError, match="batch size"):
            validation.batch(bad)
    assert validation.preset("embedded") == "embedded"
    for bad in ("nope", "/etc/passwd", "../demo_models/tiny/target", "demo_models/tiny/target",
                "Qwen/Qwen2.5-7B-Instruct", None, 3, "x" * 500):
        with pytest.raises(InputError, match="unknown model pair") as err:
            validation.preset(bad)
        assert "presets only" in str(err.value) and len(str(err.value)) < 400
    assert validation.device("cpu", ["auto", "cpu"]) == "cpu"
    with pytest.raises(InputError, match="not available here"):
        validation.device("cuda:7", ["auto", "cpu"])
    with pytest.raises(InputError, match="at most 100000 are accepted"):
        validation.prompt_text("x" * (validation.MAX_PROMPT_CHARS + 1))


@pytest.mark.parametrize("changes, fragment", [
    ({"preset": "/etc/passwd"}, "unknown model pair"), ({"preset": "Qwen/Qwen2.5-7B-Instruct"}, "presets only"),
    ({"device": "cuda:7"}, "not available here"), ({"top_k": -1}, "top_k"),
    ({"top_k": validation.MAX_TOP_K + 1}, "top_k"), ({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"),
    ({"temperature": -0.5}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 1.01}, "top_p"), ({"gamma": validation.MAX_GAMMA + 1}, "gamma"),
    ({"max_new_tokens": validation.MAX_NEW_TOKENS + 1}, "max_new_tokens"),
    ({"prompt": "x" * (validation.MAX_PROMPT_CHARS + 1)}, "characters"),
])
def test_handlers_reject_before_loading(changes, fragment):
    gen = handlers.decode(args(**changes), loader=lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises(gr.Error, match=fragment):
        next(gen)


@pytest.mark.parametrize("changes", [
    {"preset": "/etc/passwd"}, {"preset": "../demo_models/tiny/target"}, {"preset": "org/model"},
    {"device": "cuda:7"}, {"top_k": -1}, {"seed": -1}, {"temperature": 11.0}, {"top_p": 0.0},
    {"gamma": 0}, {"gamma": validation.MAX_GAMMA + 1}, {"max_new_tokens": 0},
    {"max_new_tokens": validation.MAX_NEW_TOKENS + 1},
    {"prompt": "to be or not " * 200},  # over the tiny model's context of 256 tokens
    {"prompt": "x" * (validation.MAX_PROMPT_CHARS + 1)},
])
def test_api_rejects_bad_input_and_changes_nothing(server, client, changes):
    loads = server.loads
    with pytest.raises(Exception) as err:
        client.predict(*args(**changes), api_name="/decode")
    clean(str(err.value))
    prompt_checks_need_the_tokenizer = "prompt" in changes and len(changes["prompt"]) < 10_000
    assert server.loads == loads + prompt_checks_need_the_tokenizer, "a bad request loaded a model"


def test_api_next_request_after_bad_input_works(server, client):
    assert_next_request_works(client)


def test_failed_loads_leave_the_loaded_pairs_alone(monkeypatch):
    import app.hardware
    from app import pairs
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from conftest import embedded_available
    if not embedded_available():
        pytest.skip("the embedded pair is not in demo_models/tiny")
    good = pairs.get_pair("embedded", device="cpu")
    before, cached = pairs.loaded(), dict(pairs._cache)
    bad = [("nope", {}), ("/etc/passwd", {}), ("../demo_models/tiny/target", {}),
           ("qwen2.5-1.5b / 0.5b", {"device": "cpu"}),  # hub preset, offline: fails fast
           ("embedded", {"device": "tpu"}), ("embedded", {"device": "cpu", "dtype": "float64"})]
    for preset, kw in bad:
        started = time.monotonic()
        with pytest.raises(ModelLoadError):
            pairs.get_pair(preset, **kw)
        assert time.monotonic() - started < 10, f"{preset} did not fail fast"
        assert pairs.loaded() == before and dict(pairs._cache) == cached
    monkeypatch.setattr(app.hardware, "free_memory_bytes", lambda device: 1000)  # memory check
    with pytest.raises(ModelLoadError, match="GB free"):
        pairs.get_pair("embedded", device="cpu", dtype="bfloat16")
    assert pairs.loaded() == before and pairs.get_pair("embedded", device="cpu") is good


@pytest.mark.parametrize("extra, message", [
    (["--top-k", "-1"], "top_k must be between 0 and"),
    (["--seed", "-1"], "seed must be between 0 and"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--dtype", "float64"], "unknown dtype"),
    (["--target", "not a path or id!"], "not a hub id"),
])
def test_cli_bad_input_is_one_line_and_exit_2(capsys, tiny_dirs, extra, message):
    from app.cli import main
    base = ["generate", "--prompt", "x", "--target", tiny_dirs[0], "--draft", tiny_dirs[1]]
    code = main(base + extra)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1
