"""What every lesson shares: progress reporting, input checks, prompts, timed decoding runs and
the acceptance estimate.

Acceptance: Leviathan et al. (2023, arXiv 2211.17192) model each drafted position as accepted
independently with probability alpha. A step examines positions until the first rejection, so
the maximum-likelihood estimate of alpha from a run is

    alpha_hat = sum(accepted) / sum(examined positions)      (examined = len(event.checks))

and not accepted / drafted, which counts the positions after a rejection that were never tested
and so underestimates alpha.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

from app.lessons.verdict import Spread, check_load, check_spread
from app.policies import expected_tokens  # noqa: F401 (the lessons' formulas, with leviathan_speedup)
from app.settings import DecodeSettings, InputError  # InputError: one error type for all user input

Progress = Callable[[float, str], None]

PROMPTS = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune",
    "ROMEO:\nBut soft, what light through yonder window breaks?",
    "Emma Woodhouse, handsome, clever, and rich,",
)


class LessonError(InputError):
    """Bad input to a lesson (an InputError: one line, safe to show as-is)."""


def report(progress: Progress | None) -> Progress:
    """progress itself, or a no-op when None."""
    return progress or (lambda fraction, message: None)


def part(progress: Progress | None, start: float, end: float) -> Progress:
    """A progress callable for one stage that maps its 0..1 onto start..end of the whole."""
    outer = report(progress)
    return lambda fraction, message: outer(start + (end - start) * min(max(fraction, 0.0), 1.0), message)


def require(condition: bool, message: str) -> None:
    if not condition:
        raise LessonError(message)


def check_int(name: str, value, low: int, high: int) -> int:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and int(value) == value
    require(ok, f"{name} must be a whole number, got {value!r}")
    require(low <= int(value) <= high, f"{name} must be between {low} and {high}, got {int(value)}")
    return int(value)


def check_float(name: str, value, low: float, high: float) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    require(ok, f"{name} must be a finite number, got {value!r}")
    require(low <= value <= high, f"{name} must be in [{low}, {high}], got {value}")
    return float(value)


def check_ints(name: str, values: Iterable, low: int, high: int) -> tuple[int, ...]:
    """A non-empty, sorted, duplicate-free tuple of whole numbers in [low, high]."""
    values = tuple(values)
    require(len(values) > 0, f"{name}: give at least one value")
    return tuple(sorted({check_int(name, v, low, high) for v in values}))


def need_draft(pair) -> None:
    require(pair.draft is not None, "this lesson needs a draft model; the loaded pair has none "
                                    "(n-gram drafting): load a pair with a draft model")


def encode(pair, text: str, room: int = 0, chat: bool | None = None) -> list[int]:
    """Token ids of a prompt, as the Live tab tokenises it (app.validation.prompt_ids): through
    the target's chat template when it has one (chat=None: the "auto" prompt mode,
    validation.chat_for), so an instruction-tuned target answers a user turn instead of
    continuing raw text. It must be non-empty and leave `room` positions in the context."""
    from app import validation

    require(isinstance(text, str) and bool(text.strip()), "the prompt is empty: type some text")
    chat = validation.chat_for("auto", pair.tokenizer) if chat is None else chat
    try:  # no context limit there: the lesson's own room is checked below
        ids = validation.prompt_ids(pair.tokenizer, text, NO_LIMIT, 0, chat)
    except InputError as exc:
        raise LessonError(str(exc)) from None
    require(len(ids) > 0, "the prompt encodes to no tokens: type some text")
    require(len(ids) + room <= pair.context,
            f"the prompt is {len(ids)} tokens; with {room} new ones it exceeds the model's "
            f"context of {pair.context}")
    return list(ids)


NO_LIMIT = 1 << 40  # a context no prompt reaches (encode checks its own)
# Lesson prompts for an instruction-tuned target (a chat template): questions it answers, sent
# as a user turn by encode; PROMPTS are openings of the texts the embedded pair was trained on.
CHAT_PROMPTS = (
    "Why is the sky blue? Answer in a short paragraph.",
    "Explain to a ten-year-old what a prime number is.",
    "Give three tips for writing a clear email.",
)


def prompts_for(pair, prompts=None) -> tuple[str, ...]:
    """`prompts` when given, else the pair's own: CHAT_PROMPTS for a target with a chat
    template, PROMPTS (Austen and Shakespeare openings) for a continuation model."""
    if prompts is not None:
        return tuple(prompts)
    from app.validation import has_chat_template
    return CHAT_PROMPTS if has_chat_template(pair.tokenizer) else PROMPTS


def dtype_bytes(pair) -> int:
    """Bytes per weight/activation element of the pair's dtype (4 fp32, 2 bf16/fp16)."""
    return {"torch.float32": 4, "torch.float16": 2, "torch.bfloat16": 2}.get(str(pair.dtype), 4)


@dataclass
class Run:
    """One decoding run: its events, wall seconds and emitted ids."""
    steps: list
    seconds: float

    @property
    def ids(self) -> list[int]:
        return [t for s in self.steps for t in s.emitted_ids]

    @property
    def tokens_per_s(self) -> float:
        return len(self.ids) / self.seconds if self.seconds > 0 else 0.0

    @property
    def target_passes(self) -> int:
        return sum(f.model == "target" and f.phase != "prefill" for s in self.steps for f in s.forwards)

    @property
    def drafted(self) -> int:
        return sum(len(s.draft_ids) for s in self.steps)

    @property
    def accepted(self) -> int:
        return sum(s.n_accepted for s in self.steps)

    @property
    def examined(self) -> int:
        return sum(len(s.checks) for s in self.steps)


