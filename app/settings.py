"""Decoding settings, their limits, and the errors that report bad input: the leaf of the app.

This module imports nothing from the app (tests/test_layering.py checks it), so every layer can
depend on it without depending on the others: the engine reads DecodeSettings, app.validation
checks values against the limits, the model loaders and the fast path raise InputError /
ModelLoadError, and none of them needs to import another to do so.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_GAMMA = 16            # beyond ~8 the acceptance of every drafter here makes depth pure waste
MAX_NEW_TOKENS = 1024
MAX_TEMPERATURE = 10.0
# Sampling divides float32 logits by T (app.speculative.logits_to_probs; bf16 logits are cast
# first, and bf16 has float32's range). T >= 0.01 keeps logits / T finite for logits up to
# 3.4e36 in magnitude (float32's max is 3.4e38), far past any model's; T = 1e-300 rounds to 0 in
# float32 and gives inf / NaN. Below 0.01 a logit gap of 0.1 already weighs e^-10 against the
# top token, so sampling is greedy in all but name: T = 0 asks for that.
MIN_TEMPERATURE = 0.01
MAX_SEED = 2**63 - 1
MAX_TOP_K = 1_000_000
MAX_BATCH = 4096          # sequences per pass in the batch lessons; logits are batch x q x vocab
MAX_PROMPT_CHARS = 100_000  # checked before tokenising; the token limit is the model's context
DRAFTERS = ("model", "ngram")


class InputError(ValueError):
    """Bad user input; the message is safe to show as-is."""


class ModelLoadError(ValueError):
    """A pair could not be loaded; the message says why in one line."""


@dataclass
class DecodeSettings:
    """Validated by app.validation.settings before they reach the engine."""
    gamma: int = 4
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_new_tokens: int = 64
    drafter: str = "model"  # "model" | "ngram"
    fast: bool = False      # app.fastpath: fixed-address KV caches (lean decoder on CPU, CUDA graphs on CUDA)
    draft_int8: bool = False  # the draft model's weights in int8 (app.lean.Int8Weight; fast path, CPU)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Defaults:
    """The one set of starting values of the Live tab (app.ui.live) and the CLI (app.cli): the
    app's default run is `python -m app generate PROMPT --baseline`. gamma is the cap of the
    depth policy; "auto" (fast_path, draft_int8) means on where a pass measures faster on this
    device (app.runner.choose_paths); rounds: speculative runs interleaved with as many plain
    ones when the baseline is asked for (app.engine.run). The sampling fields are
    DecodeSettings' own defaults, so the two cannot drift apart."""
    gamma: int = DecodeSettings.gamma
    depth_policy: str = "roofline"  # the roofline policy with gamma 0 allowed (app.runner.depth_policy)
    temperature: float = DecodeSettings.temperature
    top_p: float = DecodeSettings.top_p
    top_k: int = DecodeSettings.top_k
    seed: int = DecodeSettings.seed
    max_new_tokens: int = DecodeSettings.max_new_tokens
    drafter: str = DecodeSettings.drafter
    device: str = "auto"
    fast_path: str = "auto"
    draft_int8: str = "auto"
    prompt_mode: str = "auto"
    baseline: bool = True
    rounds: int = 2


DEFAULTS = Defaults()
