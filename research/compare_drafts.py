"""Compare two drafts for the flagship target on the same replies: alpha for each, and their
difference with a paired bootstrap interval.

    python -m research.compare_drafts --b DIR                 # a new draft against the shipped one
    python -m research.compare_drafts --b-int8                # the shipped draft: int8 weights against fp32
    python -m research.compare_drafts --a DIR --b DIR --replies 48 --temperature 0.7 1.0 --out F
    python -m research.compare_drafts --b DIR --set [N]       # on the realistic set, per category
    python -m research.compare_drafts --chain A_VS_B.json B_VS_C.json --out A_VS_C.json
    python -m research.compare_drafts --pool SEED0.json SEED1000.json --out POOLED.json

Why paired: the evaluate command's alpha comes from 8 replies, and its 95% interval is about
+-0.04 wide, mostly because some replies are easy for any draft and others hard. Two drafts
scored on the *same* target samples share that variation, so the interval of their
difference, resampling the same replies for both (research.evaluate.paired_bootstrap_diff),
is far narrower than either alpha's own: it says whether a candidate draft is better, where
comparing two separate intervals cannot.

What is measured, at each temperature T: the target samples `--replies` replies of `--tokens`
tokens (plain decoding, seeds 0, 1, ..., or --seed S, S + 1, ...) to held-out chat prompts (evaluate_smollm2.chat_prompts),
or with --set to the realistic evaluation set (research/eval_prompts.json; its first N prompts of
every category with --set N), then each draft is teacher-forced over them and alpha = mean over reply positions of
sum_x min(p_target, q_draft) at T (Leviathan et al. 2023, Def. 3.1; flagship.reply_alphas).
With --set, "by_category" also gives each
category's alpha for both drafts with its bootstrap interval (research.eval_set.alpha_by_category)
and the paired difference within the category. Writes JSON to --out (default: print only).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from research.evaluate import bootstrap_ci, code_version, own_samples, paired_bootstrap_diff


def compare(pair_a, pair_b, prompts: list[list[int]], temperature: float, tokens: int,
            int8: tuple[bool, bool] = (False, False), seed: int = 0, categories: list[str] | None = None) -> dict:
    """Alpha of pair_a's and pair_b's drafts (int8: per side) on the same replies of the target
    (pair_a's, which pair_b must share) to `prompts` (token ids each), b - a paired, and each
    reply's own alpha on both sides ("per_reply", in prompt order). categories: each prompt's
    category, for "by_category" (by_category)."""
    if pair_a.target is not pair_b.target:
        raise ValueError("both drafts must be scored against the same target model")
    from research.flagship import reply_alphas
    samples = own_samples(pair_a, prompts, temperature, tokens, seed)        # [1, P + tokens] each
    lens = [len(p) for p in prompts]
    a = reply_alphas(pair_a, samples, lens, temperature, int8[0])[0]          # [reply length] per reply
    b = reply_alphas(pair_b, samples, lens, temperature, int8[1])[0]
    mean = lambda v: round(torch.cat(v).mean().item(), 4)  # noqa: E731
    extra = {"by_category": by_category(a, b, categories)} if categories else {}
    return {**extra, "replies": len(samples), "positions": int(sum(len(v) for v in a)),
            "a": {"alpha": mean(a), "alpha_ci95": list(bootstrap_ci(a))},
            "b": {"alpha": mean(b), "alpha_ci95": list(bootstrap_ci(b))},
            "b_minus_a": paired_bootstrap_diff(a, b),
            "per_reply": [{"positions": len(x), "a": round(x.mean().item(), 4), "b": round(y.mean().item(), 4)}
                          for x, y in zip(a, b)]}


def by_category(a: list[torch.Tensor], b: list[torch.Tensor], categories: list[str]) -> dict:
    """Per category and overall: each draft's token-weighted alpha with its bootstrap interval
    over the category's replies (research.eval_set.alpha_by_category; overall stratified by
    category) and b - a with its paired interval over the same replies (paired_bootstrap_diff).
    a, b: per-position values [n_i] of reply i under each draft; categories: reply i's category."""
    from research.eval_set import alpha_by_category
    table = {side: alpha_by_category([{"category": c, "alphas": v.tolist()} for c, v in zip(categories, values)])
             for side, values in (("a", a), ("b", b))}
    out = {}
    for name in table["a"]:
        pick = [i for i, c in enumerate(categories) if name in ("overall", c)]
        out[name] = {"a": table["a"][name], "b": table["b"][name],
                     "b_minus_a": paired_bootstrap_diff([a[i] for i in pick], [b[i] for i in pick])}
    return out


