"""Error messages of the app's API and page (issue 35): plain text for API clients, escaped for
the page's toast (it renders HTML); lesson errors escaped like the decode's; a value Gradio
cannot convert, or a request with too few values, answered with one line; the memory-wall
inputs judged in the unit typed; max new tokens bounded by the chosen pair's context.

Through the server of conftest (`server`, `client`: the tiny random pair, context 256), with
gradio_client, plain HTTP for what gradio_client will not send, and headless Chromium for the
toast (skipped where Debian's chromium or playwright is missing)."""
import html
import json
import re
import urllib.request

import gradio as gr
import pytest

from app import validation
from app.ui import handlers, lessons, live
from app.presets import PRESETS
from tests.support import SUMMARY

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only
PAGE = gr.Request(headers={"x-gradio-user": "app"})  # what Gradio's front end sends
API = gr.Request(headers={"x-gradio-user": "api"})   # what gradio_client sends
CURL = gr.Request(headers={})                         # a plain HTTP client
MARKUP = "<b>1</b> && 2"
PARAMS = "parameters (billions)"


def decode_args(**changes) -> list:
    """The 15 values of /decode, in order, with `changes`."""
    values = dict(prompt="It is a truth", preset="embedded", drafter="model", gamma=3, depth_policy="fixed",
                  temperature=0.0, top_p=1.0, top_k=0, seed=0, max_new_tokens=4, device="cpu",
                  fast_path=False, baseline=False, prompt_mode="auto", draft_int8=False)
    assert set(changes) <= set(values)
    return list((values | changes).values())


def api_error(client, args, api_name="/decode") -> str:
    """The message of the error the API answers `args` with (the test fails if it succeeds)."""
    with pytest.raises(Exception) as err:
        client.predict(*args, api_name=api_name)
    return str(err.value)


def raw_call(server: str, api_name: str, data: list) -> dict:
    """POST `data` to /gradio_api/call/<api_name> (the curl API) and return the last event's
    data: what a plain HTTP client reads."""
    request = urllib.request.Request(f"{server}gradio_api/call/{api_name}", data=json.dumps({"data": data}).encode(),
                                     headers={"Content-Type": "application/json"})
    with NO_PROXY.open(request, timeout=30) as response:
        event = json.loads(response.read())["event_id"]
    with NO_PROXY.open(f"{server}gradio_api/call/{api_name}/{event}", timeout=120) as response:
        lines = response.read().decode().splitlines()
    return json.loads([line for line in lines if line.startswith("data:")][-1][5:])


@pytest.fixture(scope="module")
def memory_wall(client):
    """(api name, labels in API order) of the memory-wall tab's endpoint."""
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    for name, info in endpoints.items():
        labels = [p.get("label") for p in info["parameters"]]
        if PARAMS in labels:
            return name, labels
    pytest.fail("no endpoint takes the memory wall's parameters")


def memory_wall_args(labels, **changes) -> list:
    """The memory-wall tab's values in API order, by label; `changes` by label too."""
    values = {PARAMS: 70, "weights dtype": "fp16", "batch": 1, "tokens per pass q (γ + 1 when verifying)": 1,
              "device": lessons.CUSTOM_DEVICE, "bandwidth TB/s (custom)": 2.0,
              "peak TFLOP/s (custom, 0 = unknown)": 300, "cached tokens read per pass (KV cache)": 1024,
              "KV KiB per cached token (Llama-3-70B, fp16: 320)": 320,
              "also measure this device's ridge (a few seconds)": False} | changes
    return [values[label] for label in labels]


# --------------------------------------------------------------------------- 7: plain for the API

def test_user_error_escapes_for_the_page_only():
    """The page's toast renders HTML: escape for it (and when the caller is unknown); API
    clients read text: an install command quoted in an error must stay runnable."""
    message = "not installed: pip install a==1 && pip install --no-deps <pkg>"
    escaped = html.escape(message, quote=False)
    assert handlers.user_error(message, PAGE).message == escaped
    assert handlers.user_error(message).message == escaped
    assert handlers.user_error(message, API).message == message
    assert handlers.user_error(message, CURL).message == message


def test_api_errors_arrive_as_plain_text(client, server):
    message = api_error(client, decode_args(preset=f"x {MARKUP}"))
    assert f"unknown model pair 'x {MARKUP}'" in message, message
    assert "&amp;" not in message and "&lt;" not in message
    assert f"'x {MARKUP}'" in raw_call(server, "decode", decode_args(preset=f"x {MARKUP}"))["error"]


# --------------------------------------------------------------------------- 8: lesson errors

def knee_kwargs(q):
    return {"qs": lessons.parse_ints(q, "q")}


def test_lesson_errors_are_escaped_like_the_decodes():
    bad = "<img src=x onerror=alert(1)>"
    with pytest.raises(gr.Error) as err:
        lessons.run_tab("knee", None, knee_kwargs, [bad], PAGE)
    assert "<img" not in err.value.message and html.escape(bad, quote=False) in err.value.message
    with pytest.raises(gr.Error) as err:
        lessons.run_tab("knee", None, knee_kwargs, [bad], API)
    assert err.value.message == f"q: expected comma-separated whole numbers, got {bad!r}"


