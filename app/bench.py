"""Benchmark: this engine against transformers on the same pair, prompts and settings.

Runs, interleaved round by round so background load hits all alike:
    transformers generate()                       target only
    transformers generate(assistant_model=draft)  assisted generation at the same gamma
    this engine, autoregressive                   target only
    this engine, speculative
and prints tokens/s (median over rounds) and the ratios measured in this one run, plus whether
greedy outputs are identical. Timings are wall clock around whole generations, device
synchronised. A benchmark, not a test: these machines are shared and noisy.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace

import torch

from app import validation
from app.engine import autoregressive_generate, speculative_generate
from app.draft_vocab import DraftVocab
from app.models import load_pair
from app.hardware import synchronize

PROMPTS = ["It is a truth universally acknowledged, that",
           "ROMEO:\nBut soft, what light",
           "Elizabeth walked into the drawing-room and"]


def _hf(pair, ids, settings, assisted: bool) -> list[int]:
    x = torch.tensor([ids], device=pair.device)
    kw = dict(max_new_tokens=settings.max_new_tokens, do_sample=False, pad_token_id=pair.tokenizer.eos_token_id)
    if assisted:
        pair.draft.generation_config.num_assistant_tokens = settings.gamma
        pair.draft.generation_config.num_assistant_tokens_schedule = "constant"
        kw["assistant_model"] = pair.draft
    with torch.inference_mode():
        out = pair.target.generate(x, **kw)
    return out[0, len(ids):].tolist()


def _engine(pair, ids, settings, speculative: bool) -> list[int]:
    gen = speculative_generate if speculative else autoregressive_generate
    return [t for step in gen(pair, ids, settings) for t in step.emitted_ids]


METHODS = {
    "transformers generate (target only)": lambda p, i, s: _hf(p, i, s, False),
    "transformers assisted generation": lambda p, i, s: _hf(p, i, s, True),
    "this engine, autoregressive": lambda p, i, s: _engine(p, i, s, False),
    "this engine, speculative": lambda p, i, s: _engine(p, i, s, True),
}
FAST = {"this engine, speculative, fast path": lambda p, i, s: _engine(p, i, replace(s, fast=True), True)}


def measure(pair, settings, repeats: int, methods=METHODS) -> dict[str, dict]:
    """{method: {"tokens_per_s": median, "outputs": [ids per prompt]}}."""
    rates = {m: [] for m in methods}
    outputs = {m: [] for m in methods}
    prompts = [pair.tokenizer(p)["input_ids"] for p in PROMPTS]
    _engine(pair, prompts[0], settings, True)  # warm-up
    for _ in range(repeats):
        for name, fn in methods.items():
            tokens, seconds, outs = 0, 0.0, []
            for ids in prompts:
                synchronize(pair.device)
                start = time.perf_counter()
                out = fn(pair, ids, settings)
                synchronize(pair.device)
                seconds += time.perf_counter() - start
                tokens += len(out)
                outs.append(out)
            rates[name].append(tokens / seconds)
            outputs[name] = outs
    return {m: {"tokens_per_s": statistics.median(rates[m]), "outputs": outputs[m]} for m in methods}


def main(args) -> int:
    settings = validation.settings(gamma=args.gamma, temperature=0.0, max_new_tokens=args.max_new_tokens)
    pair = load_pair(args.target, args.draft, device=args.device, dtype=args.dtype)
    if DraftVocab.of(pair.draft) is not None:
        print(f"{pair.draft_id} drafts over part of the vocabulary (app/draft_vocab.py), which "
              "transformers' assisted generation cannot use; measure it with "
              "python -m research.evaluate --pair smollm2", file=sys.stderr)
        return 2
    print(f"device {pair.device}, dtype {str(pair.dtype).replace('torch.', '')}, threads {torch.get_num_threads()}, "
          f"target {pair.target_id}, draft {pair.draft_id}")
    print(f"greedy, gamma {settings.gamma}, {settings.max_new_tokens} new tokens x {len(PROMPTS)} prompts, "
          f"median of {args.repeats} interleaved rounds")
    res = measure(pair, settings, args.repeats, METHODS | (FAST if args.fast else {}))
    plain = res["transformers generate (target only)"]["tokens_per_s"]
    for name, r in res.items():
        print(f"  {name:40s} {r['tokens_per_s']:8.1f} tok/s   {r['tokens_per_s'] / plain:5.2f}x plain")
    ours = res["this engine, speculative"]["tokens_per_s"]
    assisted = res["transformers assisted generation"]["tokens_per_s"]
    print(f"this engine / transformers assisted: {ours / assisted:.2f}x (goal >= 1.2)")
    for name in FAST:
        if name in res:
            print(f"this engine, fast path / transformers assisted: {res[name]['tokens_per_s'] / assisted:.2f}x")
    ref = res["transformers generate (target only)"]["outputs"]
    same = {name: r["outputs"] == ref for name, r in res.items()}
    print("greedy outputs identical to transformers generate: "
          + ", ".join(f"{n.split(',')[-1].strip()}={'yes' if ok else 'NO'}" for n, ok in same.items()))
    return 0 if all(same.values()) else 1
