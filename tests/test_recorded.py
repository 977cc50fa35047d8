"""Recorded runs: an export loads back into the same trace and the same summary; malformed,
oversized and foreign files are refused in one line (the CLI: exit 2, nothing else written);
exports from before the schema had a version still load; and every file of the gallery loads
and matches its manifest entry."""
import copy
import json
from pathlib import Path

import pytest

from app import metrics
from app.cli import main
from app.engine import DecodeSettings, run
from app.recorded import (GALLERY_DIR, MANIFEST, MAX_STEPS, MAX_STRING_CHARS, check_trace_dict, closest_recorded,
                          find_recorded, gallery, gallery_trace, load_trace, manifest_entry, parse_trace)
from app.trace import SCHEMA_VERSION, Trace
from app.validation import InputError

OLD = Path(__file__).parent / "data" / "trace_embedded.json"  # an export from before schema_version


def cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def tiny_trace(tiny_pair):
    ids = tiny_pair.tokenizer("It is a truth", add_special_tokens=False)["input_ids"]
    *_, trace = run(tiny_pair, ids, "It is a truth", DecodeSettings(gamma=3, max_new_tokens=12), baseline=True)
    return trace


@pytest.fixture
def good() -> dict:
    return json.loads(OLD.read_text())


# --------------------------------------------------------------------------- round trips

