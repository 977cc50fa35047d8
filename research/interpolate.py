"""Weight-space interpolation of a fine-tuned draft with the draft it started from.

    python -m research.interpolate --a PARENT_DIR --b FINETUNED_DIR --weight 0.5 --out DIR

Every tensor becomes (1 - weight) * a + weight * b, computed in fp32 and stored in b's dtype (fp16 for
the savers' drafts); everything else (config, tokenizer) is b's. The two must be the same
architecture with the same kept vocabulary (config.json equal), as a fine-tune and its parent
are. Interpolating a fine-tune with the model it started from often keeps the fine-tune's gain
on its own data while giving back less elsewhere (Wortsman et al. 2022, "Robust fine-tuning of
zero-shot models", WiSE-FT); research/RESULTS.md says what it did for the SmolLM2 draft.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

WEIGHTS = "model.safetensors"


def interpolate_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor],
                      weight: float) -> dict[str, torch.Tensor]:
    """(1 - weight) * a + weight * b per tensor, in fp32, returned in b's dtypes."""
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        raise ValueError("the two drafts differ in their tensors' names or shapes")
    return {k: ((1 - weight) * a[k].float() + weight * b[k].float()).to(b[k].dtype) for k in b}


def interpolate_dirs(a: Path, b: Path, weight: float, out: Path) -> None:
    """Write b's folder to out with its weights interpolated toward a's (see interpolate_state)."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must lie in [0, 1], not {weight}")
    if json.loads((a / "config.json").read_text()) != json.loads((b / "config.json").read_text()):
        raise ValueError(f"{a} and {b} have different configs: not a fine-tune and its parent")
    state = interpolate_state(load_file(str(a / WEIGHTS)), load_file(str(b / WEIGHTS)), weight)
    out.mkdir(parents=True, exist_ok=True)
    for f in b.iterdir():
        if f.is_file() and f.name != WEIGHTS and not f.name.startswith("compare_"):
            shutil.copy(f, out / f.name)
    save_file(state, str(out / WEIGHTS), metadata={"format": "pt"})
    log_path = out / "train_log.json"
    if log_path.is_file():
        log = json.loads(log_path.read_text())
        log["interpolated"] = {"a": str(a), "b": str(b), "weight": weight}
        log_path.write_text(json.dumps(log, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", type=Path, required=True, help="the parent draft's folder")
    ap.add_argument("--b", type=Path, required=True, help="the fine-tuned draft's folder")
    ap.add_argument("--weight", type=float, default=0.5, help="b's share (0: a, 1: b)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    interpolate_dirs(args.a, args.b, args.weight, args.out)
    print(f"wrote {args.out}: {1 - args.weight:g} x {args.a} + {args.weight:g} x {args.b}")


if __name__ == "__main__":
    main()
