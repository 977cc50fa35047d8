"""Where the shipped assets live: demo_models/ at the repository root holds data only (the
embedded pair, the flagship's distilled draft, the shape-only configs, model cards), found here
by path so neither the app nor the lab (research/) imports anything from that folder.

`TINY_TARGET_DIR` / `TINY_DRAFT_DIR` (and `SMOLLM2_DRAFT_DIR`) are ordinary Hugging Face model directories: they load
with `AutoModelForCausalLM.from_pretrained(dir)` exactly like a hub pair.
"""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_MODELS_DIR = REPO_ROOT / "demo_models"
TINY_DIR = DEMO_MODELS_DIR / "tiny"
TINY_TARGET_DIR = TINY_DIR / "target"
TINY_DRAFT_DIR = TINY_DIR / "draft"
SHAPES_DIR = DEMO_MODELS_DIR / "shapes"
SMOLLM2_DRAFT_DIR = DEMO_MODELS_DIR / "smollm2_draft"  # the draft distilled for the flagship target
RECORDED_DIR = DEMO_MODELS_DIR / "recorded"  # the gallery of recorded runs (app.recorded)
