"""One decode, one path: request -> load -> prepare -> policy -> run.

The Live tab (app.ui.handlers) and the CLI (app.cli generate) decode through here:

  * request: `parse_request` checks every input (positional in INPUTS order, or by name) before
    anything is loaded and returns a DecodeRequest; the CLI builds its DecodeRequest from its
    own checked arguments;
  * load: `prepare` calls the caller's loader (the app: app.pairs.get_pair; the CLI: its
    --pair / --target choice);
  * prepare: the prompt tokenised (chat template or not, app.validation), the device's measured
    ceilings (app.annotate) and, on a CPU, whether the knee is visible (app.cpu_regime);
  * paths: the fast path and the int8 draft, where the request leaves them to measurement
    ("auto", the default: app.settings.DEFAULTS), on when a pass measures faster on them
    (choose_paths: once per model, device and thread count, cached);
  * policy: the depth policy (app.policies; the roofline one times the pair's passes first);
  * run: `start` hands the prepared pair to app.engine.run, which yields the growing Trace.

The lessons (app.lessons.common.decode) run a pair they already hold through `timed_decode`:
the same engine generators, the fast path readied before the clock as engine.run does, and
no Trace, ceilings or policy by name (a lesson passes its policy object).
Nothing here imports gradio: the web page's concerns (events, streaming, views, exports) stay
in app.ui.
"""
from __future__ import annotations

import statistics
import time
import weakref
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from app import annotate, cpu_regime, engine, fastpath, validation
from app.engine import prepare as prepare_fast_path, run
from app.policies import make_policy, measure_costs
from app.presets import PRESETS
from app.settings import DEFAULTS, DecodeSettings, InputError
from app.trace import Trace

# The Live tab's inputs, in the order its components are wired and parse_request reads them;
# also the /decode API's parameter names (app.ui.live builds decode's signature from them).
INPUTS = ("prompt", "preset", "drafter", "gamma", "depth_policy", "temperature", "top_p", "top_k",
          "seed", "max_new_tokens", "device", "fast_path", "baseline", "prompt_mode", "draft_int8")
OPTIONAL = {"prompt_mode": DEFAULTS.prompt_mode, "draft_int8": DEFAULTS.draft_int8}  # older API clients send 13 inputs

CONFIDENCE_THRESHOLD = 0.5
# name -> what the Live tab says about it; built by depth_policy() below
DEPTH_POLICIES = {
    "fixed": "always γ drafts per step",
    "heuristic": "+2 after a fully accepted step, −1 otherwise, within [1, γ]",
    "confidence": f"draft up to γ, stop once the draft's top probability < {CONFIDENCE_THRESHOLD}",
    "roofline": "each step, the γ from 0 (plain decoding) to the slider value that maximises the "
                "expected tokens per second, from this pair's pass times (timed first, then the run's own) "
                "and the running α",
}
PROMPT_MODES = {"auto": "chat when the target has a chat template, else continuation",
                "chat": "the prompt is one user message; the model writes the assistant's reply",
                "continue": "the model continues the prompt's text"}

Loader = Callable[..., object]  # (preset, device=, dtype=, ngram=, progress=) -> ModelPair
Progress = Callable[..., None]  # (fraction, desc=message), as gr.Progress


@dataclass
class DecodeRequest:
    """Validated inputs of one decode."""
    prompt: str
    preset: str | None  # None: the CLI's --target/--draft pair
    device: str
    settings: DecodeSettings  # the fast path too: settings.fast, its one home
    baseline: bool
    policy: str = DEFAULTS.depth_policy
    prompt_mode: str = DEFAULTS.prompt_mode  # PROMPT_MODES
    fast_auto: bool = False   # settings.fast and .draft_int8 left to measurement: choose_paths
    int8_auto: bool = False


@dataclass
class Prepared:
    """What a decode needs once the pair is loaded: the pair, the prompt's token ids, the
    device's ceilings, the CPU regime (None off a CPU, or when not probed) and the policy."""
    pair: object
    ids: list[int]
    ceilings: object
    regime: object
    policy: object
    notes: dict | None = None  # how the run's paths and policy were chosen (Trace.settings)


