"""The app's API through gradio_client, against the server of conftest (`server`, `client`: one
per session, importing gradio is slow) on a free port of 127.0.0.1, serving the tiny random
pair of conftest so that the CLI can decode exactly the same thing."""
import json
import time

import pytest
from tests.support import STATUS, STREAM, TIMELINE, ROOFLINE, STATS, TEXT, SUMMARY, JSON_FILE, CSV_FILE

END = 'id="stream-end"'
PROMPT = "It is a truth universally acknowledged"
# outputs of /decode, in app.ui.views.View order (gr.State is not part of the API)


def decode_args(prompt=PROMPT, gamma=4, max_new_tokens=24, baseline=False, temperature=0.0):
    return (prompt, "embedded", "model", gamma, "fixed", temperature, 1.0, 0, 0, max_new_tokens,
            "cpu", False, baseline)


def cli_trace(tiny_dirs, tmp_path, capsys, max_new_tokens=24) -> tuple[dict, str]:
    """The CLI's trace (--json) and its stdout for the same settings as decode_args()."""
    from app.cli import main
    path = tmp_path / "cli.json"
    assert main(["generate", "--prompt", PROMPT, "--max-new-tokens", str(max_new_tokens), "--gamma", "4",
                 "--target", tiny_dirs[0], "--draft", tiny_dirs[1], "--device", "cpu",
                 "--json", str(path)]) == 0
    return json.loads(path.read_text()), capsys.readouterr().out


def test_decode_streams_and_matches_the_cli(client, tiny_dirs, tmp_path, capsys):
    job = client.submit(*decode_args(), api_name="/decode")
    result = job.result(timeout=300)
    updates = job.outputs()
    assert len(updates) >= 3, "the decode should stream several updates"
    ended = [i for i, u in enumerate(updates) if END in u[STREAM]]  # the text, then the charts
    assert ended == [len(updates) - 2, len(updates) - 1] and END in result[STREAM]
    expected, stdout = cli_trace(tiny_dirs, tmp_path, capsys)
    assert result[TEXT] == expected["output_text"]
    assert result[SUMMARY]["output_text"] == expected["output_text"]
    assert "acceptance rate" in result[STATS] and "throughput" in result[STATS]
    with open(result[JSON_FILE]) as f:
        assert json.load(f)["output_ids"] == expected["output_ids"]
    assert stdout.startswith(PROMPT) and "\nacceptance rate" in stdout
    assert result[TIMELINE]["type"] == "plotly" and result[ROOFLINE]["type"] == "plotly"
    with open(result[CSV_FILE]) as f:
        assert f.readline().strip() == "run,step,model,phase,batch,tokens,kv_len,seconds,flops,bytes,bound,weights"


def test_baseline_through_the_api(client):
    result = client.predict(*decode_args(max_new_tokens=12, baseline=True), api_name="/decode")
    summary = result[SUMMARY]
    assert summary["baseline"]["identical"] is True and summary["speedup"] > 0
    assert "measured speedup" in result[STATS]


@pytest.mark.parametrize("args, fragment", [
    (decode_args(prompt="   "), "prompt is empty"),
    (decode_args(prompt="to be or not " * 200), "context of 256"),
    (decode_args(gamma=0), "gamma must be between 1 and 16, got 0"),  # app.validation, not gradio's
])
def test_bad_input_is_an_error_and_the_server_stays_up(client, args, fragment):
    with pytest.raises(Exception) as err:
        client.predict(*args, api_name="/decode")
    message = str(err.value)
    assert fragment in message
    assert "Traceback" not in message and "/work" not in message and "site-packages" not in message
    ok = client.predict(*decode_args(max_new_tokens=4), api_name="/decode")
    assert END in ok[STREAM] and ok[SUMMARY]["new_tokens"] == 4


def test_stop_ends_a_running_decode(client):
    job = client.submit(*decode_args(max_new_tokens=200, gamma=1), api_name="/decode")
    while not job.outputs() and not job.done():
        time.sleep(0.02)
    client.predict(api_name="/stop")
    result = job.result(timeout=300)
    assert END in result[STREAM]
    summary = result[SUMMARY]
    assert summary["stopped"] == "cancelled" and summary["new_tokens"] < 200


def test_int8_draft_through_the_api(client):
    """The int8-draft checkbox (last input) on the fast path: the target's exact greedy output,
    the status says which draft ran; without the fast path a one-line error, and the server
    keeps serving."""
    args = decode_args(max_new_tokens=16, baseline=True)
    result = client.predict(*args[:11], True, True, "auto", True, api_name="/decode")
    assert result[SUMMARY]["baseline"]["identical"] is True
    assert "draft: int8 weights" in result[STATUS]
    with pytest.raises(Exception, match="fast path"):
        client.predict(*args[:11], False, True, "auto", True, api_name="/decode")
    assert END in client.predict(*decode_args(max_new_tokens=4), api_name="/decode")[STREAM]
