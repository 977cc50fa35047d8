"""Where a speculative step's time goes, beside a plain step's, and the tokens per pass a
target speed-up needs at those costs.

    MKL_CBWR=AVX512 python benchmarks/step_budget.py --fast --draft-int8   # the flagship, greedy
    python benchmarks/step_budget.py --pair embedded --gammas 1 2 4

Per configuration (plain decoding, then each gamma), from the engine's own timed passes
(app.timing: the device synchronised before and after each forward), summed over every step of
every prompt and round, prefills left out:
  target    the target's pass, ms per step
  draft     the draft's passes, ms per step
  other     the rest of the step's wall time: sampling, verification, the trace
  tok/pass  tokens emitted per target pass
  speed-up  its tokens/s over plain decoding's (all tokens over all seconds)
  needed    the tokens per pass this step would need to run --target times as fast as plain
            decoding: target x step_ms / plain_step_ms
Rounds run the configurations back to back prompt by prompt, so background load hits them alike.
research/RESULTS.md ("Why gamma = 1 wins on this CPU") has one run's numbers.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from app.engine import DecodeSettings  # noqa: E402
from app.lessons.common import decode as timed_decode  # noqa: E402


@dataclass
class Budget:
    """One configuration's totals over its runs (seconds, prefills excluded)."""
    steps: int = 0
    tokens: int = 0
    target: float = 0.0
    draft: float = 0.0
    other: float = 0.0

    def add(self, run) -> None:
        """One decode (app.lessons.common.Run: its events and wall seconds)."""
        events, wall = run.steps, run.seconds
        forwards = [f for e in events for f in e.forwards]
        prefill = sum(f.seconds for f in forwards if f.phase == "prefill")
        target = sum(f.seconds for f in forwards if f.model == "target" and f.phase != "prefill")
        draft = sum(f.seconds for f in forwards if f.model == "draft" and f.phase != "prefill")
        self.steps += len(events)
        self.tokens += sum(len(e.emitted_ids) for e in events)
        self.target, self.draft = self.target + target, self.draft + draft
        self.other += wall - prefill - target - draft

    @property
    def seconds(self) -> float:
        return self.target + self.draft + self.other

    @property
    def step_ms(self) -> float:
        return 1e3 * self.seconds / self.steps

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def load(pair_name: str, n_prompts: int, new_tokens: int):
    """(pair, prompt ids): the flagship on held-out chat prompts, or the embedded pair on the
    lessons' prompts."""
    if pair_name == "smollm2":
        from research.evaluate_smollm2 import chat_prompts
        from research.flagship import load as load_flagship
        pair = load_flagship("cpu")
        return pair, chat_prompts(pair, n_prompts)
    from app.lessons.common import PROMPTS, encode
    from app.models import load_pair
    from app.assets import TINY_DRAFT_DIR, TINY_TARGET_DIR
    pair = load_pair(str(TINY_TARGET_DIR), str(TINY_DRAFT_DIR), device="cpu")
    return pair, [encode(pair, p, new_tokens + 17) for p in PROMPTS[:n_prompts]]


def decode(pair, ids, g: int, args, seed: int, new_tokens: int):
    """One timed decode (app.lessons.common.decode -> Run): plain for g = 0, else speculative at gamma g."""
    s = DecodeSettings(gamma=max(g, 1), temperature=args.temperature, seed=seed, max_new_tokens=new_tokens,
                       fast=args.fast, draft_int8=args.draft_int8)
    return timed_decode(pair, ids, s, plain=g == 0)


def measure(pair, prompts, gammas, args) -> dict[int, Budget]:
    """{gamma (0: plain): Budget}, rounds x prompts x configurations, back to back, after one
    untimed short decode of each configuration (fast-path runners built, first-call costs paid)."""
    budgets = {g: Budget() for g in (0, *gammas)}
    for g in budgets:
        decode(pair, prompts[0], g, args, 0, 8)
    for r in range(args.rounds):
        for i, ids in enumerate(prompts):
            for g, budget in budgets.items():
                budget.add(decode(pair, ids, g, args, 1000 * r + i, args.max_new_tokens))
    return budgets


def table(budgets: dict[int, Budget], target: float) -> list[dict]:
    """A row per configuration: ms per step by part, tokens per pass, speed-up, needed."""
    plain = budgets[0]
    rows = []
    for g, b in budgets.items():
        rows.append({"config": f"gamma={g}" if g else "plain", "target_ms": 1e3 * b.target / b.steps,
                     "draft_ms": 1e3 * b.draft / b.steps, "other_ms": 1e3 * b.other / b.steps,
                     "step_ms": b.step_ms, "tokens_per_pass": b.tokens / b.steps,
                     "speedup": b.tokens_per_s / plain.tokens_per_s,
                     "needed_tokens_per_pass": target * b.step_ms / plain.step_ms})
    return rows


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", choices=["smollm2", "embedded"], default="smollm2")
    ap.add_argument("--gammas", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--fast", action="store_true", help="app.fastpath (lean decoder on a CPU)")
    ap.add_argument("--draft-int8", action="store_true", help="with --fast: int8 draft weights")
    ap.add_argument("--target", type=float, default=1.5, help="the speed-up 'needed' is computed for")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    pair, prompts = load(args.pair, args.prompts, args.max_new_tokens)
    rows = table(measure(pair, prompts, args.gammas, args), args.target)
    print(f"{args.pair}, {torch.get_num_threads()} threads, fast={args.fast}, int8 draft={args.draft_int8}, "
          f"T={args.temperature}; {len(prompts)} prompts x {args.rounds} rounds, ms per step:")
    print(f"{'config':>8} {'target':>7} {'draft':>6} {'other':>6} {'step':>7} {'tok/pass':>8} {'speed-up':>8} "
          f"{'needed for ' + format(args.target, 'g') + 'x':>15}")
    for r in rows:
        print(f"{r['config']:>8} {r['target_ms']:7.2f} {r['draft_ms']:6.2f} {r['other_ms']:6.2f} {r['step_ms']:7.2f} "
              f"{r['tokens_per_pass']:8.2f} {r['speedup']:7.3f}x {r['needed_tokens_per_pass']:15.2f}")
    return rows


if __name__ == "__main__":
    main()
