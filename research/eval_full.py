"""The realistic evaluation set, prompt by prompt, resumable: alpha and (optionally) the greedy
speed-up at small gamma for every prompt of research/eval_prompts.json, one JSON line each.

Why line by line: on a shared 2-core CPU the whole set takes hours; each finished prompt is
appended to --out at once, a rerun skips the prompts already there, and the prompts run in
round-robin order over the categories (round_robin), so a run stopped at any point has covered
every category to within one prompt: a cut that is even per category by construction.

Per prompt (research.eval_set.measure, seed = the prompt's index in the set so that order and
resumption change nothing): the target samples its reply at T (plain decoding), and alpha =
sum_x min(p_target, q_draft) at T over the reply positions (Leviathan et al. 2023, Def. 3.1),
with the draft's greedy agreement. With --gammas, the prompt is then decoded greedily by plain
decoding and by speculative decoding at each gamma back to back (research.evaluate.speeds, one
round): its "speedup" per gamma is that run's tokens/s over plain decoding's seconds earlier,
and "identical" whether the greedy outputs matched token for token.

    nice -n 19 python -m research.eval_full --out F.jsonl [--tokens 48] [--gammas 1 2] [--fast --int8]
    python -m research.eval_full --summary F.jsonl [--write J]  # the table of a run; J for the model card

--write J keeps the summary (research.eval_report.summary), the run's settings, how many prompts
it covered, the seconds they took, the CPU and the UTC date of writing: what
research/card_smollm2.py prints in the draft's model card.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def round_robin(prompts: list[dict]) -> list[dict]:
    """The prompts reordered as the first of every category, then the second of every category,
    ...; categories in first-seen order, each category's own order kept."""
    groups: dict[str, list[dict]] = {}
    for p in prompts:
        groups.setdefault(p["category"], []).append(p)
    longest = max((len(g) for g in groups.values()), default=0)
    return [g[i] for i in range(longest) for g in groups.values() if i < len(g)]


def done_ids(path: Path) -> set[str]:
    """The ids already measured in a JSON-lines file (none when it does not exist)."""
    if not path.exists():
        return set()
    return {json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}


def measure_one(pair, prompt: dict, index: int, temperature: float, tokens: int, gammas: tuple[int, ...],
                fast: bool, int8: bool, rounds: int = 1, alpha: bool = True) -> dict:
    """One prompt's row: research.eval_set.measure's (seed = index; without alpha only its id
    and category) plus, with gammas, the greedy speed-ups {"gamma=g": {"speedup", "identical"}}
    over `rounds` rounds (the median of the rounds' paired ratios) and plain decoding's tokens/s."""
    from research.eval_set import chat_ids, measure
    from research.evaluate import speeds
    t0 = time.time()
    row = (measure(pair, [prompt], temperature, tokens, seed=index, int8=int8)[0] if alpha
           else {"id": prompt["id"], "category": prompt["category"]})
    if gammas:
        table = speeds(pair, [chat_ids(pair.tokenizer, prompt["messages"])], 0.0, tokens, rounds, gammas, fast, int8)
        row["plain_tokens_per_s"] = table["plain"]["tokens_per_s"]
        row["greedy"] = {f"gamma={g}": {"speedup": table[f"gamma={g}"]["speedup"],
                                        "identical": table[f"gamma={g}"]["identical_to_plain"]} for g in gammas}
    row["seconds"] = round(time.time() - t0, 1)
    return row


def warm_up(pair, tokens: int, gammas: tuple[int, ...], fast: bool, int8: bool) -> None:
    """One untimed speed run on a fixed prompt: the first run on the fast path builds the lean
    models inside its clock and ran at half the speed of the same run repeated (RESULTS.md)."""
    from research.evaluate import speeds
    speeds(pair, [pair.tokenizer("Hello.", add_special_tokens=False)["input_ids"]], 0.0, tokens, 1, gammas, fast, int8)


def summary_doc(rows: list[dict], source: Path, speed_rows: list[dict] | None = None,
                speed_source: Path | None = None) -> dict:
    """What --write keeps: the run's settings (from its rows), coverage, time, CPU, date, summary;
    with speed_rows, the speed-ups come from that run, and its settings are kept beside."""
    import datetime

    import torch

    from app.hardware import device_info
    from research.eval_report import summary
    from research.eval_set import load
    extra = {}
    if speed_rows is not None:
        extra = {"speed_source": str(speed_source), "speed_settings": _settings(speed_rows, speed_source),
                 "speed_seconds": round(sum(r["seconds"] for r in speed_rows))}
    return {"source": str(source), "settings": _settings(rows, source), **extra,
            "prompts_done": len(rows), "prompts_in_set": len(load()),
            "seconds": round(sum(r["seconds"] for r in rows)), "cpu": device_info("cpu")["name"],
            "cpu_isa": torch.backends.cpu.get_cpu_capability(),
            "written_on": datetime.datetime.now(datetime.timezone.utc).date().isoformat(), **summary(rows, speed_rows=speed_rows)}