# --------------------------------------------------------------------------- request

def parse_request(*values, devices: list[str], **named) -> DecodeRequest:
    """Check every input before anything is loaded; raises InputError with a one-line message.
    `values` in INPUTS order (the last two may be left out), or `named` by INPUTS name;
    `devices`: the device names this machine offers (app.ui.turns.device_choices()).
    The values arrive as the client sent them (live.py wires decode with preprocess=False)."""
    if len(values) > len(INPUTS) or set(named) - set(INPUTS):
        raise TypeError(f"parse_request takes the inputs {', '.join(INPUTS)}")
    v = OPTIONAL | dict(zip(INPUTS, values)) | named
    missing = [name for name in INPUTS if name not in v]
    if missing:
        raise TypeError(f"parse_request is missing {', '.join(missing)}")
    prompt = v["prompt"]
    if prompt is not None and not isinstance(prompt, str):
        raise InputError(f"the prompt must be text, got {prompt!r}")
    baseline = _flag("baseline", v["baseline"])
    fast_path, draft_int8 = (path_choice(name, v[name]) for name in ("fast_path", "draft_int8"))
    validation.preset(v["preset"])  # presets only: the web app never loads a path or a free-form id
    validation.device(v["device"], devices)
    policy = v["depth_policy"]
    if not (isinstance(policy, str) and policy in DEPTH_POLICIES):
        raise InputError(f"depth policy must be one of {', '.join(DEPTH_POLICIES)}, got {policy!r}")
    validation.prompt_text(prompt)
    settings = validation.settings(gamma=v["gamma"], temperature=v["temperature"], top_k=v["top_k"],
                                   top_p=v["top_p"], seed=v["seed"], max_new_tokens=v["max_new_tokens"],
                                   drafter=v["drafter"], fast=draft_int8 is True if fast_path is None else fast_path,
                                   draft_int8=bool(draft_int8))
    mode = v["prompt_mode"]
    if not (isinstance(mode, str) and mode in PROMPT_MODES):
        raise InputError(f"prompt mode must be one of {', '.join(PROMPT_MODES)}, got {mode!r}")
    return DecodeRequest(prompt, v["preset"], v["device"], settings, bool(baseline), policy, mode,
                         fast_auto=fast_path is None and draft_int8 is not True, int8_auto=draft_int8 is None)


def _flag(name: str, value) -> bool:
    """A checkbox's value: true or false (bool("no") would be True)."""
    if isinstance(value, bool):
        return value
    raise InputError(f"{name} must be true or false, got {value!r}")


PATH_CHOICES = {"auto": None, "on": True, "off": False, True: True, False: False}


def path_choice(name: str, value) -> bool | None:
    """fast_path / draft_int8: "auto" (None: choose_paths measures), "on" / true, "off" / false."""
    if isinstance(value, (bool, str)) and value in PATH_CHOICES:
        return PATH_CHOICES[value]
    raise InputError(f"{name} must be auto, on or off (or true / false), got {value!r}")


# --------------------------------------------------------------------------- load, prepare, policy