def by_task(rows: list[dict]) -> dict:
    """Position-weighted alpha of each side per task template, lowest a first, from per-reply
    rows ({"task", "positions", "a", "b"} each): {task: {"replies", "positions", "a", "b"}}."""
    out: dict[str, dict] = {}
    for r in rows:
        t = out.setdefault(r["task"], {"replies": 0, "positions": 0, "a": 0.0, "b": 0.0})
        t["replies"] += 1
        t["positions"] += r["positions"]
        t["a"] += r["a"] * r["positions"]
        t["b"] += r["b"] * r["positions"]
    for t in out.values():
        t["a"], t["b"] = round(t["a"] / t["positions"], 4), round(t["b"] / t["positions"], 4)
    return dict(sorted(out.items(), key=lambda kv: kv[1]["a"]))


ROUNDING = 1e-4  # per_reply alphas are kept to 4 decimals: a draft's two roundings differ by < 1e-4


def spread(row: dict, side: str) -> torch.Tensor:
    """A saved reply's alpha under draft `side` ("a" or "b") as per-position values [positions]:
    its mean repeated, which leaves every token-weighted mean and reply-resampling bootstrap as
    the per-position values would give them (chain, pool)."""
    return torch.full((row["positions"],), row[side], dtype=torch.float64)


def chain(first: dict, second: dict) -> dict:
    """a against c from two comparisons that share a draft (first: a vs b, second: b vs c)
    and therefore the same target replies: a retrained draft against the draft two steps back
    without sampling the replies again. Each reply's alpha stands for its positions (its mean
    repeated `positions` times), which leaves every token-weighted mean and reply-resampling
    bootstrap as the direct comparison computes them, up to the 4-decimal rounding. Raises
    ValueError unless the replies (ids, positions) are the same and b scored them the same in
    both files, which a run on other replies, or of another draft as b, cannot pass."""
    out = {"a": first["a"], "b": second["b"], "tokens_per_reply": first["tokens_per_reply"],
           "prompts": first.get("prompts"), "commit": f"{first['commit']} and {second['commit']}",
           "chained": {"a_vs_b": first["b"]["draft"], "b_vs_c": second["b"]["draft"]}}
    if first["tokens_per_reply"] != second["tokens_per_reply"]:
        raise ValueError("the two comparisons sampled replies of different lengths")
    for t in (k for k in first if k.startswith("T=")):
        r1, r2 = first[t]["per_reply"], second[t]["per_reply"]
        key = lambda r: (r.get("id") or r["prompt"], r["positions"])  # noqa: E731  (--set rows, or held-out ones)
        same = list(map(key, r1)) == list(map(key, r2))
        if not same or any(abs(x["b"] - y["a"]) > ROUNDING for x, y in zip(r1, r2)):
            raise ValueError(f"{t}: the comparisons did not score the same replies with the same middle draft")
        a, c = [spread(x, "a") for x in r1], [spread(y, "b") for y in r2]              # [positions] each
        mean = lambda v: round(torch.cat(v).mean().item(), 4)  # noqa: E731
        extra = {"by_category": by_category(a, c, [x["category"] for x in r1])} if "category" in r1[0] else {}
        out[t] = {**extra, "replies": len(r1), "positions": first[t]["positions"],
                  "a": {"alpha": mean(a), "alpha_ci95": list(bootstrap_ci(a))},
                  "b": {"alpha": mean(c), "alpha_ci95": list(bootstrap_ci(c))},
                  "b_minus_a": paired_bootstrap_diff(a, c),
                  "per_reply": [{**x, "b": y["b"]} for x, y in zip(r1, r2)]}
    out["seconds"] = first["seconds"] + second["seconds"]
    return out


