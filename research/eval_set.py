"""The realistic evaluation set (issue 42): hand-written chat requests in nine categories, and
alpha per category with bootstrap intervals.

The flagship draft's alpha on the project's held-out *template* prompts ("What is {t}?", ...)
overstates what it reaches on requests people actually type (0.58 against 0.41 on free-form
requests). research/eval_prompts.json holds >= 120 prompts written by hand, not generated
from templates, disjoint from every training prompt (tests/test_eval_set.py checks it):
coding, maths, languages, advice, creative writing, factual explanation, summarising a given
passage, multi-turn chat and planning. Each prompt is a list of chat messages ending with a
user turn, sent through the target's chat template.

    load()                              -> the prompts (dicts with "id", "category", "messages")
    overlap_check(prompts)(text)        -> does a training text share words with an evaluation message
    measure(pair, prompts)              -> per-prompt rows of per-position alpha (needs the models)
    alpha_by_category(rows)             -> token-weighted alpha, 95% interval, counts per category

alpha is measured as in research/flagship.py: the target samples its own reply at
T (plain decoding), then over the reply positions alpha = sum_x min(p_target, q_draft) at T
(Leviathan et al. 2023, Def. 3.1), the draft teacher-forced on the same tokens.

    python -m research.eval_set [--draft DIR] [--limit N] [--out FILE]
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from research.bootstrap import BOOTSTRAP_DRAWS

EVAL_PROMPTS = Path(__file__).with_name("eval_prompts.json")


def load(path: Path | str = EVAL_PROMPTS) -> list[dict]:
    """The evaluation prompts: [{"id", "category", "messages": [{"role", "content"}, ...]}, ...]."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if doc.get("version") != 1:
        raise ValueError(f"{path}: unknown version {doc.get('version')!r} (this code reads version 1)")
    return doc["prompts"]


SHINGLE = 8  # words in a run two texts must not share


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def shingles(text: str, n: int = SHINGLE) -> set[tuple[str, ...]]:
    """Every run of n consecutive words of a text (lower-cased, punctuation dropped)."""
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def overlap_check(prompts: list[dict]):
    """The rule that keeps training prompts disjoint from the evaluation set, with `prompts`'
    messages indexed once: -> overlaps(text) -> bool, whether a text equals, contains or is
    contained in any of those messages (case, whitespace and punctuation ignored, whole words
    only), or shares an 8-word run with one."""
    spaced = [" " + " ".join(words(m["content"])) + " " for p in prompts for m in p["messages"]]
    runs = set().union(*(shingles(m["content"]) for p in prompts for m in p["messages"]))

    def overlaps(text: str) -> bool:
        w = " " + " ".join(words(text)) + " "
        return any(e in w or w in e for e in spaced) or bool(shingles(text) & runs)
    return overlaps


def _sum_count(row: dict) -> tuple[float, int]:
    """A row's (sum of per-position alpha, positions): from "alphas" (the per-position values)
    or from "alpha" (their mean) and "positions"."""
    if "alphas" in row:
        values = np.asarray(row["alphas"], dtype=np.float64)
        return float(values.sum()), int(values.size)
    return float(row["alpha"]) * int(row["positions"]), int(row["positions"])


def _weighted(sums: np.ndarray, counts: np.ndarray) -> float | None:
    total = counts.sum()
    return round(float(sums.sum() / total), 6) if total > 0 else None


def alpha_by_category(per_prompt_rows: list[dict], n_boot: int = BOOTSTRAP_DRAWS, seed: int = 0,
                      level: float = 0.95) -> dict:
    """Token-weighted alpha per category and overall, each with a percentile bootstrap interval
    over prompts.

    per_prompt_rows: one dict per prompt with "category" and either "alphas" (its per-position
    alpha values) or "alpha" and "positions". The prompt is the resampling unit: positions of one
    reply are not independent (a draft that loses the thread loses it for the rest of the
    reply), as in research.evaluate.bootstrap_ci. Each category resamples its own prompts with
    replacement; the overall interval resamples within every category at once (a stratified
    bootstrap), so each resample keeps the set's mix of categories, which is fixed by design (a
    category of one prompt, as with --limit 1, adds no width to it).

    Returns {category: {"alpha", "ci95": [low, high], "prompts", "tokens"}, ..., "overall": {...}},
    categories in first-seen order; alpha is None for a category with no positions. Values are
    rounded to 6 decimals; the same seed gives the same intervals; n_boot: why so many, research.bootstrap."""
    groups: dict[str, list[tuple[float, int]]] = {}
    for row in per_prompt_rows:
        groups.setdefault(row["category"], []).append(_sum_count(row))
    if "overall" in groups:
        raise ValueError('"overall" is reserved for the whole set; rename that category')
    rng = np.random.default_rng(seed)
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
    out: dict[str, dict] = {}
    total_sums, total_counts = np.zeros(n_boot), np.zeros(n_boot)     # [n_boot] each: the stratified resamples
    for name, pairs in groups.items():
        sums, counts = (np.array(v, dtype=np.float64) for v in zip(*pairs))   # [prompts] each
        pick = rng.integers(0, len(pairs), size=(n_boot, len(pairs)))         # [n_boot, prompts]
        boot_sums, boot_counts = sums[pick].sum(1), counts[pick].sum(1)       # [n_boot] each
        total_sums += boot_sums
        total_counts += boot_counts
        out[name] = _entry(sums, counts, boot_sums, boot_counts, q)
    every = [v for pairs in groups.values() for v in pairs]
    sums, counts = (np.array(v, dtype=np.float64) for v in zip(*every)) if every else (np.zeros(0), np.zeros(0))
    out["overall"] = _entry(sums, counts, total_sums, total_counts, q)
    return out


