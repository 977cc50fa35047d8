"""Speculative Decoding Lab: `python app.py` (or `gradio app.py` to reload on edits).

On a Hugging Face Space (SPACE_ID set) the `spaces` package is imported first, before torch:
on ZeroGPU it patches torch at import and refuses to if CUDA has started. Then the default pair
is loaded at start-up (app.spaces.preload: on ZeroGPU, the models' move to CUDA that ZeroGPU
expects at module scope), so the first visitor does not wait for it. Off a Space neither happens.
"""
import os
from pathlib import Path

if __name__ == "app":  # `gradio app.py` imports this file as module "app", shadowing the package
    __path__ = [str(Path(__file__).with_suffix(""))]  # so that app.ui etc. still resolve

if os.environ.get("SPACE_ID"):
    try:
        import spaces  # before torch: see the docstring
        spaces.disable_gradio_auto_wrap()  # only the decode takes a GPU (app.spaces), never a replay
    except ImportError:
        pass

from app.ui import build_demo, launch  # noqa: E402

demo = build_demo()

if os.environ.get("SPACE_ID"):
    from app.pairs import get_pair
    from app.presets import default_preset
    from app.spaces import preload
    failed = preload(get_pair, default_preset())
    if failed:
        print(f"note: {failed}; the first decode will load it")

if __name__ == "__main__":
    launch(demo)
