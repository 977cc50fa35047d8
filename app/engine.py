"""The decoding engine: speculative and plain autoregressive decoding, one event per target pass.

    for event in speculative_generate(pair, prompt_ids, settings): ...
    for trace in run(pair, prompt, settings, baseline=True): ...   # a growing Trace

KV-cache invariant after every step (tested): the target's cache holds exactly ids[:-1], the
accepted sequence without its newest token (which is the next pass's input); the draft's cache
holds ids[:-1], or ids[:-2] after a step where every draft was accepted (see ModelDrafter).
Plain decoding is the same loop with a drafter that proposes nothing (gamma = 0).
"""
from __future__ import annotations

import copy
import os
import time
from dataclasses import asdict, replace
from typing import Callable, Iterator

import torch

from app import fastpath
from app.drafters import ModelDrafter, NgramDrafter, NoDrafter, Proposal
from app.feature_draft import FeatureDrafter, is_feature_draft
from app.kvcache import crop_cache
from app.models import ModelPair
from app.policies import FixedDepth
from app.settings import DEFAULTS, MAX_GAMMA, DecodeSettings  # DecodeSettings: re-exported for callers
from app.speculative import logits_to_probs, sample, verify
from app.timing import timed_forward
from app.trace import Baseline, Check, Piece, StepEvent, Summary, Trace

TOP_SHOWN = 8  # tokens per position kept for the inspector


class NonFiniteLogits(ValueError):
    """A model produced NaN or inf logits (overflow in a low-precision dtype, broken weights):
    decoding stops instead of emitting garbage. The message names the model and the step."""

    def __init__(self, model: str, step: int):
        self.model, self.step = model, step
        super().__init__(f"the {model} model produced NaN or inf logits at step {step}: its "
                         "weights or this dtype overflowed (try float32, or another model pair)")


def _check_finite(logits: torch.Tensor, model: str, step: int) -> torch.Tensor:
    """logits unchanged, or NonFiniteLogits. One reduction over the logits actually used: each
    row's maximum is finite unless the row holds a NaN (max propagates it), a +inf, or only
    -inf. Some -inf entries are fine: they mask tokens (a partial-vocabulary draft,
    app/draft_vocab.py)."""
    if not bool(torch.isfinite(logits.amax(-1)).all()):
        raise NonFiniteLogits(model, step)
    return logits


def make_drafter(pair: ModelPair, kind: str, path: fastpath.Path = fastpath.EAGER):
    """path: how the draft's passes run (app.fastpath.Path: eager, or the fast path's caches;
    path.int8: its int8 weights, the fast path on a CPU)."""
    if kind == "model" and is_feature_draft(pair.draft):
        return FeatureDrafter(pair.draft, pair.device, path)
    if kind == "model" and pair.draft is not None:
        return ModelDrafter(pair.draft, pair.device, path)
    if kind == "model":  # a pair loaded without a draft model drafts by lookup
        kind = "ngram"
    if kind == "ngram":
        return NgramDrafter(pair.vocab)
    if kind == "none":
        return NoDrafter()
    raise ValueError(f"unknown drafter {kind!r}: use model or ngram")


def special_ids(tokenizer) -> frozenset[int]:
    """The tokenizer's special tokens (end of text, chat turn markers such as "<|im_end|>"):
    what decode(skip_special_tokens=True) leaves out."""
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    return frozenset(tokenizer.all_special_ids) | frozenset(eos)


class _Decoder:
    """Token texts for display: decode with a little left context so that byte-level BPE
    pieces of one character come out whole; `special` holds the ids that Piece.special marks."""

    def __init__(self, tokenizer):
        self.tokenizer, self.special = tokenizer, special_ids(tokenizer)

    def make(self, context: list[int], token: int, fate: str, step: int, p: float, q: float | None) -> Piece:
        return Piece(token, self.piece(context, token), fate, step, p, q, special=token in self.special)

    def piece(self, context: list[int], token: int) -> str:
        ctx = context[-4:]
        before = self.tokenizer.decode(ctx)
        return self.tokenizer.decode(ctx + [token])[len(before):]


