"""The CLI and loading: bad input gives one clear line and exit status 2, and changes nothing."""
import subprocess
import sys

import pytest

from app.cli import main
from app.validation import MAX_GAMMA, MAX_NEW_TOKENS


def cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def pair_args(tiny_dirs):
    return ["--target", tiny_dirs[0], "--draft", tiny_dirs[1], "--device", "cpu"]


def test_generate_prints_text_and_summary(capsys, pair_args, tmp_path):
    out_json = tmp_path / "t.json"
    code, out, err = cli(capsys, "generate", "--prompt", "It is a truth", "--max-new-tokens", "12",
                         "--gamma", "3", "--baseline", "--json", str(out_json), *pair_args)
    assert code == 0, err
    assert out.startswith("It is a truth")
    for line in ("acceptance rate", "tokens per target pass", "forward passes", "tokens/s",
                 "measured speedup", "greedy outputs identical: yes"):
        assert line in out
    assert out_json.is_file()


def test_the_prompt_is_positional_or_an_option_never_both_or_neither(capsys, pair_args):
    code, out, err = cli(capsys, "generate", "It is a truth", "--max-new-tokens", "6", *pair_args)
    code_opt, out_opt, _ = cli(capsys, "generate", "--prompt", "It is a truth", "--max-new-tokens", "6", *pair_args)
    assert code == code_opt == 0, err
    assert out.splitlines()[0] == out_opt.splitlines()[0]   # the same greedy text either way
    for args in (["It is", "--prompt", "a truth"], []):
        with pytest.raises(SystemExit) as exit_:
            main(["generate", *args, *pair_args])
        assert exit_.value.code == 2 and "one prompt" in capsys.readouterr().err


BAD = [
    (["--prompt", ""], "prompt is empty"),
    (["--prompt", "   "], "prompt is empty"),
    (["--prompt", "x", "--gamma", "0"], "gamma must be between 1 and"),
    (["--prompt", "x", "--gamma", str(MAX_GAMMA + 1)], "gamma must be between 1 and"),
    (["--prompt", "x", "--temperature", "-0.1"], "temperature must be in"),
    (["--prompt", "x", "--temperature", "nan"], "temperature must be a finite number"),
    (["--prompt", "x", "--temperature", "inf"], "temperature must be a finite number"),
    (["--prompt", "x", "--top-p", "0"], "top_p must be in (0.0, 1.0]"),
    (["--prompt", "x", "--top-p", "1.5"], "top_p must be in (0.0, 1.0]"),
    (["--prompt", "x", "--max-new-tokens", "0"], "max_new_tokens must be between 1 and"),
    (["--prompt", "x", "--max-new-tokens", str(MAX_NEW_TOKENS + 1)], "max_new_tokens must be between 1 and"),
    (["--prompt", "x", "--drafter", "oracle"], "drafter must be one of"),
    (["--prompt", "word " * 400], "this model's context of 256 allows at most"),
]


@pytest.mark.parametrize("args,message", BAD)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(capsys, pair_args, tmp_path, args, message):
    out_json = tmp_path / "t.json"
    code, out, err = cli(capsys, "generate", *args, *pair_args, "--json", str(out_json))
    assert code == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert "Traceback" not in err + out
    assert not out_json.exists()


def test_mismatched_tokenizers_refused(capsys, tiny_dirs):
    code, _, err = cli(capsys, "generate", "--prompt", "x", "--target", tiny_dirs[0], "--draft", tiny_dirs[2])
    assert code == 2 and "tokenizers" in err and "differ" in err


def test_path_without_model(capsys, tmp_path, tiny_dirs):
    code, _, err = cli(capsys, "generate", "--prompt", "x", "--target", str(tmp_path), "--draft", tiny_dirs[1])
    assert code == 2 and "holds no model" in err
    code, _, err = cli(capsys, "generate", "--prompt", "x", "--target", str(tmp_path / "nope"), "--draft", tiny_dirs[1])
    assert code == 2 and "no model directory there" in err


def test_offline_hub_id_fails_fast_naming_the_embedded_pair(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = cli(capsys, "generate", "--prompt", "x", "--target", "Qwen/Qwen2.5-7B-Instruct",
                       "--draft", "Qwen/Qwen2.5-0.5B-Instruct")
    assert code == 2 and "embedded pair" in err and err.count("\n") == 1


def test_unreachable_hub_fails_fast_too(capsys, monkeypatch):
    import app.models
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(app.models, "hub_reachable", lambda timeout=3.0: False)
    code, _, err = cli(capsys, "generate", "--prompt", "x", "--target", "org/model-a", "--draft", "org/model-b")
    assert code == 2 and "cannot be reached" in err and "embedded pair" in err


def test_subprocess_error_has_no_traceback(tiny_dirs):
    proc = subprocess.run([sys.executable, "-m", "app", "generate", "--prompt", "x", "--gamma", "99",
                           "--target", tiny_dirs[0], "--draft", tiny_dirs[1]],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: gamma must be between 1 and 16, got 99"]


def test_plain_output_drops_rejected_tokens_and_tty_colours_them():
    from app.cli import colour
    from app.trace import Piece
    pieces = [Piece(1, "a", "accepted", 0), Piece(2, "b", "rejected", 0), Piece(3, "c", "correction", 0),
              Piece(4, "<|im_end|>", "bonus", 1, special=True)]
    assert colour(pieces, tty=False) == "ac"  # rejected drafts and special tokens are not printed
    coloured = colour(pieces, tty=True)
    assert "\x1b[9;31mb" in coloured and "\x1b[32ma" in coloured


def test_pair_too_big_for_free_memory_is_refused_before_loading(capsys, tiny_dirs, monkeypatch):
    import app.hardware
    monkeypatch.setattr(app.hardware, "free_memory_bytes", lambda device: 1000)
    code, _, err = cli(capsys, "generate", "--prompt", "x", "--target", tiny_dirs[0], "--draft", tiny_dirs[1])
    assert code == 2 and "GB of weights in float32" in err and "GB free" in err


def test_nan_logits_are_one_line_in_the_cli(capsys, tiny_dirs, monkeypatch):
    import app.engine
    real = app.engine.timed_forward

    def poisoned(model, ids, cache, device, **kw):
        logits, timing = real(model, ids, cache, device, **kw)
        return (logits * float("nan") if kw.get("phase") in ("verify", "decode") else logits), timing

    monkeypatch.setattr(app.engine, "timed_forward", poisoned)
    code, _, err = cli(capsys, "generate", "--prompt", "It is", "--target", tiny_dirs[0], "--draft", tiny_dirs[1])
    assert code == 2 and "NaN or inf logits" in err and err.count("\n") == 1


def test_the_summary_says_what_each_choice_measured():
    """A recorded run's choices in words (app.trace.CHOICE_NOTES: depth policy, fast path, int8
    draft) each get a line under their label, with the trace's own words."""
    from app.assets import RECORDED_DIR
    from app.cli import summary_lines
    from app.recorded import load_trace
    from app.trace import CHOICE_NOTES
    trace = load_trace(sorted(RECORDED_DIR.glob("cpu-*.json"))[0])
    lines = summary_lines(trace)
    for key, label in CHOICE_NOTES.items():
        assert f"{label:<22} {trace.settings[key]}" in lines
