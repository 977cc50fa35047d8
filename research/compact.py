"""Rewrite a saved tokenizer.json without its indentation.

`save_pretrained` writes tokenizer.json pretty-printed: for SmolLM2's 49,152-entry vocabulary and
its merges that is 3.5 MB, of which 2.0 MB is indentation and line breaks. Everything git tracks
must stay under the 64 MiB that one GPU-tool call carries (tests/test_demo_models.py), and the
teacher-reply records grow with every training round, so the shipped tokenizers are stored as
the same JSON with no whitespace: json-equal to what was saved, loaded identically.
"""
from __future__ import annotations

import json
from pathlib import Path


def compact_text(data) -> str:
    """JSON with no whitespace between tokens (UTF-8 characters kept, key order kept): the form
    every shipped tokenizer.json is stored in."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def compact_json(path: str | Path) -> int:
    """Rewrite the JSON file at `path` with no whitespace between tokens (UTF-8, key order kept).
    Returns the bytes saved."""
    path = Path(path)
    before = path.stat().st_size
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(compact_text(data), encoding="utf-8")
    return before - path.stat().st_size


def compact_tokenizer(directory: str | Path) -> int:
    """compact_json on DIRECTORY/tokenizer.json when there is one; returns the bytes saved."""
    path = Path(directory) / "tokenizer.json"
    return compact_json(path) if path.is_file() else 0