def pool(results: list[dict]) -> dict:
    """One a-vs-b comparison from several --set runs of the same two drafts on the same prompts
    with different --seed (independent draws of target replies): every reply counts, and the
    bootstrap resamples *prompts*, each with all its replies, since replies to one prompt share
    what makes it easy or hard (a cluster bootstrap, Efron & Tibshirani 1993, ch. 13). Raises
    ValueError unless the runs name the same drafts, reply length and prompts and no seed repeats."""
    first = results[0]
    seeds = [r.get("seed", 0) for r in results]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds {seeds}: a seed given twice counts the same replies twice")
    for r in results[1:]:
        if (r["a"], r["b"], r["tokens_per_reply"]) != (first["a"], first["b"], first["tokens_per_reply"]):
            raise ValueError("the runs compare other drafts or other reply lengths")
    out = {"a": first["a"], "b": first["b"], "tokens_per_reply": first["tokens_per_reply"],
           "prompts": first.get("prompts"), "commit": " and ".join(r["commit"] for r in results),
           "pooled_seeds": seeds, "seconds": round(sum(r["seconds"] for r in results), 1)}
    for t in (k for k in first if k.startswith("T=")):
        ids = [x["id"] for x in first[t]["per_reply"]]
        if any([x["id"] for x in r[t]["per_reply"]] != ids for r in results):
            raise ValueError(f"{t}: the runs did not sample the same prompts")
        rows = list(zip(*(r[t]["per_reply"] for r in results)))         # [prompt][run]
        a, b = ([torch.cat([spread(x, k) for x in runs]) for runs in rows] for k in "ab")  # [positions, all runs]
        out[t] = {"by_category": by_category(a, b, [runs[0]["category"] for runs in rows]),
                  "replies": len(ids) * len(results), "positions": sum(map(len, a)),
                  "b_minus_a": paired_bootstrap_diff(a, b)}
    return out


def load_sides(a: Path, b: Path, device: str):
    """(pair_a, pair_b): the flagship target with draft a and with draft b, one target shared."""
    from app.gguf import load_draft
    from research.flagship import load
    pair_a = load(device, a)
    if Path(a).resolve() == Path(b).resolve():
        return pair_a, pair_a
    draft_b = load_draft(b, pair_a.tokenizer, pair_a.device, pair_a.dtype)
    return pair_a, dataclasses.replace(pair_a, draft=draft_b, draft_id=str(b))


