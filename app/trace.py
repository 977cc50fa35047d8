"""Trace types: what one decoding run produced, as plain Python values.

Plain dataclasses of ints, floats, strings and lists only, so that gr.State can copy them,
`visualizations/` can draw them without importing torch, and a run saved as JSON replays
exactly. The engine yields `StepEvent`s; a finished run is a `Trace`.

Fates of a token (the colours of the live view):
    "accepted"   - a draft token the target accepted
    "rejected"   - a draft token the target rejected (shown struck through, never emitted)
    "correction" - the token the target sampled from norm(max(0, p - q)) after a rejection
    "bonus"      - the extra target token when all gamma drafts were accepted
    "target"     - a token of plain autoregressive decoding (the baseline)

Exported traces carry `schema_version` (SCHEMA_VERSION); a file without one is version 1, the
exports made before versioning, and still loads (app.recorded.load_trace checks an uploaded or
recorded file against the schema before building a Trace from it).
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields

FATES = ("accepted", "rejected", "correction", "bonus", "target")
# Trace.settings keys that say, in words, what a run measured before it chose (app.runner.choose_paths'
# fast path and int8 draft, app.engine's depth policy), with the label the CLI prints each under.
CHOICE_NOTES = {"policy_note": "depth policy", "fast_path_choice": "fast path", "draft_int8_choice": "int8 draft"}
# 1: the exports before versioning (no schema_version). 2: schema_version written, Trace.recorded
# added (who made the run, when, at which commit), and Trace.device may hold the device's name
# and measured ceilings (app.hardware.Ceilings.to_dict()). Version 1 files load as they are.
# 3: Piece.special (the token is one of the tokenizer's special ids, e.g. the chat's end of turn);
# upgrade() marks it in older files from the token's text (LEGACY_SPECIAL).
SCHEMA_VERSION = 3
# the special tokens' texts as the renderer of schemas 1 and 2 knew them
LEGACY_SPECIAL = re.compile(r"^(<\|[\w.-]+\|>|</s>|<eos>|<end_of_turn>)$")


@dataclass
class ForwardTiming:
    """One forward pass, timed with device synchronisation before and after.

    model: "draft" or "target"; phase: "prefill", "draft", "verify" or "decode";
    batch x tokens new positions were processed over kv_len cached ones.
    flops / bytes: the cost model's estimate (app.hardware), 0 when not computed.
    bound: "memory", "compute" or "overhead", classified from `seconds` (app.hardware).
    weights: "int8" when the pass ran int8 weights (app.lean.Int8Weight), else "" (the run's dtype).
    logits: False when the pass only filled the KV cache, without the output layer (a prefill
    whose logits nobody reads: app.kvcache.fill_cache); the cost model prices it so.
    """
    model: str
    phase: str
    batch: int
    tokens: int
    kv_len: int
    seconds: float
    flops: float = 0.0
    bytes: float = 0.0
    bound: str = ""
    weights: str = ""
    logits: bool = True


@dataclass
class Piece:
    """One token as the reader sees it: its text, its fate, and the probabilities behind it.

    p / q: p_target(x) and q_draft(x) at this position under the run's sampling transform
    (None where a model did not score the token: q of a correction/bonus/baseline token).
    special: one of the tokenizer's special ids (end of text, a chat turn marker): a real token
    of the run, shown as words rather than its raw text (app.engine.special_ids).
    """
    token_id: int
    text: str
    fate: str
    step: int
    p: float | None = None
    q: float | None = None
    special: bool = False


@dataclass
class Check:
    """The verdict on one drafted position (Leviathan et al. 2023, Alg. 1).

    r: the uniform draw (None under greedy decoding, where accept iff x == argmax p).
    ratio: p_target(x) / q_draft(x). accepted: r < min(1, ratio), or the greedy rule.
    top_ids / top_p / top_q: the target's most likely tokens at this position, with p and q.
    residual_ids / residual_p: top of norm(max(0, p - q)) when this position was rejected.
    """
    token_id: int
    q: float
    p: float
    ratio: float
    r: float | None
    accepted: bool
    top_ids: list[int] = field(default_factory=list)
    top_p: list[float] = field(default_factory=list)
    top_q: list[float] = field(default_factory=list)
    residual_ids: list[int] = field(default_factory=list)
    residual_p: list[float] = field(default_factory=list)


@dataclass
class StepEvent:
    """One target pass and what it decided.

    draft_ids / q_draft: the gamma drafted tokens and q_draft of each (empty for the baseline).
    checks: one Check per position examined, up to and including the first rejection.
    emitted_ids: accepted prefix + correction or bonus, truncated at EOS / max_new_tokens.
    forwards: every forward pass of this step, draft passes first, then the target's.
    """
    index: int
    gamma: int
    draft_ids: list[int]
    q_draft: list[float]
    checks: list[Check]
    n_accepted: int
    emitted_ids: list[int]
    pieces: list[Piece]
    forwards: list[ForwardTiming]

    @property
    def seconds(self) -> float:
        return sum(f.seconds for f in self.forwards)


@dataclass
class Summary:
    """Totals of a run. acceptance_rate = accepted drafts / drafted tokens;
    tokens_per_pass = emitted tokens / target passes (decode and verify, prefill excluded);
    tokens_per_s = emitted tokens / wall seconds of the decode loop (prefill included)."""
    new_tokens: int
    seconds: float
    tokens_per_s: float
    target_passes: int
    draft_passes: int
    drafted: int
    accepted: int
    acceptance_rate: float
    tokens_per_pass: float
    flops: float = 0.0


@dataclass
class Baseline:
    """The first plain (target-only) run, and the interleaved measurement of the speed-up
    (app.engine.measure_speedup): tokens/s of every speculative run (the streamed one first)
    and every plain run, made in the order speculative, plain, speculative, plain, ...; the
    1-minute load average before and after, and the cores it ran on (app.metrics judges them).
    Files without the lists (older exports) have one sample: the run and this baseline."""
    output_ids: list[int]
    output_text: str
    tokens_per_s: float
    seconds: float
    identical: bool | None = None  # greedy only: every run's output == the streamed run's
    steps: list[StepEvent] = field(default_factory=list)
    spec_tokens_per_s: list[float] = field(default_factory=list)
    plain_tokens_per_s: list[float] = field(default_factory=list)
    load_avg: list[float] = field(default_factory=list)
    cores: int = 0


@dataclass
class Trace:
    prompt: str
    settings: dict
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    output_text: str = ""
    steps: list[StepEvent] = field(default_factory=list)
    summary: Summary | None = None
    baseline: Baseline | None = None
    device: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    stopped: str = ""  # "eos", "max_new_tokens", "cancelled", "error: ..."
    # how the run was recorded (app.recorded.provenance): date, commit, command, pair, load
    recorded: dict = field(default_factory=dict)

    def forwards(self) -> list[ForwardTiming]:
        return [f for s in self.steps for f in s.forwards]

    def all_forwards(self) -> list[ForwardTiming]:
        """The speculative run's forwards, then the baseline's (if one was run)."""
        baseline = [f for s in self.baseline.steps for f in s.forwards] if self.baseline else []
        return self.forwards() + baseline

    def to_json(self, **kw) -> str:
        """The trace as JSON, schema_version first (from_dict ignores it: it is not a field)."""
        return json.dumps({"schema_version": SCHEMA_VERSION, **asdict(self)}, **kw)

    @classmethod
    def from_dict(cls, d: dict) -> "Trace":
        return _build(cls, d)

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        return cls.from_dict(json.loads(text))


_NESTED = {
    ("StepEvent", "checks"): Check, ("StepEvent", "pieces"): Piece,
    ("StepEvent", "forwards"): ForwardTiming, ("Trace", "steps"): StepEvent,
    ("Baseline", "steps"): StepEvent, ("Trace", "summary"): Summary, ("Trace", "baseline"): Baseline,
}


def _build(cls, d: dict):
    """Rebuild a dataclass (and its nested ones, per _NESTED) from a dict made by asdict."""
    kwargs = {}
    for f in fields(cls):
        if f.name not in d:
            continue
        value, sub = d[f.name], _NESTED.get((cls.__name__, f.name))
        if sub is not None and isinstance(value, list):
            value = [_build(sub, v) for v in value]
        elif sub is not None and isinstance(value, dict):
            value = _build(sub, value)
        kwargs[f.name] = value
    return cls(**kwargs)


def shown_text(pieces) -> str:
    """The text a reader sees of these pieces: emitted tokens only (no rejected drafts), special
    tokens left out as decode(skip_special_tokens=True) leaves them."""
    return "".join(p.text for p in pieces if p.fate != "rejected" and not p.special)


def upgrade(d: dict, version: int) -> dict:
    """A checked trace dict of schema `version` brought to SCHEMA_VERSION, in place: before 3,
    each piece's `special` from its text (LEGACY_SPECIAL), the rule those files' renderer used."""
    if version < 3:
        runs = [d] + ([d["baseline"]] if d.get("baseline") else [])
        for step in (s for run in runs for s in run.get("steps", [])):
            for piece in step["pieces"]:
                piece["special"] = bool(LEGACY_SPECIAL.match(piece["text"]))
    return d