def prepare(req: DecodeRequest, loader: Loader, progress: Progress, *, regime: bool = True) -> Prepared:
    """Load the pair, tokenise the prompt, measure the ceilings and, on a CPU (regime=True),
    whether the knee is visible (app.cpu_regime, ~1 s once per model); then the depth policy.
    `progress(fraction, desc=message)` hears each stage."""
    gguf = req.preset in PRESETS and PRESETS[req.preset].kind == "gguf"
    progress(0.05, desc=f"loading model pair {req.preset}"
             + (" (first time only: unpacking the 4-bit weights, ~40 s)" if gguf else ""))
    pair = loader(req.preset, device=req.device, dtype="auto", ngram=req.settings.drafter == "ngram",
                  progress=lambda message: progress(0.1, desc=message))  # the loader's own stages
    # an instruction-tuned target answers a user turn; the others continue the text
    chat = validation.chat_for(req.prompt_mode, pair.tokenizer)
    ids = validation.prompt_ids(pair.tokenizer, req.prompt, pair.context, req.settings.max_new_tokens, chat)
    if not annotate.known(pair.device, pair.dtype):
        progress(0.2, desc="measuring this device's memory bandwidth and matmul rate (once, ~5 s)")
    ceilings = annotate.ceilings(pair.device, pair.dtype,
                                 progress=lambda f, msg: progress(0.2 + 0.8 * f, desc=msg))
    notes = {"depth_policy": req.policy}
    if req.fast_auto or req.int8_auto:
        progress(0.9, desc="timing a pass with and without the fast path (a few seconds, once per model)")
        notes |= choose_paths(pair, req)
    found = None
    if regime and pair.device == "cpu":
        progress(0.95, desc="timing passes of 1 and 8 tokens: is the knee visible on this CPU?"
                 + (" (a first Fast-path run also times which product form suits each pass size:"
                    " a few seconds, once per model)" if req.settings.fast else ""))
        found = cpu_regime.probe(pair.target, pair.device, ceilings.device_name, fast=req.settings.fast)
    s = req.settings
    policy = depth_policy(req.policy, pair, s.gamma, len(ids), s.fast, s.draft_int8)
    return Prepared(pair, ids, ceilings, found, policy, notes)


def depth_policy(name: str, pair, gamma: int, kv_len: int, fast: bool = False, int8: bool = False):
    """The policy object; the request's γ is the start (fixed, heuristic) or the cap
    (confidence, roofline). The roofline policy times the pair's passes first (~1 s), on the
    path the run takes (fast: app.fastpath; int8: the draft's int8 weights), and may choose
    γ = 0, plain decoding, when no γ ≥ 1 is predicted to beat it."""
    costs = pass_costs(pair, gamma, kv_len, fast, int8) if name == "roofline" else None
    return make_policy(name, gamma, gamma, CONFIDENCE_THRESHOLD, costs, gamma_min=0)


_costs: "weakref.WeakKeyDictionary[object, dict[tuple, tuple]]" = weakref.WeakKeyDictionary()


def pass_costs(pair, gamma: int, kv_len: int, fast: bool, int8: bool) -> tuple[float, list[float]]:
    """app.policies.measure_costs for this pair, measured once per draft, γ cap, path, torch
    thread count and prompt length rounded down to a multiple of PROBE_KV (the length it is
    timed at; shorter prompts as they are), then reused: a run of the Live tab does not wait
    ~1 s for the same numbers again."""
    import torch
    kv = kv_len if kv_len < PROBE_KV else kv_len // PROBE_KV * PROBE_KV
    known = _costs.setdefault(pair.target, {})
    key = (pair.draft_id, gamma, fast, int8, torch.get_num_threads(), kv)
    if key not in known:
        known[key] = measure_costs(pair, gamma, kv, fast=fast, int8=int8)
    return known[key]


PROBE_KV = 64  # cached positions of the passes choose_paths times (as app.cpu_regime's probe)
PATH_ROUNDS = 3  # rounds of pass_times: one stalled round cannot decide a path choice alone
_pass_times: "weakref.WeakKeyDictionary[object, dict[tuple, float]]" = weakref.WeakKeyDictionary()


def pass_times(model, device: str, paths: list[tuple[bool, bool]]) -> list[float]:
    """Seconds of one pass of one token over PROBE_KV cached ones, for each path (fast, int8):
    the median over PATH_ROUNDS rounds of app.knee.time_forward's median of 5, the paths taking
    turns within every round, so a stall of the machine while one path is timed (an observed
    cause of a wrong fast-path choice) falls in one round of one path, not on the decision.
    Once per model, device, path and torch thread count in this process."""
    import torch
    from app.knee import time_forward
    known = _pass_times.setdefault(model, {})
    keys = [(device, fast, int8, torch.get_num_threads()) for fast, int8 in paths]
    todo = [k for k in dict.fromkeys(keys) if k not in known]
    rounds: dict[tuple, list[float]] = {k: [] for k in todo}
    for _ in range(PATH_ROUNDS if todo else 0):
        for k in todo:
            rounds[k].append(time_forward(model, device=device, batch=1, q=1, kv_len=PROBE_KV, fast=k[1], int8=k[2]))
    known.update({k: statistics.median(t) for k, t in rounds.items()})
    return [known[k] for k in keys]