def decode(pair, prompt_ids: list[int], settings, *, policy=None, drafter=None,
           plain: bool = False) -> Run:
    """Run the engine to completion (speculative, or target-only with plain=True), timed, through
    the one orchestration path (app.runner.timed_decode: fast path readied off the clock, on
    by default on CUDA)."""
    from app.runner import timed_decode

    steps, seconds = timed_decode(pair, prompt_ids, settings, policy=policy, drafter=drafter, plain=plain)
    return Run(steps, seconds)


@dataclass
class Repeated:
    """One arm of an interleaved comparison: its fastest run (steps, counts, per-pass timings;
    greedy outputs are equal across repeats) and the wall seconds of every repeat."""
    run: Run
    seconds: Spread


MIN_REPEATS = 3  # fewer repeats cannot show a spread worth judging


def repeat_decodes(arms: dict[str, Callable[[], Run]], repeats: int,
                   progress: Progress | None = None) -> dict[str, Repeated]:
    """Call each arm in turn (A, B, A, B, ...) for `repeats` rounds, so a change in the machine's
    load hits every arm alike (app.lessons.verdict.interleave). arms: name -> a callable that
    decodes once, e.g. lambda: decode(pair, ids, settings, plain=True)."""
    runs: dict[str, list[Run]] = {name: [] for name in arms}
    for r in range(repeats):
        report(progress)(r / repeats, f"repeat {r + 1}/{repeats}: {', '.join(arms)}")
        for name, arm in arms.items():
            runs[name].append(arm())
    report(progress)(1.0, f"{repeats} interleaved repeats done")
    return {name: Repeated(min(rs, key=lambda r: r.seconds), Spread.of([r.seconds for r in rs]))
            for name, rs in runs.items()}


def plain_and_speculative(pair, ids: list[int], settings, repeats: int = MIN_REPEATS, *,
                          policy_factory=None, progress: Progress | None = None) -> dict[str, Repeated]:
    """{"plain": ..., "speculative": ...}: the target alone and speculative decoding, interleaved
    over `repeats` rounds. policy_factory() gives a fresh depth policy per run (policies keep state)."""
    policy = policy_factory or (lambda: None)
    return repeat_decodes({"plain": lambda: decode(pair, ids, settings, plain=True),
                           "speculative": lambda: decode(pair, ids, settings, policy=policy())},
                          repeats, progress)


def recorded_gpu_run() -> str:
    """Where to see the claim on a GPU: the first CUDA run in the recorded gallery
    (app.recorded, demo_models/recorded), or a line saying none is recorded yet."""
    from app.recorded import gallery

    entry = next((e for e in gallery() if e.get("device") == "cuda"), None)
    if entry is None:
        return "no GPU run is recorded yet in the gallery (demo_models/recorded)."
    speedup = entry.get("speedup")
    return (f"a GPU run is recorded: demo_models/recorded/{entry['file']} ({entry.get('device_name')}, "
            f"{entry.get('pair')}" + (f", {speedup:.2f}× over plain decoding)" if speedup else ")")
            + "; replay it with `python -m app trace FILE`.")


def busy_warnings(spreads: dict[str, Spread]) -> tuple[str | None, ...]:
    """The busy-machine checks every lesson runs: the load average, and each named timing's spread
    (advice that fits the torch threads this process uses)."""
    import torch
    threads = torch.get_num_threads()
    return (check_load(threads=threads), *(check_spread(name, s, threads=threads) for name, s in spreads.items()))


def alpha_hat(runs: Iterable[Run]) -> float:
    """Pooled acceptance estimate sum(accepted) / sum(examined) (module docstring)."""
    runs = list(runs)
    examined = sum(r.examined for r in runs)
    return sum(r.accepted for r in runs) / examined if examined else 0.0


def leviathan_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan et al. Thm 3.8: walltime speedup (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)),
    c = t_draft / t_target; assumes a verify pass of gamma + 1 tokens costs one target pass."""
    return expected_tokens(alpha, gamma) / (gamma * c + 1)


def _short(model_id: str | None) -> str:
    """A local directory as its last two parts (no server paths on screen); hub ids unchanged."""
    from pathlib import Path

    path = Path(str(model_id))
    return "/".join(path.parts[-2:]) if path.is_absolute() else str(model_id)


def pair_label(pair) -> str:
    shape = " (shape-only: random weights)" if pair.info.get("shape_only") else ""
    return (f"{_short(pair.target_id)} / {_short(pair.draft_id)}{shape} on {pair.device}, "
            f"{str(pair.dtype).replace('torch.', '')}")


def measure_alpha(pair, *, prompts=None, gamma: int = 4, temperature: float = 0.0,
                  max_new_tokens: int = 32, seed: int = 0, progress: Progress | None = None) -> float:
    """alpha_hat of the pair from short speculative runs on `prompts` (default: the pair's own
    first two, prompts_for) (module docstring)."""
    need_draft(pair)
    prompts = prompts_for(pair)[:2] if prompts is None else prompts
    settings = DecodeSettings(gamma=gamma, temperature=temperature, seed=seed,
                              max_new_tokens=max_new_tokens)
    runs = []
    for i, text in enumerate(prompts):
        report(progress)(i / len(prompts), f"measuring acceptance: prompt {i + 1}/{len(prompts)}")
        runs.append(decode(pair, encode(pair, text, max_new_tokens + gamma + 1), settings))
    report(progress)(1.0, f"alpha = {alpha_hat(runs):.3f}")
    return alpha_hat(runs)