def test_lesson_errors_through_the_api_are_plain(client, memory_wall):
    name, labels = memory_wall
    message = api_error(client, memory_wall_args(labels, **{"device": f"x {MARKUP}"}), name)
    assert f"unknown device 'x {MARKUP}'" in message, message


@pytest.mark.browser
def test_the_toast_shows_markup_in_an_error_as_text(server):
    """In the page, an error quoting `<b>1</b> && 2` shows those characters, not bold text."""
    from tests.test_browser import ARGS, CHROMIUM, _missing
    if _missing():
        pytest.skip(_missing())
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.goto(server)
            page.get_by_role("tab", name="Knee", exact=True).click()
            page.get_by_label("tokens per pass q (comma-separated)").fill(MARKUP)
            page.locator("button:visible", has_text=re.compile(r"^\s*Run\s*$")).click()
            toast = page.locator("[data-testid=toast-text]").first
            toast.wait_for(timeout=60_000)
            assert MARKUP in toast.inner_text()
            assert toast.locator("b").count() == 0
        finally:
            browser.close()


# --------------------------------------------------------------------------- 9: one clear line

@pytest.mark.parametrize("changes, expected", [
    ({"gamma": "abc"}, "gamma must be a whole number, got 'abc'"),
    ({"top_k": "abc"}, "top_k must be a whole number, got 'abc'"),
    ({"temperature": "hot"}, "temperature must be a finite number, got 'hot'"),
    ({"gamma": 0}, "gamma must be between 1 and 16, got 0"),
    ({"device": "<gpu>"}, "device '<gpu>' is not available here"),
    ({"fast_path": "no"}, "fast_path must be auto, on or off (or true / false), got 'no'"),
    ({"prompt": 42}, "the prompt must be text, got 42"),
])
def test_values_gradio_cannot_convert_get_one_clear_line(client, changes, expected):
    message = api_error(client, decode_args(**changes))
    assert expected in message and "\n" not in message, message


def test_too_few_values_get_one_clear_line(server, client, memory_wall):
    assert raw_call(server, "decode", decode_args()[:3])["error"] == \
        "the request has 3 values, the /decode endpoint takes 15"
    name, labels = memory_wall
    assert raw_call(server, name.lstrip("/"), [70, "fp16"])["error"] == \
        f"the request has 2 values, the {name} endpoint takes {len(labels)}"
    assert client.predict(*decode_args(), api_name="/decode")[SUMMARY]["new_tokens"] == 4  # still serving


# --------------------------------------------------------------------------- 11: the unit typed, the pair's room

@pytest.mark.parametrize("changes, expected", [
    ({PARAMS: -1}, "parameters must be between 1e-09 and 1e+06 billion, got -1"),
    ({PARAMS: 1e300}, "parameters must be between 1e-09 and 1e+06 billion, got 1e+300"),
    ({PARAMS: "abc"}, "parameters must be a number, got 'abc'"),
    ({"bandwidth TB/s (custom)": 1e300}, "bandwidth must be between 1e-12 and 10000 TB/s, got 1e+300"),
    ({"bandwidth TB/s (custom)": "fast"}, "bandwidth must be a number, got 'fast'"),
    ({"peak TFLOP/s (custom, 0 = unknown)": -5}, "peak must be between 0 and 1e+06 TFLOP/s, got -5"),
])
def test_memory_wall_errors_in_the_unit_typed(client, memory_wall, changes, expected):
    name, labels = memory_wall
    assert api_error(client, memory_wall_args(labels, **changes), name) == expected


def test_max_new_tokens_slider_leaves_the_pair_room(server):
    """The slider's maximum leaves a prompt and a verify pass room in the default pair's context
    (the tests' default is the embedded pair, context 1024), and follows the chosen pair."""
    with NO_PROXY.open(f"{server}config", timeout=30) as response:
        config = json.loads(response.read())
    by_label = {c["props"].get("label"): c for c in config["components"]}
    slider, preset = by_label["Max new tokens"], by_label["Model pair (target / draft)"]
    assert slider["props"]["maximum"] == live.max_new_tokens_for("embedded")
    assert live.max_new_tokens_for("embedded") + live.PROMPT_ROOM + validation.MAX_GAMMA + 1 == 1024
    follows = [d for d in config["dependencies"] if [preset["id"], "change"] in [list(t) for t in d["targets"]]]
    assert any(slider["id"] in d["outputs"] for d in follows), "changing the pair should bound the slider"
    for name in PRESETS:
        top = live.max_new_tokens_for(name)
        assert 1 <= top <= validation.MAX_NEW_TOKENS
        update = live.bound_max_new_tokens(name, validation.MAX_NEW_TOKENS)
        assert update["maximum"] == top and update["value"] == top


def test_max_new_tokens_beyond_the_context_is_refused(client):
    message = api_error(client, decode_args(max_new_tokens=1024))
    found = re.fullmatch(r"max_new_tokens=1024 does not fit this model's context of 256: "
                         r"beside this prompt of (\d+) tokens at most (\d+) new tokens fit", message)
    assert found, message
    assert int(found[1]) + int(found[2]) + validation.MAX_GAMMA + 1 == 256
