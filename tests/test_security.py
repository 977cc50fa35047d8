"""Security: everything a user or a model writes is escaped before it becomes HTML; errors
carry no paths or tracebacks; the server hands out no file but the app's own exports.

The server is launched in-process on a free port of 127.0.0.1; all traffic stays there.
"""
import html
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from gradio_client import Client

from app import annotate
from app.ui import handlers, views
from tests.support import STREAM, TEXT, JSON_FILE, FAKE_CEILINGS, free_port, error_when_loading_fails

END = 'id="stream-end"'
XSS = '<script>alert(1)</script> <img src=x onerror=alert(1)> "double" \'single\' & more'
ESCAPED = ("&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(1)&gt;",
           "&quot;double&quot;", "&#x27;single&#x27;", "&amp; more")
RAW = ("<script", "</script", "<img", "<b>", "<a ", '"double"', "'single'")
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only


def args(prompt="It is a truth", preset="embedded", max_new_tokens=8, gamma=3):
    return (prompt, preset, "model", gamma, "fixed", 0.0, 1.0, 0, 0, max_new_tokens, "cpu", False, False)


def assert_no_raw_html(stream: str) -> None:
    low = stream.lower()
    for raw in RAW:
        assert raw not in low, f"{raw!r} reached the HTML unescaped"


# --------------------------------------------------------------------------- a model that writes HTML

FRAGMENTS = ["<script>", "alert(1)", "</script>", "<img src=x onerror=alert(1)>", '"double"',
             "'single'", "&amp;", "<b>bold</b>", '<a href="javascript:alert(1)">', "</a>", " ", "\n"]


def write_in_turn(model, tokens: list[int]) -> None:
    """Bias the model's logits so that at position p it predicts tokens[p % len(tokens)]: a
    random model that writes every markup token of its vocabulary, in turn."""
    forward = model.forward

    def biased(input_ids=None, cache=None, **kw):
        start = cache.get_seq_length() if cache is not None else 0
        out = forward(input_ids=input_ids, cache=cache, **kw)
        for i in range(input_ids.shape[1]):
            out.logits[:, i, tokens[(start + i + 1) % len(tokens)]] += 100.0
        return out
    model.forward = biased