def _checks(proposal: Proposal, p_display: torch.Tensor, verdict, greedy: bool) -> list[Check]:
    """One Check per examined position; p_display: [g + 1, vocab] on CPU."""
    checks = []
    for i, ok in enumerate(verdict.accepted):
        x = int(proposal.draft_ids[i])
        p_row, q_row = p_display[i], proposal.q_display[i]
        top = torch.topk(p_row, min(TOP_SHOWN, p_row.shape[0])).indices
        p_x, q_x = float(p_row[x]), float(q_row[x])
        check = Check(token_id=x, q=q_x, p=p_x, ratio=p_x / q_x if q_x > 0 else float("inf"),
                      r=verdict.r[i], accepted=ok, top_ids=top.tolist(),
                      top_p=p_row[top].tolist(), top_q=q_row[top].tolist())
        if not ok and not greedy:
            res_top = torch.topk(verdict.residual, min(TOP_SHOWN, p_row.shape[0]))
            check.residual_ids, check.residual_p = res_top.indices.tolist(), res_top.values.tolist()
        checks.append(check)
    return checks


def _emit(proposal, verdict, eos_id, remaining) -> tuple[list[int], bool]:
    """Accepted prefix + correction/bonus, cut at EOS (kept) and at the token budget."""
    emitted = proposal.draft_ids[:verdict.n_accepted].tolist() + [verdict.next_token]
    emitted = emitted[:remaining]
    if eos_id is not None and eos_id in emitted:
        return emitted[:emitted.index(eos_id) + 1], True
    return emitted, False


def _pieces(decoder, ids, proposal, verdict, emitted, p_display, step) -> list[Piece]:
    pieces, context = [], list(ids)
    g = len(proposal.draft_ids)
    for i, tok in enumerate(emitted):
        drafted = i < verdict.n_accepted
        fate = "accepted" if drafted else ("target" if g == 0 else
                                           "bonus" if verdict.is_bonus else "correction")
        q = float(proposal.q_display[i, tok]) if drafted else None
        pieces.append(decoder.make(context, tok, fate, step, float(p_display[i, tok]), q))
        if not drafted and not verdict.is_bonus:  # the rejected draft, struck through
            x = int(proposal.draft_ids[i])
            pieces.insert(-1, decoder.make(context, x, "rejected", step,
                                           float(p_display[i, x]), float(proposal.q_display[i, x])))
        context.append(tok)
    return pieces


def run_path(pair: ModelPair, prompt_ids: list[int], settings: DecodeSettings) -> fastpath.Path:
    """How this run's target passes execute, decided once: eager, or (settings.fast) the fast
    path with caches of prompt + new tokens + the widest verify pass, its models prepared
    (prepare: already done, and cheap to repeat, when run() called it). The draft's path is
    this one with settings.draft_int8."""
    if not settings.fast:
        return fastpath.EAGER
    prepare(pair, settings)
    return fastpath.Path(len(prompt_ids) + settings.max_new_tokens + MAX_GAMMA + 1)


def prepare(pair: ModelPair, settings: DecodeSettings) -> None:
    """With settings.fast, ready the fast path of the models this run uses (app.fastpath.prepare:
    compiled where CUDA graphs exist, lean runners built on a CPU). run() calls it before its
    clock starts, so a first run is not charged for what a baseline run after it reuses."""
    if not settings.fast:
        return
    fastpath.prepare(pair.target, pair.device)
    if pair.draft is not None and settings.drafter == "model" and not is_feature_draft(pair.draft):
        fastpath.prepare(pair.draft, pair.device, settings.draft_int8)  # (a feature draft builds its own)


