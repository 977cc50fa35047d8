"""Input validation: one place, used by the UI, the API and the CLI.

Every check raises `InputError` with a one-line message naming the value and the allowed range;
nothing is loaded or changed before all checks pass.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

# The limits and the error live in app.settings (a leaf: the engine, the models and the fast
# path use them without importing this module); they are re-exported here for the callers that
# check input.
from app.settings import (DRAFTERS, MAX_BATCH, MAX_GAMMA, MAX_NEW_TOKENS, MAX_PROMPT_CHARS,  # noqa: F401
                          MAX_SEED, MAX_TEMPERATURE, MAX_TOP_K, MIN_TEMPERATURE, DecodeSettings,
                          InputError)


def _int(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or int(value) != value:
        raise InputError(f"{name} must be a whole number, got {value!r}")
    if not low <= int(value) <= high:
        raise InputError(f"{name} must be between {low} and {high}, got {int(value)}")
    return int(value)


def _float(name: str, value, low: float, high: float, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{name} must be a finite number, got {value!r}")
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        bracket = "(" if low_open else "["
        raise InputError(f"{name} must be in {bracket}{low}, {high}], got {value}")
    return float(value)


def check_temperature(value) -> float:
    """0 (greedy) or a sampling temperature in [MIN_TEMPERATURE, MAX_TEMPERATURE]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"temperature must be a finite number, got {value!r}")
    if value != 0 and not MIN_TEMPERATURE <= value <= MAX_TEMPERATURE:
        raise InputError(f"temperature must be in [{MIN_TEMPERATURE}, {MAX_TEMPERATURE}], or 0 for greedy, "
                         f"got {value}")
    return float(value)


def settings(*, gamma=4, temperature=0.0, top_k=0, top_p=1.0, seed=0, max_new_tokens=64,
             drafter="model", fast=False, draft_int8=False) -> DecodeSettings:
    """Check every decoding setting; returns DecodeSettings or raises InputError."""
    if drafter not in DRAFTERS:
        raise InputError(f"drafter must be one of {', '.join(DRAFTERS)}, got {drafter!r}")
    if draft_int8 and not fast:
        raise InputError("int8 draft weights run on the fast path (the lean decoder, CPU): turn the fast path on")
    return DecodeSettings(
        gamma=_int("gamma", gamma, 1, MAX_GAMMA),
        temperature=check_temperature(temperature),
        top_k=_int("top_k", top_k, 0, MAX_TOP_K),
        top_p=_float("top_p", top_p, 0.0, 1.0, low_open=True),
        seed=_int("seed", seed, 0, MAX_SEED),
        max_new_tokens=_int("max_new_tokens", max_new_tokens, 1, MAX_NEW_TOKENS),
        drafter=drafter, fast=bool(fast), draft_int8=bool(draft_int8) and drafter == "model")


def batch(n) -> int:
    """A batch size (sequences per forward pass): 1 .. MAX_BATCH."""
    return _int("batch size", n, 1, MAX_BATCH)


def preset(name) -> str:
    """A model-pair preset name (app.presets). The web app loads presets only: no
    file-system paths and no free-form hub ids (the CLI takes those: app.models.locate)."""
    from app.presets import PRESETS
    if isinstance(name, str) and name in PRESETS:
        return name
    shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
    raise InputError(f"unknown model pair {shown} (the app loads presets only, not paths or other "
                     f"model ids): choose one of {', '.join(PRESETS)}")


def device(name, choices) -> str:
    """One of `choices` (e.g. app.ui.turns.device_choices(): auto, cpu, and what is present)."""
    if isinstance(name, str) and name in choices:
        return name
    raise InputError(f"device {name!r} is not available here: choose one of {', '.join(choices)}")


def has_chat_template(tokenizer) -> bool:
    """Whether the tokenizer can wrap a prompt as a chat turn (instruction-tuned models)."""
    return bool(getattr(tokenizer, "chat_template", None))


def chat_for(prompt_mode: str, tokenizer) -> bool:
    """Whether a prompt mode ("chat", "continue", "auto": chat when the tokenizer has a chat
    template) sends the prompt through the chat template."""
    return prompt_mode == "chat" or (prompt_mode == "auto" and has_chat_template(tokenizer))


def prompt_ids(tokenizer, prompt, context: int, max_new_tokens: int, chat: bool = False) -> list[int]:
    """Tokenise the prompt; it must be non-empty, at most MAX_PROMPT_CHARS characters, and leave
    room for max_new_tokens (plus the gamma + 1 positions of a verify pass) in the context.
    chat=True sends it as one user message through the tokenizer's chat template with the
    assistant turn opened (ignored when the tokenizer has no template: plain continuation)."""
    prompt_text(prompt)
    if chat and has_chat_template(tokenizer):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                               add_generation_prompt=True)
    ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    limit = context - max_new_tokens - MAX_GAMMA - 1
    if len(ids) > limit:
        room = context - len(ids) - MAX_GAMMA - 1  # new tokens that fit beside this prompt
        if limit < 1 and room >= 1:  # max_new_tokens alone fills the context: blame it, not the prompt
            raise InputError(f"max_new_tokens={max_new_tokens} does not fit this model's context of {context}: "
                             f"beside this prompt of {len(ids)} tokens at most {room} new tokens fit")
        raise InputError(f"the prompt is {len(ids)} tokens; with max_new_tokens={max_new_tokens} "
                         f"this model's context of {context} allows at most {max(limit, 0)}")
    return ids


def prompt_text(prompt) -> str:
    """A non-empty prompt of at most MAX_PROMPT_CHARS characters that is valid Unicode (before
    tokenising it). A lone surrogate ("\\ud800" through the API; bytes that are not UTF-8 on a
    command line, which Python hands over as surrogate escapes) cannot be encoded as UTF-8, and
    the tokenizer would fail on it with a message about its own internals."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty: type some text to continue")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InputError(f"the prompt is {len(prompt)} characters; at most {MAX_PROMPT_CHARS} are accepted")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("the prompt contains invalid text (not valid Unicode, e.g. bytes that are "
                         "not UTF-8): type or paste it as plain text") from None
    return prompt


def output_path(path: str, option: str = "--json") -> str:
    """A file the CLI can write at the end of a run, checked before anything runs: not a
    directory, in a directory that exists and is writable (an existing file: writable)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{option} {path} is a directory: give a file path, e.g. {p / 'out.json'}")
    parent = p.parent
    if not parent.is_dir():
        raise InputError(f"{option} {path}: the directory {parent} does not exist: create it or choose another")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError(f"{option} {path}: cannot write there: choose a path in a writable directory")
    return path