def fast_measured(pair) -> tuple[bool, str]:
    """(fast path on?, why in words): on when the target's one-token pass measures faster on it
    (pass_times, both paths interleaved); off, saying so, when the fast path fails on this model."""
    try:
        plain, quick = pass_times(pair.target, pair.device, [(False, False), (True, False)])
    except Exception as exc:  # noqa: BLE001 - a fast path this model cannot take stays off
        return False, f"off: the fast path failed on this model ({type(exc).__name__})"
    fast = quick < plain
    return fast, (f"{'on' if fast else 'off'}: a target pass of 1 token took {_ms(quick)} on the fast "
                  f"path, {_ms(plain)} without (medians of {PATH_ROUNDS} interleaved rounds)")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def fast_by_default(pair) -> bool:
    """The path the lessons time: the fast path where it replays CUDA graphs
    (app.fastpath.use_by_default), else as the Live tab's "auto" decides (fast_measured), so a
    lesson times what the Live tab's defaults run."""
    return fastpath.use_by_default(pair.device) or fast_measured(pair)[0]


def choose_paths(pair, req: DecodeRequest) -> dict:
    """Decide what the request left to measurement ("auto"): the fast path on when the target's
    pass measures faster on it (it then serves the draft and the plain runs too), the draft's
    int8 weights on when the fast path is on, app.lean runs the draft and its int8 pass measures
    faster. req.settings is replaced by the decided settings; returns the measurements, in words,
    for the trace (Trace.settings)."""
    from app.fastpath import uses_lean
    from app.feature_draft import is_feature_draft
    s, notes = req.settings, {}
    fast, int8 = s.fast, s.draft_int8
    if req.fast_auto:
        fast, notes["fast_path_choice"] = fast_measured(pair)
    lean_draft = (s.drafter == "model" and pair.draft is not None and not is_feature_draft(pair.draft)
                  and uses_lean(pair.draft))
    if req.int8_auto:
        int8 = False
        if fast and lean_draft:
            full, small = pass_times(pair.draft, pair.device, [(True, False), (True, True)])
            int8 = small < full
            notes["draft_int8_choice"] = (f"{'on' if int8 else 'off'}: a draft pass took {_ms(small)} with int8 "
                                          f"weights, {_ms(full)} without")
    req.settings = replace(s, fast=fast, draft_int8=int8)
    return notes


# --------------------------------------------------------------------------- run

def start(prepared: Prepared, req: DecodeRequest, cancel: Callable[[], bool] | None = None) -> Iterator[Trace]:
    """The decode (app.engine.run): the growing Trace after every step, complete at the end
    (with the baseline run when the request asks for it). cancel() ends it after a step."""
    return run(prepared.pair, prepared.ids, req.prompt, req.settings, baseline=req.baseline,
               cancel=cancel, policy=prepared.policy, rounds=DEFAULTS.rounds, notes=prepared.notes)


def timed_decode(pair, ids: list[int], settings: DecodeSettings, *, policy=None, drafter=None,
                 plain: bool = False) -> tuple[list, float]:
    """One decode to completion, timed: speculative (app.engine.speculative_generate, with
    `policy` and `drafter` when given) or target-only (plain=True). -> (step events, wall
    seconds). The fast path is on where it runs by default (fast_by_default); it is
    readied before the clock starts, as engine.run does, so no run is charged for set-up that
    the next one reuses. Every timed pass synchronises the device (app.timing)."""
    settings = replace(settings, fast=settings.fast or fast_by_default(pair))
    prepare_fast_path(pair, settings)
    start = time.perf_counter()
    if plain:
        steps = list(engine.autoregressive_generate(pair, ids, settings))
    else:
        steps = list(engine.speculative_generate(pair, ids, settings, drafter=drafter, policy=policy))
    return steps, time.perf_counter() - start