def _target_pass(pair: ModelPair, x: torch.Tensor, cache, phase: str, drafter):
    """The target's timed forward of x [1, q]: (logits [1, q, vocab], timing). A drafter that
    reads the target's features (app.feature_draft) is handed them, [q, hidden]. A prefill
    computes no logits (none is read: the first step feeds the prompt's last token)."""
    observe = getattr(drafter, "observe", None)
    if observe is None:
        return timed_forward(pair.target, x, cache, pair.device, model_name="target", phase=phase,
                             logits=phase != "prefill")
    (logits, hidden), timing = timed_forward(pair.target, x, cache, pair.device, model_name="target",
                                             phase=phase, hidden=True)
    observe(hidden[0])
    return logits, timing


def _distributions(vocab: int, settings: DecodeSettings, generator: torch.Generator):
    """(transform, display, sampler) for one run. transform: logits [..., V] -> the sampling
    distribution [..., vocab] (temperature, top-k, top-p; logits cut to the columns both models
    share); display: what the UI shows (plain softmax when greedy); sampler: probs -> token ids."""
    transform = lambda logits: logits_to_probs(logits[..., :vocab], settings.temperature,
                                               settings.top_k, settings.top_p)
    display = (lambda logits: torch.softmax(logits[..., :vocab].float(), -1)) if settings.greedy else transform
    return transform, display, lambda probs: sample(probs, generator, settings.greedy)


def _step_event(index: int, proposal, verdict, emitted: list[int], p_display: torch.Tensor,
                greedy: bool, pieces, forwards) -> StepEvent:
    """The record of one step: the gamma drafts with q_draft of each, the check at each
    position against p_display [g + 1, vocab], what was emitted, and every timed pass."""
    drafted = proposal.draft_ids.tolist()
    return StepEvent(index=index, gamma=len(drafted), draft_ids=drafted,
                     q_draft=[float(proposal.q_draft[i, t]) for i, t in enumerate(drafted)],
                     checks=_checks(proposal, p_display, verdict, greedy), n_accepted=verdict.n_accepted,
                     emitted_ids=emitted, pieces=pieces, forwards=forwards)


def speculative_generate(pair: ModelPair, prompt_ids: list[int], settings: DecodeSettings,
                         drafter=None, cancel: Callable[[], bool] | None = None,
                         after_step: Callable | None = None, policy=None) -> Iterator[StepEvent]:
    """Yield one StepEvent per target pass until EOS, max_new_tokens or cancel().
    Raises NonFiniteLogits if the target's or the draft's logits hold NaN or inf.

    policy: a depth policy (app.policies); default FixedDepth(settings.gamma).

    after_step(ids, target_cache, drafter), if given, sees the state after each step (tests)."""
    greedy, vocab = settings.greedy, pair.vocab
    generator = torch.Generator().manual_seed(settings.seed)
    transform, display, sampler = _distributions(vocab, settings, generator)
    path = run_path(pair, prompt_ids, settings)
    drafter = drafter or make_drafter(pair, settings.drafter, replace(path, int8=settings.draft_int8))
    policy = policy or FixedDepth(settings.gamma)
    decoder, eos_id = _Decoder(pair.tokenizer), pair.tokenizer.eos_token_id
    ids, cache, produced = list(prompt_ids), path.new_cache(pair.target), 0
    pending_forwards = drafter.start(ids)
    if len(ids) > 1:
        prompt = torch.tensor([ids[:-1]], device=pair.device)  # [1, n - 1]
        pending_forwards.append(_target_pass(pair, prompt, cache, "prefill", drafter)[1])
    for index in range(settings.max_new_tokens):
        remaining = settings.max_new_tokens - produced
        if remaining <= 0 or (cancel is not None and cancel()):
            return
        gamma = min(policy.gamma(), remaining - 1)
        # the drafter hands each draft model's logits to transform before using them: check there
        checked = lambda logits, step=index: transform(_check_finite(logits[..., :vocab], "draft", step))
        proposal = drafter.propose(ids, gamma, checked, display, sampler, policy.keep_drafting)
        x = torch.tensor([ids[-1:] + proposal.draft_ids.tolist()], device=pair.device)  # [1, g + 1]
        phase = "verify" if len(proposal.draft_ids) else "decode"
        logits, timing = _target_pass(pair, x, cache, phase, drafter)
        _check_finite(logits[0, :, :vocab], "target", index)
        p_target = transform(logits[0]).cpu()  # [g + 1, vocab]
        p_display = display(logits[0]).cpu() if greedy else p_target
        verdict = verify(proposal.draft_ids, proposal.q_draft, p_target, generator, greedy)
        emitted, hit_eos = _emit(proposal, verdict, eos_id, remaining)
        event = _step_event(index, proposal, verdict, emitted, p_display, greedy,
                            _pieces(decoder, ids, proposal, verdict, emitted, p_display, index),
                            pending_forwards + proposal.forwards + [timing])
        pending_forwards = []
        ids += emitted
        produced += len(emitted)
        crop_cache(cache, len(ids) - 1)
        drafter.rollback(len(ids) - 1)
        policy.update(event)
        if after_step is not None:
            after_step(ids, cache, drafter)
        yield event
        if hit_eos:
            return


