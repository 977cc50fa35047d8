"""The roofline policy on the run's own pass times against the same policy on the probe's alone.

    python benchmarks/policy_costs.py                                  # 8 prompts, 3 rounds
    python benchmarks/policy_costs.py --per-category 3 --rounds 5 --out rows.jsonl

The roofline policy (app.policies.RooflineDepth) chooses gamma from t_draft and t(q) timed
before the run, back to back (app.runner.pass_costs); inside a decode a pass can cost more (on a
CPU the target's pass evicts the draft's weights from the caches between draft passes). The
app's policy replaces the probe's times by the run's own once it has timed three passes of a
kind, and adds what each step costs besides its passes (in_run=True); in_run=False keeps the
probe's alone. This prints what that is worth.

One process, the flagship pair (gguf:smollm2-135m-instruct and the shipped draft), greedy, 64
new tokens, gamma cap 4, on the paths the app's defaults choose by measurement
(app.runner.choose_paths). Per prompt (the first K of each of the eight single-turn categories
of the realistic set, as benchmarks/defaults_speedup.py) and round: a plain run, then the two
policies, then another plain run, the two policies taking turns at going first; each run's
speed-up is its tokens/s over the mean of the plain runs beside it. A prompt's speed-up per
policy is the median over its rounds; the summary gives the median over prompts with its 95%
bootstrap interval (prompts resampled) and the median per-prompt ratio in-run / probe, and the
draft's pass as the probe timed it against the median one-token draft pass inside the runs.
Greedy output must equal plain decoding's in every run (checked; an exact engine changes only
the speed).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.defaults_speedup import DEFAULT_DRAFT, prompt_ids  # noqa: E402  (after the path)
from research.eval_report import median_ci  # noqa: E402
from research.eval_set import load  # noqa: E402

POLICIES = ("probe", "in-run")


def load_flagship(draft: str):
    """(pair, settings, the path choices in words) as the app's default run on this device:
    greedy, 64 tokens, gamma cap 4, fast path and int8 draft where they measure faster."""
    from app import runner
    from app.gguf import load_gguf_pair
    from app.settings import DEFAULTS, DecodeSettings
    pair = load_gguf_pair("auto", draft=draft)
    req = runner.DecodeRequest("", None, pair.device, DecodeSettings(gamma=DEFAULTS.gamma), False,
                               fast_auto=True, int8_auto=True)
    notes = runner.choose_paths(pair, req)
    return pair, req.settings, notes


def run_policies(pair, settings, ids: list[int], rounds: int, k: int) -> dict:
    """Speed-ups per policy over `rounds` rounds, the in-run draft pass times, identical outputs."""
    from app import runner
    from app.policies import RooflineDepth
    t_draft, t_target = runner.pass_costs(pair, settings.gamma, len(ids), settings.fast, settings.draft_int8)
    make = {"probe": lambda: RooflineDepth(t_draft, t_target, settings.gamma, gamma_min=0, in_run=False),
            "in-run": lambda: RooflineDepth(t_draft, t_target, settings.gamma, gamma_min=0)}
    plain_steps, plain_s = runner.timed_decode(pair, ids, settings, plain=True)
    plain_ids = [t for s in plain_steps for t in s.emitted_ids]
    plain_tps, speedups, drafts, same = [len(plain_ids) / plain_s], {p: [] for p in POLICIES}, [], True
    for r in range(rounds):
        order = POLICIES if (k + r) % 2 == 0 else POLICIES[::-1]
        tps = {}
        for name in order:
            steps, seconds = runner.timed_decode(pair, ids, settings, policy=make[name]())
            out = [t for s in steps for t in s.emitted_ids]
            same &= out == plain_ids
            tps[name] = len(out) / seconds
            drafts += [f.seconds for s in steps for f in s.forwards
                       if f.model == "draft" and f.phase == "draft" and f.tokens == 1]
        steps, seconds = runner.timed_decode(pair, ids, settings, plain=True)
        same &= [t for s in steps for t in s.emitted_ids] == plain_ids
        plain_tps.append(len(plain_ids) / seconds)
        beside = (plain_tps[-2] + plain_tps[-1]) / 2
        for name in POLICIES:
            speedups[name].append(tps[name] / beside)
    return {"speedup": {p: statistics.median(v) for p, v in speedups.items()}, "rounds": speedups,
            "probe_draft_ms": t_draft * 1e3, "in_run_draft_ms": statistics.median(drafts) * 1e3 if drafts else None,
            "identical": same}


def summary(rows: list[dict]) -> list[str]:
    lines = []
    for p in POLICIES:
        m = [r["speedup"][p] for r in rows]
        lo, hi = median_ci(m)
        lines.append(f"roofline, {p} pass times: median {statistics.median(m):.3f}x [{lo:.3f}-{hi:.3f}] over "
                     f"{len(m)} prompts (prompts {min(m):.2f}-{max(m):.2f}x)")
    ratio = [r["speedup"]["in-run"] / r["speedup"]["probe"] for r in rows]
    lo, hi = median_ci(ratio)
    lines.append(f"in-run / probe: median per-prompt ratio {statistics.median(ratio):.3f} [{lo:.3f}-{hi:.3f}] "
                 f"({min(ratio):.3f}-{max(ratio):.3f})")
    inside = [r["in_run_draft_ms"] / r["probe_draft_ms"] for r in rows if r["in_run_draft_ms"]]
    if inside:
        lines.append(f"a one-token draft pass inside the decodes / the probe's: median {statistics.median(inside):.2f}x "
                     f"({min(inside):.2f}-{max(inside):.2f}x over prompts)")
    lines.append(f"greedy output identical to plain decoding: {sum(r['identical'] for r in rows)}/{len(rows)} prompts")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draft", default=str(DEFAULT_DRAFT))
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--prompts", type=int, help="only the first N of those prompts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="write one JSON line per prompt here")
    args = ap.parse_args(argv)
    from app.validation import prompt_ids as tokenize
    pair, settings, notes = load_flagship(args.draft)
    print("paths:", "; ".join(f"{k}: {v}" for k, v in notes.items()), flush=True)
    by_id, rows = {p["id"]: p for p in load()}, []
    out = open(args.out, "w") if args.out else None
    for k, pid in enumerate(prompt_ids(args.per_category)[:args.prompts]):
        ids = tokenize(pair.tokenizer, by_id[pid]["messages"][0]["content"], pair.context, settings.max_new_tokens, chat=True)
        row = {"id": pid, **run_policies(pair, settings, ids, args.rounds, k)}
        rows.append(row)
        print(pid, " ".join(f"{p} {row['speedup'][p]:.3f}x" for p in POLICIES),
              f"draft pass {row['probe_draft_ms']:.2f} ms probed, {row['in_run_draft_ms']:.2f} ms in the runs", flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
