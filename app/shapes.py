"""Shape-only models: real architectures with random weights, for timing without downloads.

`demo_models/shapes/<name>.json` holds the published config.json fields of a real model plus
three of ours: "_label" (always "shape-only: random weights, meaningless text"),
"_source" and "_published_params" (the model's published parameter count, which the tests
check `costmodel.param_count` against). A shape-only model times like the real one - same
matrices, same cache - but its text is noise: say so wherever one is shown.
"""
from __future__ import annotations

import json

import torch

from app.costmodel import param_count
from app.hardware import check_params_fit, parse_dtype
from app.assets import SHAPES_DIR  # demo_models/shapes/

LABEL = "shape-only: random weights, meaningless text"


def list_shapes() -> list[str]:
    """Names of the stored shapes, e.g. ["gpt2", "llama-3.1-8b", ...]."""
    return sorted(p.stem for p in SHAPES_DIR.glob("*.json"))


def load_shape_json(name: str) -> dict:
    """The stored JSON of a shape, our "_" fields included."""
    path = SHAPES_DIR / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"unknown shape {name!r}: choose one of {', '.join(list_shapes())}")
    return json.loads(path.read_text())


def load_shape_config(name: str):
    """A transformers config object built from the shape's published fields (no download)."""
    from transformers import AutoConfig

    fields = {k: v for k, v in load_shape_json(name).items() if not k.startswith("_")}
    return AutoConfig.for_model(**fields)


def shape_params(name: str) -> int:
    """Parameters of a shape, counted from its config (nothing allocated; the tests check the
    count against the published one and against a model built on the meta device)."""
    return param_count(load_shape_json(name))


def make_shape_model(name: str, device: str | torch.device = "cpu",
                     dtype: str | torch.dtype = "bf16"):
    """Instantiate the shape with random weights directly on `device` (eval mode).

    Built inside `torch.device(device)`, so an 8B shape is allocated on the GPU, never on the
    CPU first; device="meta" allocates nothing (for counting parameters). Refused (ModelLoadError)
    before anything is allocated when its weights exceed the free memory of `device`.
    """
    from transformers import AutoModelForCausalLM

    config = load_shape_config(name)
    if torch.device(device).type != "meta":
        check_params_fit([(f"shape:{name}", shape_params(name))], str(device), parse_dtype(dtype))
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=parse_dtype(dtype))
    return model.eval()