def autoregressive_generate(pair: ModelPair, prompt_ids: list[int], settings: DecodeSettings,
                            cancel=None) -> Iterator[StepEvent]:
    """The baseline: the target alone, one token per pass; same events, same timings."""
    return speculative_generate(pair, prompt_ids, settings, NoDrafter(), cancel)


def summarize(steps: list[StepEvent], seconds: float) -> Summary:
    """The totals of a run (counted by app.metrics.counts, as every other report counts them)."""
    from app.metrics import counts
    c = counts(steps)
    return Summary(new_tokens=c.new_tokens, seconds=seconds,
                   tokens_per_s=c.new_tokens / seconds if seconds > 0 else 0.0,
                   target_passes=c.target_passes, draft_passes=c.draft_passes,
                   drafted=c.drafted, accepted=c.accepted,
                   acceptance_rate=c.accepted / c.drafted if c.drafted else 0.0,
                   tokens_per_pass=c.new_tokens / c.target_passes if c.target_passes else 0.0,
                   flops=sum(f.flops for s in steps for f in s.forwards))


def run(pair: ModelPair, prompt_ids: list[int], prompt: str, settings: DecodeSettings,
        baseline: bool = False, cancel=None, policy=None, rounds: int = DEFAULTS.rounds,
        notes: dict | None = None) -> Iterator[Trace]:
    """Decode and yield the growing Trace after every step; the last yield is complete
    (summary set, and with baseline=True the interleaved plain runs: measure_speedup).
    policy: a depth policy (default FixedDepth(settings.gamma)); one that will draft nothing
    (RooflineDepth.drafts_nothing) runs without a drafter, as plain decoding does.
    notes: plain values recorded beside the settings (how the runner chose them)."""
    trace = Trace(prompt=prompt, settings=asdict(settings) | (notes or {}), prompt_ids=list(prompt_ids),
                  device={"device": pair.device, "dtype": str(pair.dtype).replace("torch.", "")},
                  models={"target": pair.target_id, "draft": pair.draft_id, **pair.info})
    prepare(pair, settings)  # one-time set-up outside the clock
    fresh, load_before = copy.deepcopy(policy), _load_avg()  # the policy's start, for the reruns
    start = time.perf_counter()
    for event in speculative_generate(pair, prompt_ids, settings, drafter=_drafter_for(policy),
                                      cancel=cancel, policy=policy):
        trace.steps.append(event)
        trace.output_ids += event.emitted_ids
        yield trace
    trace.summary = summarize(trace.steps, time.perf_counter() - start)
    trace.output_text = pair.tokenizer.decode(trace.output_ids, skip_special_tokens=True)
    trace.stopped = _stop_reason(trace, settings, pair, cancel)
    if hasattr(policy, "note"):
        trace.settings["policy_note"] = policy.note()
    if baseline and trace.stopped != "cancelled":
        yield trace
        trace.baseline = measure_speedup(pair, prompt_ids, settings, trace, rounds, cancel,
                                         lambda: copy.deepcopy(fresh), load_before)
    yield trace


