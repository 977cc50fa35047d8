"""Speculative Decoding Lab: `python app.py` (or `gradio app.py` to reload on edits)."""
from pathlib import Path

if __name__ == "app":  # `gradio app.py` imports this file as module "app", shadowing the package
    __path__ = [str(Path(__file__).with_suffix(""))]  # so that app.ui etc. still resolve

from app.ui import build_demo, launch  # noqa: E402

demo = build_demo()

if __name__ == "__main__":
    launch(demo)
