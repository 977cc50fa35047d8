"""The app's default decode against plain decoding, on a fixed set of realistic prompts.

    python benchmarks/defaults_speedup.py                              # the shipped draft, torch's threads
    python benchmarks/defaults_speedup.py --threads default 1          # both thread settings, interleaved
    python benchmarks/defaults_speedup.py --draft OLD NEW --out rows.jsonl   # two drafts, alternating

Each run is `python -m app generate --target gguf:smollm2-135m-instruct --draft DIR --baseline
PROMPT` in a fresh process, exactly what a user runs: depth by the roofline policy, fast path and
int8 draft where this CPU measures them faster, 64 greedy tokens, and a prompt's speed-up the
median of its neighbouring pairs of interleaved plain and speculative runs
(app.metrics.speedup_spread). "default" threads adds no --threads flag: torch's own choice,
which is also what the app uses unless SPECLAB_THREADS is set.

Configurations (draft x threads) take turns per prompt, the first one rotating, so that a drift
of the machine's speed during the run falls on all of them alike. Prompts: the first K (--per-category,
default 3) of each of eight single-turn categories of the realistic evaluation set
(research/eval_prompts.json), which no draft trained on. The summary prints, per configuration, the median over prompts with its 95%
bootstrap interval (prompts resampled), the slowest and fastest prompt, how many outputs were
identical to plain decoding, and the median per-prompt ratio between configurations.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.trace import CHOICE_NOTES  # noqa: E402
from research.eval_report import median_ci  # noqa: E402  (after the path: run as a script)
from research.eval_set import load  # noqa: E402

CATEGORIES = ("code", "math", "lang", "advice", "creative", "fact", "sum", "plan")


def prompt_ids(per_category: int = 3) -> list[str]:
    """The first per_category ids of each category, interleaved: code-01, math-01, ..., code-02, ..."""
    return [f"{c}-{i:02d}" for i in range(1, per_category + 1) for c in CATEGORIES]


PROMPT_IDS = prompt_ids(3)
DEFAULT_DRAFT = ROOT / "demo_models" / "smollm2_draft"


def generate_args(draft: str, threads: str, out_json: str, prompt: str) -> list[str]:
    """The CLI call of one run (threads "default": no flag, torch's choice)."""
    flags = [] if threads == "default" else ["--threads", threads]
    return [sys.executable, "-m", "app", "generate", "--target", "gguf:smollm2-135m-instruct",
            "--draft", draft, "--baseline", *flags, "--json", out_json, "--prompt", prompt]




def run_once(draft: str, threads: str, prompt: str, env: dict) -> dict:
    """One timed run -> the trace's summary (python -m app trace --json), with the torch
    thread count the run recorded and its measured choices in words (app.trace.CHOICE_NOTES: why the fast path,
    the int8 draft and the depth came out as they did, so a run that fell back to plain
    decoding says what it timed)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(generate_args(draft, threads, f"{tmp}/t.json", prompt), check=True, cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([sys.executable, "-m", "app", "trace", f"{tmp}/t.json", "--json", f"{tmp}/s.json"],
                       check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        trace = json.loads(Path(f"{tmp}/t.json").read_text())
        return {**json.loads(Path(f"{tmp}/s.json").read_text()), "threads": trace["recorded"]["threads"],
                "choices": {k: trace["settings"].get(k) for k in CHOICE_NOTES}}


def row_of(pid: str, label: str, threads: str, s: dict, load: list[float], draft_index: int = 0,
           draft_sha256: str | None = None) -> dict:
    """One JSON line: the prompt, the configuration (draft_index: the draft's place in --draft,
    the last one by convention the new draft; draft_sha256: its weights' hash, which the card
    matches against the shipped draft), the speed-up spread and what produced it."""
    import torch

    from app.hardware import _cpu_name
    keep = ("gamma", "depth_policy", "fast", "draft_int8", "max_new_tokens", "temperature")
    flag = "" if threads == "default" else f" --threads {threads}"
    return {"id": pid, "draft": label, "draft_index": draft_index, "draft_sha256": draft_sha256,
            "threads": threads, "torch_threads": s.get("threads"),
            "speedup": s["speedup_spread"], "mean_acceptance_length": round(s["mean_acceptance_length"] or 0, 3),
            "new_tokens": s["new_tokens"], "identical": s["baseline"]["identical"],
            "tokens_per_s": s.get("tokens_per_s"), "baseline_tokens_per_s": s["baseline"].get("tokens_per_s"),
            "settings": {k: {**s["settings"], "depth_policy": s["depth_policy"]}[k] for k in keep},
            "choices": s.get("choices"), "load_avg": load, "cpu": f"{_cpu_name()}, {os.cpu_count()} cores ({torch.backends.cpu.get_cpu_capability()})",
            "command": f"python -m app generate --target gguf:smollm2-135m-instruct --draft DIR --baseline{flag} PROMPT"}


def turns(configs: list, k: int) -> list:
    """The configurations in the order prompt k runs them: the list rotated by k, so each one
    goes first on every len(configs)-th prompt."""
    return configs[k % len(configs):] + configs[:k % len(configs)]


def summary(rows: list[dict]) -> list[str]:
    """Lines: per configuration the median speed-up over prompts [95% interval], range,
    identical outputs; then each later configuration's per-prompt ratio to the first."""
    key = lambda r: (r["draft"], r["threads"])  # noqa: E731
    configs = list(dict.fromkeys(key(r) for r in rows))
    by = {c: {r["id"]: r["speedup"]["median"] for r in rows if key(r) == c} for c in configs}
    lines = []
    for c in configs:
        m = list(by[c].values())
        lo, hi = median_ci(m)
        same = sum(r["identical"] for r in rows if key(r) == c)
        lines.append(f"{c[0]}, threads {c[1]}: median {statistics.median(m):.2f}x [{lo:.2f}-{hi:.2f}] over "
                     f"{len(m)} prompts (prompts {min(m):.2f}-{max(m):.2f}x), identical {same}/{len(m)}")
    for c in configs[1:]:
        both = [p for p in by[c] if p in by[configs[0]]]
        if both:
            ratio = [by[c][p] / by[configs[0]][p] for p in both]
            lines.append(f"  ({c[0]}, threads {c[1]}) / ({configs[0][0]}, threads {configs[0][1]}): median per-prompt "
                         f"ratio {statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draft", nargs="+", default=[str(DEFAULT_DRAFT)], help="draft directories (alternating)")
    ap.add_argument("--label", nargs="+", help="one name per --draft for the rows (default: the paths)")
    ap.add_argument("--threads", nargs="+", default=["default"], help="'default' (torch's choice) and/or counts")
    ap.add_argument("--per-category", type=int, default=3, help="prompts per category (at most the smallest "
                    "category's count in the evaluation set)")
    ap.add_argument("--prompts", type=int, help="only the first N of those prompts")
    ap.add_argument("--out", help="write one JSON line per run here")
    args = ap.parse_args(argv)
    labels = args.label or args.draft
    by_id = {p["id"]: p for p in load()}
    most = min(sum(i.startswith(f"{c}-") for i in by_id) for c in CATEGORIES)
    if not 1 <= args.per_category <= most:
        ap.error(f"--per-category: 1 to {most}, the evaluation set's prompts in its smallest category")
    if len(labels) != len(args.draft):
        ap.error("--label needs one name per --draft")
    from research.card_smollm2 import weights_sha256
    shas = [weights_sha256(d) for d in args.draft]  # one hash per draft, not per run
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    configs = list(itertools.product(range(len(args.draft)), args.threads))
    rows = []
    out = open(args.out, "w") if args.out else None
    for k, pid in enumerate(prompt_ids(args.per_category)[:args.prompts]):
        prompt = by_id[pid]["messages"][0]["content"]
        for d, threads in turns(configs, k):
            load0 = os.getloadavg()[0]
            s = run_once(args.draft[d], threads, prompt, env)
            rows.append(row_of(pid, labels[d], threads, s, [round(load0, 2), round(os.getloadavg()[0], 2)], d, shas[d]))
            print(pid, labels[d], f"threads {threads}", f"{rows[-1]['speedup']['median']:.2f}x",
                  f"MAL {rows[-1]['mean_acceptance_length']}", flush=True)
            if out:
                out.write(json.dumps(rows[-1]) + "\n")
                out.flush()
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