@pytest.fixture(scope="module")
def html_pair(tmp_path_factory):
    """A random tiny pair on a byte-level BPE trained (without the pre-tokenizer's word split)
    on markup, so whole tags like `<script>` are single tokens; it writes all of them."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from app.models import load_pair
    from conftest import save_random
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    # without the word split each fragment is one "word": frequent ones become single tokens
    tok.train_from_iterator(FRAGMENTS * 50, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                        bos_token="<|endoftext|>", pad_token="<|endoftext|>")
    directory = save_random(tokenizer, tmp_path_factory.mktemp("html_model") / "m", 1, 32, 3)
    pair = load_pair(directory, directory, device="cpu")
    vocab = {i: tokenizer.decode([i]) for i in range(len(tokenizer))}
    assert {"<script>", "</script>", "<img src=x onerror=alert(1)>"} <= set(vocab.values())
    pair.markup = [i for i, t in vocab.items() if any(c in t for c in "<>\"'&")
                   and i != tokenizer.eos_token_id]
    for model in (pair.target, pair.draft):
        write_in_turn(model, pair.markup)
    return pair


@pytest.fixture
def fake_ceilings(monkeypatch):
    monkeypatch.setattr(annotate, "ceilings", lambda device, dtype, progress=None: FAKE_CEILINGS)


def test_user_prompt_is_escaped_in_every_streamed_frame(tiny_pair, fake_ceilings):
    views = list(handlers.decode(args(prompt=XSS), loader=lambda *a, **k: tiny_pair))
    assert views and END in views[-1].stream
    for view in views:
        assert_no_raw_html(view.stream)
        assert all(e in view.stream for e in ESCAPED)
        assert "<script" not in view.status.lower() and "<img" not in view.status.lower()


def test_model_tokens_are_escaped(html_pair, fake_ceilings):
    n = 2 * len(html_pair.markup)
    views = list(handlers.decode(args(prompt="hello", max_new_tokens=n), loader=lambda *a, **k: html_pair))
    trace = views[-1].record.trace
    risky = [p.text for s in trace.steps for p in s.pieces if any(c in p.text for c in "<>\"'&")]
    written = set(trace.output_ids)
    assert set(html_pair.markup) <= written, f"the model should write all markup: {trace.output_text!r}"
    assert "<script>" in risky and "<img src=x onerror=alert(1)>" in risky
    for view in views:
        assert_no_raw_html(view.stream)
        assert "<b>" not in view.stream and "<a " not in view.stream
    final = views[-1].stream
    for text in risky:
        if "\n" not in text:  # (a newline becomes a line break inside the escaped text)
            assert html.escape(text, quote=True) in final


# --------------------------------------------------------------------------- through the server

@pytest.fixture(scope="module")
def server(tiny_pair):
    from app.ui import build_demo
    state = SimpleNamespace(pair=tiny_pair, fail=None)

    def loader(preset, device="auto", dtype="auto", ngram=False, progress=None):
        if state.fail is not None:
            raise state.fail
        return state.pair

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(annotate, "ceilings", lambda device, dtype, progress=None: FAKE_CEILINGS)
        demo = build_demo(loader)
        port = free_port()
        demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
        state.url = f"http://127.0.0.1:{port}/"
        yield state
        demo.close()


@pytest.fixture(scope="module")
def client(server, tmp_path_factory):
    c = Client(server.url, analytics_enabled=False, verbose=False,
               download_files=str(tmp_path_factory.mktemp("dl")))
    yield c
    c.close()


def test_api_streams_escaped_prompt_and_tokens(server, client, html_pair, tiny_pair):
    job = client.submit(*args(prompt=XSS), api_name="/decode")
    job.result(timeout=60)
    for update in job.outputs():
        assert_no_raw_html(update[STREAM])
        assert all(e in update[STREAM] for e in ESCAPED)
    server.pair = html_pair
    try:
        result = client.predict(*args(prompt="hello", max_new_tokens=2 * len(html_pair.markup)),
                                api_name="/decode")
    finally:
        server.pair = tiny_pair
    assert "<script>" in result[TEXT] and "<img src=x onerror=alert(1)>" in result[TEXT], result[TEXT]
    assert_no_raw_html(result[STREAM])
    assert ">&lt;script&gt;</span>" in result[STREAM]  # the token, whole, inside its span
    assert ">&lt;img src=x onerror=alert(1)&gt;</span>" in result[STREAM]


LEAKY = [
    OSError(f"{handlers.REPO_ROOT}/demo_models/tiny/target/model.safetensors: file is corrupt"),
    RuntimeError("shape mismatch in /usr/lib/python3.11/site-packages/transformers/modeling_utils.py:123"),
    ValueError("Traceback (most recent call last):\n  File \"/srv/app/x.py\", line 1\nboom"),
]


@pytest.mark.parametrize("error", LEAKY, ids=["repo-path", "site-packages", "traceback"])
def test_errors_through_the_api_carry_no_paths_or_tracebacks(server, client, error):
    message = error_when_loading_fails(server, client, error, args())
    assert "Traceback" not in message and "site-packages" not in message
    assert handlers.REPO_ROOT not in message and "/srv/" not in message and "/usr/" not in message
    assert message.strip(), "the user should be told something"


def test_mid_run_error_through_the_api_carries_no_path(server, client, monkeypatch):
    import app.engine as engine

    def broken(*a, **k):
        raise RuntimeError(f"CUBLAS_STATUS_EXECUTION_FAILED at {torch.__file__}")
    monkeypatch.setattr(engine, "timed_forward", broken)
    with pytest.raises(Exception) as err:
        client.predict(*args(), api_name="/decode")
    message = str(err.value)
    assert "decoding failed: CUBLAS_STATUS_EXECUTION_FAILED" in message
    assert "site-packages" not in message and "/" not in message.split("decoding failed:")[1]


def test_error_messages_are_html_escaped():
    err = handlers.user_error("unknown model pair '<img src=x onerror=alert(1)>'")
    assert "<img" not in err.message and "&lt;img src=x onerror=alert(1)&gt;" in err.message


# --------------------------------------------------------------------------- file serving

def status_of(url: str) -> int:
    try:
        with NO_PROXY.open(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_only_the_apps_exports_are_served(server, tmp_path_factory):
    raw = Client(server.url, analytics_enabled=False, verbose=False, download_files=False)
    try:
        result = raw.predict(*args(max_new_tokens=4), api_name="/decode")
    finally:
        raw.close()
    export = result[JSON_FILE]
    url = export["url"] if isinstance(export, dict) else export
    assert url.startswith(server.url), url
    with NO_PROXY.open(url, timeout=30) as response:  # the export itself: served
        assert response.status == 200 and "output_ids" in json.loads(response.read())
    repo = Path(handlers.REPO_ROOT)
    refused = ["/etc/passwd", str(repo / "README.md"), "README.md", "app/models.py",
               str(repo / "demo_models" / "tiny" / "target" / "config.json"),
               "../../../../../../etc/passwd", "%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
               str(views.export_root()),  # the app's export folder itself: gradio serves its copies
               str(next(views.export_root().glob("*/trace.json"))),
               f"http://127.0.0.1:{urllib.parse.urlparse(server.url).port}/config"]  # no SSRF
    for path in refused:
        code = status_of(f"{server.url}gradio_api/file={path}")
        assert code in (403, 404), f"{path} was served ({code})"
