"""The embedded demo pair: its training recipe, evaluation, presets and shape-only configs.

`TINY_TARGET_DIR` / `TINY_DRAFT_DIR` (and `SMOLLM2_DRAFT_DIR`) are ordinary Hugging Face model directories: they load
with `AutoModelForCausalLM.from_pretrained(dir)` exactly like a hub pair.
"""
from pathlib import Path

HERE = Path(__file__).resolve().parent
TINY_DIR = HERE / "tiny"
TINY_TARGET_DIR = TINY_DIR / "target"
TINY_DRAFT_DIR = TINY_DIR / "draft"
SHAPES_DIR = HERE / "shapes"
SMOLLM2_DRAFT_DIR = HERE / "smollm2_draft"  # the draft distilled for the flagship target