def _entry(sums, counts, boot_sums, boot_counts, q) -> dict:
    """One row of alpha_by_category: point estimate, percentile interval of the resampled
    token-weighted means (resamples with no positions left out), counts."""
    alpha = _weighted(sums, counts)
    ok = boot_counts > 0
    if alpha is None or not ok.any():
        ci = [None, None]
    else:
        low, high = np.percentile(boot_sums[ok] / boot_counts[ok], q)
        ci = [round(float(low), 6), round(float(high), 6)]
    return {"alpha": alpha, "ci95": ci, "prompts": int(len(sums)), "tokens": int(counts.sum())}


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """A conversation as the target's chat-template token ids with the assistant turn opened,
    tokenised as app.validation.prompt_ids does a single user message."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def first_per_category(prompts: list[dict], n: int) -> list[dict]:
    """The first n prompts of every category, in the set's order (a quick run over all kinds)."""
    seen: dict[str, int] = {}
    out = []
    for p in prompts:
        seen[p["category"]] = seen.get(p["category"], 0) + 1
        if seen[p["category"]] <= n:
            out.append(p)
    return out


def measure(pair, prompts: list[dict], temperature: float = 0.7, max_new_tokens: int = 64,
            seed: int = 0, int8: bool = False) -> list[dict]:
    """For each prompt (load()'s dicts), the target's own sampled reply at `temperature` (plain
    decoding, seed + i for the i-th prompt, as research.evaluate.own_samples) and, over its
    reply positions, per-position alpha = sum_x min(p_target, q_draft) and greedy agreement of
    the draft against the target (research.flagship.reply_alphas; a feature draft is
    handled there). int8: the draft with int8 weights.
    Returns one row per prompt: {"id", "category", "positions", "alpha", "greedy_agreement",
    "reply" (the sampled reply's text), "alphas": [per-position values]}; alpha_by_category
    takes these rows."""
    from research.evaluate import own_samples
    from research.flagship import reply_alphas
    ids = [chat_ids(pair.tokenizer, p["messages"]) for p in prompts]
    samples = own_samples(pair, ids, temperature, max_new_tokens, seed)        # [1, P + reply] each
    alphas, agree = reply_alphas(pair, samples, [len(i) for i in ids], temperature, int8)
    return [{"id": p["id"], "category": p["category"], "positions": len(a),
             "alpha": round(a.mean().item(), 4) if len(a) else None,
             "greedy_agreement": round(g.float().mean().item(), 4) if len(g) else None,
             "reply": pair.tokenizer.decode(x[0, len(i):].tolist()),
             "alphas": [round(v, 5) for v in a.tolist()]}
            for p, i, x, a, g in zip(prompts, ids, samples, alphas, agree)]


def main(argv=None) -> dict:
    """Measure the flagship target with a draft on the set (or its first --limit prompts of
    every category) and print alpha per category as JSON; --out also writes the per-prompt rows."""
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draft", type=Path, default=None, help="the draft's directory (default: the shipped draft)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N prompts of every category")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--tokens", type=int, default=64, help="reply tokens per prompt (default 64)")
    ap.add_argument("--int8", action="store_true", help="the draft with int8 weights")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if not 0 < args.temperature <= 2 or not 1 <= args.tokens <= 512:
        ap.error("--temperature must be in (0, 2] and --tokens in 1..512")
    from research.flagship import load as load_pair
    prompts = load()
    if args.limit is not None:
        prompts = first_per_category(prompts, args.limit)
    pair = load_pair(args.device, args.draft)
    rows = measure(pair, prompts, args.temperature, args.tokens, int8=args.int8)
    table = alpha_by_category(rows)
    result = {"draft": str(args.draft or "shipped"), "temperature": args.temperature, "tokens": args.tokens,
              "int8": args.int8, "by_category": table, "per_prompt": rows}
    print(json.dumps({k: v for k, v in result.items() if k != "per_prompt"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