def _drafter_for(policy):
    """NoDrafter for a policy that will draft nothing (no draft prefill, no draft cache: the run
    is plain decoding), else None (speculative_generate makes the settings' drafter)."""
    return NoDrafter() if getattr(policy, "drafts_nothing", False) else None


def _load_avg() -> float | None:
    """The 1-minute load average (None where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def timed_speculative(pair, prompt_ids, settings, policy, cancel=None) -> tuple[list[int], float]:
    """One unstreamed speculative run: (emitted ids, wall seconds of the decode loop), timed as
    run() times the streamed one."""
    start = time.perf_counter()
    steps = list(speculative_generate(pair, prompt_ids, settings, drafter=_drafter_for(policy),
                                      cancel=cancel, policy=policy))
    return [t for s in steps for t in s.emitted_ids], time.perf_counter() - start


def measure_speedup(pair, prompt_ids, settings, trace: Trace, rounds: int, cancel=None,
                    new_policy=lambda: None, load_before: float | None = None) -> Baseline:
    """Plain decoding interleaved with speculative decoding, so that a change of load hits both:
    the streamed run (trace) was the first speculative one; then plain, speculative, plain, ...
    until `rounds` of each (a cancel ends it early, dropping the unfinished run). The Baseline is
    the first plain run, with every run's tokens/s (app.metrics.speedup_spread pairs neighbours),
    whether every greedy output matched the streamed one, and the load before and after."""
    base = run_baseline(pair, prompt_ids, settings, trace.output_ids, cancel)
    spec_tps, plain_tps, same = [trace.summary.tokens_per_s], [base.tokens_per_s], [base.identical]
    for _ in range(max(rounds, 1) - 1):
        if cancel is not None and cancel():
            break
        ids, seconds = timed_speculative(pair, prompt_ids, settings, new_policy(), cancel)
        plain = run_baseline(pair, prompt_ids, settings, trace.output_ids, cancel)
        if cancel is not None and cancel():
            break
        spec_tps.append(len(ids) / seconds if seconds > 0 else 0.0)
        plain_tps.append(plain.tokens_per_s)
        same += [ids == trace.output_ids, plain.identical]
    base.identical = all(same) if settings.greedy else None
    base.spec_tokens_per_s, base.plain_tokens_per_s, base.cores = spec_tps, plain_tps, _cores()
    base.load_avg = [x for x in (load_before, _load_avg()) if x is not None]
    return base


def run_baseline(pair, prompt_ids, settings, spec_ids, cancel=None) -> Baseline:
    """One plain (target-only) run, timed; identical: its greedy output == spec_ids."""
    start = time.perf_counter()
    steps = list(autoregressive_generate(pair, prompt_ids, settings, cancel))
    seconds = time.perf_counter() - start
    ids = [t for s in steps for t in s.emitted_ids]
    return Baseline(output_ids=ids, output_text=pair.tokenizer.decode(ids, skip_special_tokens=True),
                    tokens_per_s=len(ids) / seconds if seconds > 0 else 0.0, seconds=seconds,
                    identical=(ids == spec_ids) if settings.greedy else None, steps=steps)


def _stop_reason(trace, settings, pair, cancel) -> str:
    eos = pair.tokenizer.eos_token_id
    if trace.output_ids and trace.output_ids[-1] == eos:
        return "eos"
    if len(trace.output_ids) >= settings.max_new_tokens:
        return "max_new_tokens"
    return "cancelled" if cancel is not None and cancel() else "stopped"