def main(argv=None) -> dict:
    from app.assets import SMOLLM2_DRAFT_DIR
    from research.evaluate_smollm2 import chat_prompt_texts, chat_prompts
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, default=SMOLLM2_DRAFT_DIR, help="draft a's directory (default: the shipped draft)")
    ap.add_argument("--b", type=Path, default=SMOLLM2_DRAFT_DIR, help="draft b's directory (default: the shipped draft)")
    ap.add_argument("--a-int8", action="store_true", help="draft a with int8 weights (app.lean.Int8Weight)")
    ap.add_argument("--b-int8", action="store_true", help="draft b with int8 weights")
    ap.add_argument("--replies", type=int, default=24, help="target replies per temperature (default 24)")
    ap.add_argument("--tokens", type=int, default=96, help="tokens per reply (default 96)")
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.7])
    ap.add_argument("--set", type=int, nargs="?", const=0, default=None, metavar="N",
                    help="the realistic evaluation set instead (its first N prompts of every category; all without N)")
    ap.add_argument("--seed", type=int, default=0,
                    help="the first reply's sampling seed (seed + i for the i-th): another seed samples new "
                         "replies to the same prompts, a replication of a comparison (default 0)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--chain", type=Path, nargs=2, metavar=("A_VS_B", "B_VS_C"),
                    help="no sampling: a against c from two comparisons' JSON that share draft b (chain)")
    ap.add_argument("--pool", type=Path, nargs="+", metavar="SET_JSON",
                    help="no sampling: one comparison from --set runs of other seeds, prompts resampled (pool)")
    args = ap.parse_args(argv)
    if args.chain or args.pool:
        docs = [json.loads(f.read_text()) for f in (args.chain or args.pool)]
        result = chain(*docs) if args.chain else pool(docs)
        if args.out:
            args.out.write_text(json.dumps(result, indent=1) + "\n")
        return result
    if args.a.resolve() == args.b.resolve() and args.a_int8 == args.b_int8:
        ap.error("a and b are the same draft: give --b DIR, or --b-int8 to compare int8 weights with fp32")
    for name in ("a", "b"):
        if not (getattr(args, name) / "config.json").is_file():
            ap.error(f"--{name} {getattr(args, name)}: no model directory there (no config.json)")
    most = len(chat_prompt_texts(10 ** 6))                  # every evaluation prompt
    if args.set is not None and args.set < 0:
        ap.error("--set N: N must be >= 1 (or give --set alone for the whole set)")
    if not 1 <= args.replies <= most or not 1 <= args.tokens <= 512:
        ap.error(f"--replies must be 1..{most} (the held-out prompts evaluation uses) and --tokens 1..512")
    if any(not 0 < t <= 2 for t in args.temperature):
        ap.error("--temperature: each must be in (0, 2]; alpha at T = 0 is the greedy agreement")
    t0 = time.time()
    pair_a, pair_b = load_sides(args.a, args.b, args.device)
    if args.set is not None:
        return _main_set(args, pair_a, pair_b, t0)
    prompts = chat_prompts(pair_a, args.replies)              # chat-template ids of texts
    texts, tasks = chat_prompt_texts(args.replies), chat_prompt_texts(args.replies, tasks=True)
    result = {"commit": code_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "a": {"draft": str(args.a), "int8": args.a_int8}, "b": {"draft": str(args.b), "int8": args.b_int8},
              "tokens_per_reply": args.tokens, "seed": args.seed}
    for t in args.temperature:
        print(f"T = {t}: the target samples {len(prompts)} replies, then both drafts score them", file=sys.stderr)
        result[f"T={t}"] = compare(pair_a, pair_b, prompts, t, args.tokens, (args.a_int8, args.b_int8), args.seed)
        rows = result[f"T={t}"]["per_reply"]
        for row, text, task in zip(rows, texts, tasks):
            row["prompt"], row["task"] = text, task
        result[f"T={t}"]["by_task"] = by_task(rows)
    result["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def _main_set(args, pair_a, pair_b, t0: float) -> dict:
    """main on the realistic evaluation set: per-reply rows carry the prompt's id and category."""
    from research.eval_set import chat_ids, first_per_category, load
    chosen = first_per_category(load(), args.set) if args.set else load()
    prompts = [chat_ids(pair_a.tokenizer, p["messages"]) for p in chosen]
    result = {"commit": code_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "a": {"draft": str(args.a), "int8": args.a_int8}, "b": {"draft": str(args.b), "int8": args.b_int8},
              "tokens_per_reply": args.tokens, "seed": args.seed, "prompts": "research/eval_prompts.json" + (
                  f", first {args.set} of every category" if args.set else "")}
    for t in args.temperature:
        print(f"T = {t}: the target samples {len(prompts)} replies, then both drafts score them", file=sys.stderr)
        result[f"T={t}"] = compare(pair_a, pair_b, prompts, t, args.tokens, (args.a_int8, args.b_int8), args.seed,
                                   categories=[p["category"] for p in chosen])
        for row, p in zip(result[f"T={t}"]["per_reply"], chosen):
            row["id"], row["category"] = p["id"], p["category"]
    result["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