def _settings(rows: list[dict], source) -> dict:
    """The settings every row of a run shares (ValueError if they differ)."""
    keys = ("draft", "temperature", "tokens", "fast", "int8", "mkl_cbwr", "threads", "rounds")
    settings = {k: sorted({r.get(k) for r in rows}, key=str) for k in keys}
    if any(len(v) != 1 for v in settings.values()):
        raise ValueError(f"{source}: rows measured with different settings: {settings}")
    return {k: v[0] for k, v in settings.items()}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="the JSON-lines file to append to (resumes it)")
    ap.add_argument("--summary", type=Path, help="print the per-category table of a finished or partial run")
    ap.add_argument("--write", type=Path, help="with --summary: also write it as JSON for the model card")
    ap.add_argument("--draft", type=Path, default=None, help="the draft's directory (default: the shipped draft)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--tokens", type=int, default=48, help="reply tokens per prompt (default 48)")
    ap.add_argument("--gammas", type=int, nargs="*", default=[], help="greedy speed-up at these gammas")
    ap.add_argument("--fast", action="store_true", help="speed runs on the fast path (app.fastpath)")
    ap.add_argument("--int8", action="store_true", help="the draft with int8 weights (alpha and speed)")
    ap.add_argument("--limit", type=int, default=None, help="stop after this many new prompts")
    ap.add_argument("--rounds", type=int, default=1, help="speed runs per prompt (median of their ratios)")
    ap.add_argument("--speed-only", action="store_true", help="time the speed-ups only, no alpha")
    ap.add_argument("--speed", type=Path, default=None,
                    help="with --summary: take the speed-ups from this run (a --speed-only one) instead")
    return ap


def main(argv=None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    if args.summary:
        from research.eval_report import read_rows, report
        rows = read_rows(args.summary)
        speed_rows = read_rows(args.speed) if args.speed else None
        print(report(rows, speed_rows))
        if args.write:
            args.write.write_text(json.dumps(summary_doc(rows, args.summary, speed_rows, args.speed), indent=1) + "\n")
        return
    if args.out is None:
        ap.error("give --out FILE.jsonl (or --summary FILE.jsonl)")
    if not 0 < args.temperature <= 2 or not 1 <= args.tokens <= 512 or any(g < 1 for g in args.gammas):
        ap.error("--temperature must be in (0, 2], --tokens in 1..512, --gammas >= 1")
    if args.rounds < 1 or (args.speed_only and not args.gammas):
        ap.error("--rounds must be >= 1, and --speed-only needs --gammas")
    run(args)


def run(args) -> None:
    """Measure the prompts of the set not yet in args.out, in round-robin order, appending rows."""
    import torch

    from research.eval_set import load
    from research.flagship import load as load_pair
    prompts = load()
    index = {p["id"]: i for i, p in enumerate(prompts)}
    todo = [p for p in round_robin(prompts) if p["id"] not in done_ids(args.out)][:args.limit]
    pair = load_pair("cpu", args.draft)
    settings = {"draft": str(args.draft or "shipped"), "temperature": args.temperature, "tokens": args.tokens,
                "fast": args.fast, "int8": args.int8, "mkl_cbwr": os.environ.get("MKL_CBWR"),
                "threads": torch.get_num_threads(), "rounds": args.rounds}
    if args.gammas and todo:    # builds the fast path's models outside any clock (app.fastpath.prepare)
        warm_up(pair, args.tokens, tuple(args.gammas), args.fast, args.int8)
    for p in todo:
        row = {**measure_one(pair, p, index[p["id"]], args.temperature, args.tokens, tuple(args.gammas),
                             args.fast, args.int8, args.rounds, not args.speed_only), **settings}
        with args.out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{row['id']}: alpha {row.get('alpha')} over {row.get('positions')}, speed-ups {row.get('greedy')} "
              f"in {row['seconds']} s", flush=True)


if __name__ == "__main__":
    main()
