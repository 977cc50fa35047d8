"""Teacher replies to the diverse prompts (research.diverse_prompts): the flagship target writes
them, sampled at T = 0.7 and 1.0, and their token ids are kept as JSON lines, one reply a line,
appended as they come, so a run on a busy CPU can stop at any time and resume.

Why the target's own sampled replies: the draft learns to match the target's distribution on
the text the target itself writes, which is what it must predict when drafting (research/RESULTS.md:
sampled replies, not prompts, limit alpha). A multi-turn prompt's follow-up goes after the
teacher's own first reply (decoded, through the chat template), and both turns are kept.

Each line: {"prompt_id", "kind", "turn" (1 or 2), "temperature", "seed", "ids" (chat-template
prompt + reply ids), "first" (the position whose output predicts the first reply token: the
prompt's length - 1, as research.teacher_record stores it), "seconds" (sampling time)}.
--pack writes a research.teacher_record .npz of every line, so research.distill_smollm2's
teacher_topk rebuilds the top-K teacher targets from it with one forward pass.

    nice -n 19 python -m research.diverse_data --out F.jsonl [--tokens 128] [--limit N]
    python -m research.diverse_data --out F.jsonl --pack F.npz
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

TEMPERATURES = (0.7, 1.0)


def sample(pair, messages: list[dict], temperature: float, tokens: int, seed: int) -> tuple[list[int], int, float]:
    """The target's reply to a conversation: (prompt + reply ids, first, seconds sampling took)."""
    from app.engine import DecodeSettings, autoregressive_generate
    from research.eval_set import chat_ids
    ids = chat_ids(pair.tokenizer, messages)
    t0 = time.perf_counter()
    s = DecodeSettings(temperature=temperature, max_new_tokens=tokens, seed=seed)
    reply = [t for e in autoregressive_generate(pair, ids, s) for t in e.emitted_ids]
    return ids + reply, len(ids) - 1, time.perf_counter() - t0


def replies(pair, prompt: dict, temperature: float, tokens: int, seed: int) -> list[dict]:
    """One prompt's lines: its reply, and for a multi-turn prompt also the reply to its follow-up
    after the teacher's first reply (seed + 1)."""
    ids, first, seconds = sample(pair, prompt["messages"], temperature, tokens, seed)
    base = {"prompt_id": prompt["id"], "kind": prompt["kind"], "temperature": temperature}
    out = [{**base, "turn": 1, "seed": seed, "ids": ids, "first": first, "seconds": round(seconds, 2)}]
    if prompt.get("follow_up"):
        said = pair.tokenizer.decode(ids[first + 1:], skip_special_tokens=True).strip()
        messages = prompt["messages"] + [{"role": "assistant", "content": said},
                                         {"role": "user", "content": prompt["follow_up"]}]
        ids2, first2, seconds2 = sample(pair, messages, temperature, tokens, seed + 1)
        out.append({**base, "turn": 2, "seed": seed + 1, "ids": ids2, "first": first2, "seconds": round(seconds2, 2)})
    return out


def done_keys(path: Path) -> set[tuple[str, float]]:
    """(prompt_id, temperature) of every prompt already answered in a JSON-lines file."""
    if not path.exists():
        return set()
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {(r["prompt_id"], r["temperature"]) for r in rows}


def pack(jsonl: Path, npz: Path) -> int:
    """Every line of a run as one research.teacher_record .npz (seconds: their sum). -> examples."""
    from research.teacher_record import save_record
    rows = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines() if line.strip()]
    save_record(rows, npz, seconds=sum(r["seconds"] for r in rows))
    return len(rows)


def run(pair, prompts: list[dict], out: Path, temperatures=TEMPERATURES, tokens: int = 128,
        limit: int | None = None) -> int:
    """Answer each prompt at each temperature, skipping those already in `out`, appending lines;
    seed = 10 x the prompt's index in `prompts` + 2 x the temperature's index (turn 2: + 1).
    Returns how many prompt-temperature pairs were answered now."""
    done, n = done_keys(out), 0
    for i, p in enumerate(prompts):
        for j, t in enumerate(temperatures):
            if (p["id"], t) in done or (limit is not None and n >= limit):
                continue
            lines = replies(pair, p, t, tokens, 10 * i + 2 * j)
            with out.open("a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in lines)
            n += 1
    return n


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="the JSON-lines file to append to (resumes it)")
    ap.add_argument("--pack", type=Path, default=None, help="write OUT's lines as a teacher_record .npz and stop")
    ap.add_argument("--tokens", type=int, default=128, help="reply tokens per reply (default 128)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=list(TEMPERATURES))
    ap.add_argument("--limit", type=int, default=None, help="stop after this many prompt-temperature pairs")
    ap.add_argument("--draft", type=Path, default=None, help="unused by sampling; the pair loads with it")
    args = ap.parse_args(argv)
    if args.pack:
        print(f"packed {pack(args.out, args.pack)} examples into {args.pack}")
        return
    if not 1 <= args.tokens <= 512 or any(not 0 < t <= 2 for t in args.temperatures):
        ap.error("--tokens must be 1..512 and each temperature in (0, 2]")
    from research.diverse_prompts import prompts
    from research.evaluate_smollm2 import load as load_pair
    pair = load_pair("cpu", args.draft)
    n = run(pair, prompts(), args.out, tuple(args.temperatures), args.tokens, args.limit)
    print(f"answered {n} prompt-temperature pairs into {args.out}")


if __name__ == "__main__":
    main()