def test_export_load_gives_the_same_trace_and_summary(tiny_trace, tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(tiny_trace.to_json())
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION
    loaded = load_trace(path)
    assert loaded == tiny_trace
    assert metrics.summary(loaded) == metrics.summary(tiny_trace)
    assert load_trace(tiny_trace.to_json()) == tiny_trace            # from text
    assert load_trace(tiny_trace.to_json().encode()) == tiny_trace   # from bytes (an upload)


def test_an_export_from_before_schema_version_still_loads():
    text = OLD.read_text()
    assert "schema_version" not in json.loads(text)
    assert load_trace(OLD) == Trace.from_json(text)
    assert load_trace(Path(__file__).parent / "data" / "trace_small.json").steps


def test_special_tokens_of_files_before_schema_3_are_known_by_their_text(good):
    """Piece.special came with schema 3; an older file's special tokens are marked from their text
    (LEGACY_SPECIAL), a newer file's flag is taken as written, whatever the text."""
    _set(good, "steps.1.pieces.0.text", "<|im_end|>")
    _set(good, "schema_version", 2)
    assert parse_trace(json.dumps(good)).steps[1].pieces[0].special
    _set(good, "schema_version", 3)
    _set(good, "steps.1.pieces.0.special", False)
    assert not parse_trace(json.dumps(good)).steps[1].pieces[0].special
    # a real flagship run (the gallery's, recorded at 36ebb93) whose draft proposed <|im_end|>, rejected
    trace = load_trace(Path(__file__).parent / "data" / "trace_flagship_special.json")
    assert [p.text for s in trace.steps for p in s.pieces if p.special] == ["<|im_end|>"]
    from dataclasses import replace
    from app.ui import views
    assert "<|im_end|>" not in views.plain_text(replace(trace, stopped=""))  # mid-stream text, as decoded


def test_generate_json_then_trace_cli_gives_the_summary(capsys, tiny_dirs, tmp_path):
    trace_json, summary_json = tmp_path / "t.json", tmp_path / "s.json"
    code, out, err = cli(capsys, "generate", "--prompt", "It is a truth", "--max-new-tokens", "10", "--gamma", "2",
                         "--baseline", "--threads", "1", "--json", str(trace_json),
                         "--target", tiny_dirs[0], "--draft", tiny_dirs[1], "--device", "cpu")
    assert code == 0, err
    assert "mean acceptance length" in out
    d = json.loads(trace_json.read_text())
    assert d["schema_version"] == SCHEMA_VERSION
    assert d["device"]["device_name"] and d["device"]["measured"]["bytes_per_s"] > 0  # the ceilings it ran under
    rec = d["recorded"]
    assert rec["date"] and rec["threads"] == 1 and "--max-new-tokens 10" in rec["command"]
    assert rec["pair"] is None  # --target / --draft: no preset
    code, out, err = cli(capsys, "trace", str(trace_json), "--json", str(summary_json))
    assert code == 0 and err == ""
    expected = metrics.summary(load_trace(trace_json))
    assert json.loads(summary_json.read_text()) == json.loads(json.dumps(expected))
    assert out.splitlines() == metrics.summary_lines(expected)
    for words in ("mean acceptance length", "tokens per drafting step", "draft acceptance rate",
                  "per-position acceptance", "tokens per target pass", "tokens/s", "time by model",
                  "time by class", "speedup", "GB/s"):
        assert words in out


# --------------------------------------------------------------------------- bad files

def _set(d: dict, path: str, value):
    """d with the field at a dotted path ("steps.0.forwards.1.seconds") set to value."""
    *parents, last = path.split(".")
    node = d
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is KeyError:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return d


BROKEN = [
    ("steps.0.forwards.0.seconds", "abc", "steps[0].forwards[0].seconds must be a number"),
    ("steps.0.forwards.0.seconds", -1.0, "steps[0].forwards[0].seconds must be a finite number >= 0"),
    ("steps.0.forwards.0.seconds", float("nan"), "steps[0].forwards[0].seconds must be a number"),
    ("steps.0.forwards.0.seconds", float("inf"), "must be a finite number >= 0"),
    ("steps.0.forwards.0.model", "oracle", "steps[0].forwards[0].model must be one of 'draft', 'target'"),
    ("steps.0.forwards.0.phase", "warmup", "steps[0].forwards[0].phase must be one of"),
    ("steps.0.forwards.0.bound", "disk", "steps[0].forwards[0].bound must be one of"),
    ("steps.1.pieces.0.fate", "lucky", "steps[1].pieces[0].fate must be one of"),
    ("steps.1.pieces.0.text", 7, "steps[1].pieces[0].text must be a string"),
    ("steps.1.pieces.0.p", 2.5, "steps[1].pieces[0].p must be finite and between 0 and 1.001"),
    ("steps.1.pieces.0.special", "yes", "steps[1].pieces[0].special must be true or false"),
    ("steps.1.n_accepted", 9, "steps[1].n_accepted must be between 0 and 4"),
    ("steps.1.n_accepted", True, "steps[1].n_accepted must be a whole number"),
    ("steps.1.emitted_ids", [1, 2, 3, 4, 5, 6], "steps[1].emitted_ids has 6 entries; at most 5"),
    ("steps.1.q_draft", [0.5], "steps[1].q_draft has 1 entries for 4 drafted tokens"),
    ("steps.1.draft_ids.0", -3, "steps[1].draft_ids[0] must be between 0 and"),
    ("steps.1.checks.0.accepted", "yes", "steps[1].checks[0].accepted must be true or false"),
    ("steps.1.gamma", KeyError, "steps[1] lacks gamma"),
    ("steps.2", "a step", "steps[2] must be a JSON object"),
    ("steps", {"0": {}}, "steps must be a list"),
    ("settings.gamma", 2.5, "settings.gamma must be a whole number"),
    ("settings.fast", "no", "settings.fast must be true or false"),
    ("summary.seconds", None, "summary.seconds must be a number"),
    ("baseline.identical", "yes", "baseline.identical must be true or false or null"),
    ("device", ["cpu"], "device must be a JSON object"),
    ("device.nested", {"a": {"b": {"c": {"d": 1}}}}, "device.nested.a.b.c is nested more than 4 levels"),
    ("prompt_ids", "1 2 3", "prompt_ids must be a list"),
    ("schema_version", "2", "schema_version must be a whole number >= 1"),
    ("schema_version", SCHEMA_VERSION + 1, "written by a newer version of the lab"),
]


@pytest.mark.parametrize("path, value, message", BROKEN, ids=[f"{p}={v!r}"[:40] for p, v, _ in BROKEN])
def test_a_broken_field_is_named_in_one_line(good, path, value, message):
    with pytest.raises(InputError) as exc:
        check_trace_dict(_set(copy.deepcopy(good), path, value), "run.json")
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert str(exc.value).startswith("run.json")


def test_infinity_is_a_ratio_over_q_zero_and_nothing_else(good):
    _set(good, "steps.1.checks.0.ratio", float("inf"))
    assert parse_trace(json.dumps(good)).steps[1].checks[0].ratio == float("inf")  # json writes Infinity
    with pytest.raises(InputError, match="must be a number"):
        parse_trace(json.dumps(_set(good, "steps.1.checks.0.ratio", float("nan"))))


FOREIGN = [
    ({"a": 1}, "is not a speculative-decoding trace"),
    ([1, 2, 3], "is not a speculative-decoding trace"),
    ("trace", "is not a speculative-decoding trace"),
    ({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}, "is not a speculative-decoding trace"),
    ({"prompt": "x", "settings": {}, "prompt_ids": []}, "is not a speculative-decoding trace"),  # no steps
]


@pytest.mark.parametrize("data, message", FOREIGN)
def test_foreign_json_is_not_a_trace(data, message):
    with pytest.raises(InputError, match=message):
        parse_trace(json.dumps(data))


def test_not_json_not_utf8_and_too_deep_are_one_line():
    for text, message in [("nope", "is not JSON (line 1, column 1"), ('{"prompt": ', "is not JSON"),
                          (b"\xff\xfe{}", "is not UTF-8 text"), ("[" * 100_000 + "]" * 100_000, "JSON")]:
        with pytest.raises(InputError) as exc:
            parse_trace(text, "up.json")
        assert message in str(exc.value) and "\n" not in str(exc.value)


def test_caps_on_size_steps_and_strings(good, tmp_path):
    text = json.dumps(good)
    with pytest.raises(InputError, match="recorded runs of at most"):
        parse_trace(text, max_bytes=len(text) - 1)
    big = tmp_path / "big.json"
    big.write_text(text)
    with pytest.raises(InputError, match=r"big.json is 0.1 MB; recorded runs of at most 0 MB"):
        load_trace(big, max_bytes=1000)  # refused from its size on disk, before it is read
    many = copy.deepcopy(good)
    many["steps"] = [{}] * (MAX_STEPS + 1)
    with pytest.raises(InputError, match=f"steps has {MAX_STEPS + 1} entries; at most {MAX_STEPS}"):
        check_trace_dict(many)
    long = _set(copy.deepcopy(good), "steps.0.pieces.0.text", "x" * (MAX_STRING_CHARS + 1))
    with pytest.raises(InputError, match=f"text is {MAX_STRING_CHARS + 1} characters long"):
        check_trace_dict(long)
    lone = _set(copy.deepcopy(good), "output_text", "\ud800")
    with pytest.raises(InputError, match="output_text is not valid Unicode"):
        parse_trace(json.dumps(lone))


def test_missing_files_and_directories(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_trace(tmp_path / "absent.json")
    with pytest.raises(InputError, match="is a directory"):
        load_trace(tmp_path)
    with pytest.raises(InputError, match="not a file of the gallery"):
        gallery_trace({"file": "../../etc/passwd"})


def _refused(capsys, tmp_path, *args):
    """The CLI refuses: exit 2, one line on stderr, nothing on stdout, no --json written."""
    out_json = tmp_path / "summary.json"
    code, out, err = cli(capsys, "trace", *args, "--json", str(out_json))
    assert code == 2 and out == "" and not out_json.exists()
    assert err.startswith("error: ") and err.count("\n") == 1
    return err


def test_the_cli_refuses_bad_files_with_exit_2(capsys, tmp_path, good):
    cases = {"missing.json": None, "notjson.json": "nope {", "foreign.json": json.dumps({"a": 1}),
             "broken.json": json.dumps(_set(copy.deepcopy(good), "steps.0.forwards.0.model", "\x1b[31mx")),
             "huge.json": " " * 20_000_001}
    for name, text in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        err = _refused(capsys, tmp_path, str(tmp_path / name))
        assert "\x1b" not in err
    assert "recorded runs of at most 20 MB" in _refused(capsys, tmp_path, str(tmp_path / "huge.json"))


def test_the_cli_refuses_an_unwritable_json_path(capsys, tmp_path):
    code, out, err = cli(capsys, "trace", str(OLD), "--json", str(tmp_path / "no" / "dir.json"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "does not exist" in err
    code, out, err = cli(capsys, "trace", str(OLD), "--json", str(tmp_path))
    assert code == 2 and out == "" and "is a directory" in err


# --------------------------------------------------------------------------- the gallery

def test_every_gallery_file_loads_and_matches_its_manifest_entry():
    entries = gallery()
    assert entries, f"no gallery: run python benchmarks/record_gallery.py ({GALLERY_DIR})"
    files = sorted(p.name for p in GALLERY_DIR.glob("*.json") if p.name != MANIFEST)
    assert sorted(e["file"] for e in entries) == files  # every file listed, every entry a file
    for entry in entries:
        trace = gallery_trace(entry)
        assert manifest_entry(GALLERY_DIR / entry["file"], trace) == entry
        rec, dev = trace.recorded, trace.device
        assert rec["pair"] and rec["date"] and len(rec["commit"]) == 40 and rec["command"].startswith("python -m app")
        assert rec["dirty"] is False  # recorded from a committed checkout: the commit made it
        assert find_recorded(trace.prompt, rec["pair"], dev["device"]) == entry
        assert dev["device_name"] and dev["measured"]["flops_per_s"] > 0 and dev["measured"]["bytes_per_s"] > 0
        assert trace.settings["temperature"] == 0 and trace.baseline.identical is True  # greedy: lossless
        assert entry["new_tokens"] == len(trace.output_ids) > 0
        assert not any(str(v).startswith("/") for v in trace.models.values() if isinstance(v, str))
    assert {e["pair"] for e in entries} >= {"embedded", "smollm2-135m q4 / distilled draft"}
    assert find_recorded("a prompt nobody recorded", "embedded") is None


def test_the_gallery_is_small():
    total = sum(p.stat().st_size for p in GALLERY_DIR.iterdir())
    assert total < 5e6, f"the gallery is {total / 1e6:.1f} MB"


# --------------------------------------------------------------------------- the closest run, replays

def test_the_closest_recorded_run_to_a_live_request():
    runs = {e["file"]: e for e in gallery()}
    emma = "cpu-embedded-emma-woodhouse-handsome-clever-and.json"
    capital = "cpu-flagship-what-is-the-capital-of.json"
    flagship = "smollm2-135m q4 / distilled draft"
    prompt = runs[emma]["prompt"]
    assert closest_recorded(prompt, "embedded", 4)["file"] == emma                  # same example, same pair
    assert closest_recorded(prompt, "embedded", 1, policy="confidence")["file"] == emma  # nothing closer
    assert closest_recorded(prompt, flagship, 1)["file"] == emma                    # same example, other pair
    assert closest_recorded(runs[capital]["prompt"], "embedded", 4)["file"] == capital
    other = closest_recorded("a prompt nobody recorded", flagship, 1)                 # same pair, any example
    assert other["pair"] == flagship
    assert closest_recorded("a prompt nobody recorded", "embedded", 4, device="cuda")["device"] == "cpu"
    assert closest_recorded("a prompt nobody recorded", "gpt2-large / gpt2", 4) is None


def test_a_replay_streams_the_recorded_tokens_and_ends_on_the_whole_run():
    from app.ui import replay
    trace = gallery_trace(gallery()[0])
    waits = []
    shown = list(replay.frames(trace, 10.0, sleep=waits.append))
    assert shown[-1] == (len(trace.steps), trace) and len(shown) > 2
    counts = [n for n, _ in shown]
    assert counts == sorted(set(counts))  # steps only ever added, none twice
    for n, partial in shown[:-1]:
        assert partial.steps == trace.steps[:n] and partial.summary is None
        assert replay.views.plain_text(partial) == "".join(
            p.text for s in trace.steps[:n] for p in s.pieces if p.fate != "rejected")
    assert sum(waits) <= 10.0 * metrics.wall_seconds(trace)[0] + 1e-9  # the pace: 10x the wall clock at most
    assert min(waits) >= replay.FRAME_S
    assert [n for n, _ in replay.frames(trace, 0.0)] == [len(trace.steps)]  # instant: the whole run
    final = list(replay.replay_gallery(gallery()[0]["file"], "instant"))[-1]
    assert "end of stream" in final[1] and final[0].startswith("Replayed: ")


def test_the_comparison_shows_each_runs_metrics_and_where_they_came_from():
    from app.ui import replay
    a, b = gallery()[0], next(e for e in gallery() if e["pair"] != gallery()[0]["pair"])
    ta, tb = gallery_trace(a), gallery_trace(b)
    text = replay.compare_markdown((a["file"], ta), (b["file"], tb))
    for trace, entry in ((ta, a), (tb, b)):
        s = metrics.summary(trace)
        assert f"{s['tokens_per_s']:.1f} tokens/s ({s['new_tokens']} tokens" in text
        assert f"{s['mean_acceptance_length']:.2f} (1 + {s['accepted']} accepted / {s['drafting_steps']} drafting" in text
        assert " · ".join(f"{i + 1}: {x:.2f}" for i, x in enumerate(s["per_position_acceptance"])) in text
        assert replay._md(entry["date"]) in text
        # the run's own speed-up: the median and range of its interleaved spec/plain pairs
        own = s["speedup_spread"]
        assert own["n"] >= 2 and metrics.speedup_text(s) in text
        assert f"{own['median']:.2f}x median, range {own['min']:.2f}–{own['max']:.2f}x" in text
        spread = replay.speedup_spread(trace)
        same = ("gamma", "fast", "draft_int8")  # the settings that make runs alike ("auto" may differ)
        alike = [e["speedup"] for e in gallery() if e["pair"] == entry["pair"] and e["device"] == entry["device"]
                 and all(e["settings"][k] == entry["settings"][k] for k in same)]
        assert spread.n == len(alike) and spread.min == min(alike) and spread.max == max(alike)
    ratio = metrics.summary(tb)["tokens_per_s"] / metrics.summary(ta)["tokens_per_s"]
    assert f"B's throughput is **{ratio:.2f}×** A's" in text


def test_strings_from_a_trace_are_escaped_in_the_replay_tab(good):
    from app.ui import replay
    good["recorded"] = {"date": "<img src=x onerror=alert(1)>", "commit": "**bold** | pipe"}
    good["device"] = {"device_name": "<script>x</script>", "device": "cpu", "dtype": "float32"}
    trace = parse_trace(json.dumps(good))
    line = replay.provenance(trace, "up|<b>.json")
    assert "<" not in line and "|" not in line.replace("\\|", "")
    table = replay.compare_markdown(("a", trace), ("b", trace))
    assert "<script>" not in table and "<img" not in table


def test_a_bad_upload_is_one_line_and_yields_nothing(tmp_path):
    import gradio as gr

    from app.ui import replay
    bad = tmp_path / "bad.json"
    bad.write_text('{"prompt": "x"}')
    with pytest.raises(gr.Error) as exc:
        next(replay.replay_upload(str(bad), "instant"))
    assert "bad.json is not a speculative-decoding trace" in exc.value.message and "\n" not in exc.value.message
    assert list(replay.replay_upload(None, "instant")) == []


def test_an_old_export_replays_and_compares_as_the_run_replayed_above(good, tmp_path):
    from app.ui import replay
    final = list(replay.replay_upload(str(OLD), "instant"))[-1]
    assert "end of stream" in final[1] and final[0].startswith("Replayed: **upload trace\\_embedded.json**")
    record = final[-1]
    assert record.trace == load_trace(OLD)
    table, *charts = replay.compare(replay.REPLAYED, gallery()[0]["file"], record)
    assert "Run A: **the run replayed above**" in table and len(charts) == 4
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(good | {"steps": [], "summary": None, "baseline": None}))
    assert list(replay.replay_upload(str(empty), "recorded pace"))[-1][0].startswith("Replayed: ")
    import gradio as gr
    with pytest.raises(gr.Error, match="nothing was replayed yet"):
        replay.compare(replay.REPLAYED, gallery()[0]["file"], None)
