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

Batched, for training (`--cache DIR`): one round of every training prompt at one temperature,
`--batch` prompts a generate call, the teacher's top-K kept from generate's own logits
(research.distill_smollm2.sample_rows: no second pass), saved as a training shard
DIR/diverse_r{R}_T{T}.pt (with `--kinds`, only those kinds' prompts: ..._T{T}_{kind+kind}.pt)
and its ids as a record in demo_models/smollm2_replies/. The last
HELDOUT prompts of the shuffled pool are never trained on: `--heldout` answers them once
(DIR/diverse_heldout.pt) to choose the checkpoint by; the evaluation set is disjoint from both.

    MKL_CBWR=AVX512 python -m research.diverse_data --cache DIR --round 0 --temperature 0.7 --batch 64
    MKL_CBWR=AVX512 python -m research.diverse_data --cache DIR --heldout
    MKL_CBWR=AVX512 python -m research.diverse_data --cache DIR --rebuild replies_T0.7   # a template shard too
    MKL_CBWR=AVX512 python -m research.diverse_data --cache DIR --round 0 --continue-from diverse_r0_T0.7
    MKL_CBWR=AVX512 python -m research.diverse_data --cache DIR --round 6 --kinds languages summarise
    MKL_CBWR=AVX512 python -m research.diverse_data --cache DIR --round 0 --pool typed   # research.typed_prompts
    MKL_CBWR=AVX512 python -m research.diverse_data --cache DIR --round 0 --pool typed2  # its second pool

`--continue-from` goes on from a cached round's own first replies: each is pasted back to be
summarised or followed by a new user turn (research.diverse_data.continued), so the draft sees
many more passages and multi-turn conversations than the pool's few.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from research.diverse_prompts import KINDS

TEMPERATURES = (0.7, 1.0)
HELDOUT = 48  # the pool's last prompts: never trained on, they choose the checkpoint
POOLS = {"diverse": 20000, "typed": 50000, "typed2": 80000, "typed3": 110000,
         "typed4": 140000}  # --pool name -> the base of its rounds' seeds


def sample(pair, messages: list[dict], temperature: float, tokens: int, seed: int) -> tuple[list[int], int, float]:
    """The target's reply to a conversation: (prompt + reply ids, first, seconds sampling took)."""
    from app.engine import DecodeSettings, autoregressive_generate
    from research.eval_set import chat_ids
    ids = chat_ids(pair.tokenizer, messages)
    t0 = time.perf_counter()
    s = DecodeSettings(temperature=temperature, max_new_tokens=tokens, seed=seed)
    reply = [t for e in autoregressive_generate(pair, ids, s) for t in e.emitted_ids]
    return ids + reply, len(ids) - 1, time.perf_counter() - t0


def second_turn(tokenizer, prompt: dict, ids, first: int) -> list[dict]:
    """A multi-turn prompt's conversation after the teacher's first reply (ids[first + 1:], decoded):
    its messages, that reply as the assistant's turn, then its follow-up."""
    said = tokenizer.decode(ids[first + 1:], skip_special_tokens=True).strip()
    return prompt["messages"] + [{"role": "assistant", "content": said}, {"role": "user", "content": prompt["follow_up"]}]


def replies(pair, prompt: dict, temperature: float, tokens: int, seed: int) -> list[dict]:
    """One prompt's lines: its reply, and for a multi-turn prompt also the reply to its follow-up
    after the teacher's first reply (seed + 1)."""
    ids, first, seconds = sample(pair, prompt["messages"], temperature, tokens, seed)
    base = {"prompt_id": prompt["id"], "kind": prompt["kind"], "temperature": temperature}
    out = [{**base, "turn": 1, "seed": seed, "ids": ids, "first": first, "seconds": round(seconds, 2)}]
    if prompt.get("follow_up"):
        ids2, first2, seconds2 = sample(pair, second_turn(pair.tokenizer, prompt, ids, first), temperature,
                                        tokens, seed + 1)
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


def split(pool: list[dict]) -> tuple[list[dict], list[dict]]:
    """(training prompts, held-out prompts): the pool's last HELDOUT prompts are held out."""
    return pool[:-HELDOUT], pool[-HELDOUT:]


def shard(model, tok, prompts: list[dict], temperature: float, batch: int, seed: int, deadline: float,
          draft=None) -> list[dict]:
    """Every prompt's reply sampled in batches of similar length (sample_rows: ids, first, top-K),
    then every multi-turn prompt's second reply after the first. Each example also carries its
    prompt's "prompt_id", "kind" and "turn". With a `draft`, the draft writes the replies and the
    teacher (`model`) scores them (research.onpolicy.scored_rows)."""
    from functools import partial

    from research.distill_smollm2 import sample_rows
    from research.eval_set import chat_ids
    from research.onpolicy import scored_rows
    write = sample_rows if draft is None else partial(scored_rows, draft)
    rows = [chat_ids(tok, p["messages"]) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(rows[i]))
    ps = [prompts[i] for i in order]
    out = write(model, tok, [rows[i] for i in order], temperature, batch, seed, deadline)
    tag = lambda e, p, turn: {**e, "prompt_id": p["id"], "kind": p["kind"], "turn": turn}  # noqa: E731
    out = [tag(e, p, 1) for e, p in zip(out, ps)]
    second = [(p, e) for e, p in zip(out, ps) if p.get("follow_up")]
    rows = [chat_ids(tok, second_turn(tok, p, e["ids"], e["first"])) for p, e in second]
    more = write(model, tok, rows, temperature, batch, seed + 1, deadline) if rows else []
    return out + [tag(e, p, 2) for e, (p, _) in zip(more, second)]


def of_kinds(prompts: list[dict], kinds) -> list[dict]:
    """The prompts whose "kind" is one of `kinds` (all of them when `kinds` is empty): extra rounds
    on the categories where the draft's alpha is lowest, with the round's own seeds."""
    return [p for p in prompts if not kinds or p["kind"] in kinds]


def continued(tok, examples: list[dict], pool: list[dict], seed: int) -> list[dict]:
    """Prompts that go on from the teacher's own first replies (`examples`, a shard's turn-1
    examples): a reply to a REPLY_SUMMARY_KINDS prompt is pasted back to be summarised (half of
    them), every other one gets a FOLLOW_UPS turn after it. None shares text with the
    evaluation set (research.eval_set.overlap_check); ids are "<prompt id>/summary" or "/follow"."""
    import random
    from research.diverse_prompts import FOLLOW_UPS, REPLY_SUMMARY_KINDS, SUMMARISE_FORMS
    from research.eval_set import load as load_eval
    from research.eval_set import overlap_check
    rng, by_id, out = random.Random(seed), {p["id"]: p for p in pool}, []
    overlaps = overlap_check(load_eval())
    for e in (e for e in examples if e["turn"] == 1):
        p = by_id[e["prompt_id"]]
        said = tok.decode(e["ids"][e["first"] + 1:], skip_special_tokens=True).strip()
        if p["kind"] in REPLY_SUMMARY_KINDS and rng.random() < 0.5:
            q = {"id": p["id"] + "/summary", "kind": "summarise", "follow_up": None,
                 "messages": [{"role": "user", "content": rng.choice(SUMMARISE_FORMS).format(s=said)}]}
        else:
            q = {"id": p["id"] + "/follow", "kind": "multiturn", "follow_up": None,
                 "messages": second_turn(tok, {**p, "follow_up": rng.choice(FOLLOW_UPS)}, e["ids"], e["first"])}
        if not overlaps(said):
            out.append(q)
    return out


def shard_name(args) -> str:
    """diverse_heldout, or {pool}_{r|c|d}{round}_T{temperature} (pool: a name in POOLS; r: sampled
    by the teacher, c: continued from a cached round, d: written by the draft), with "_kind+kind"
    for --kinds."""
    if args.heldout:
        return "diverse_heldout"
    kinds = f"_{'+'.join(sorted(set(args.kinds)))}" if args.kinds else ""
    letter = "c" if args.continue_from else "d" if args.writer == "draft" else "r"
    return f"{args.pool}_{letter}{args.round}_T{args.temperature}{kinds}"


def _parse_shard(filename: str) -> re.Match | None:
    """A round's shard or record file name (shard_name + .pt or .npz): groups pool, r|c|d, kinds."""
    return re.fullmatch(rf"({'|'.join(POOLS)})_([rcd])\d+_T[\d.]+(?:_([a-z+]+))?\.(?:pt|npz)", filename)


def shard_kinds(filename: str) -> str | None:
    """The "kind+kind" of a --kinds round's shard or record file name (shard_name), else None."""
    m = _parse_shard(filename)
    return m[3] if m else None


def shard_round(filename: str) -> tuple[str, str] | None:
    """(pool, "r" for a sampled round, "c" for a continued one, "d" for one the draft wrote) of a
    round's shard or record file name (shard_name), else None (the held-out replies, the
    template shards)."""
    m = _parse_shard(filename)
    return (m[1], m[2]) if m else None


def load_writer(path: Path | None):
    """The draft that writes a --writer draft round (float32, eval): `path`, or the shipped one."""
    import torch
    from transformers import AutoModelForCausalLM
    from app.assets import SMOLLM2_DRAFT_DIR
    return AutoModelForCausalLM.from_pretrained(path or SMOLLM2_DRAFT_DIR, dtype=torch.float32).eval()


def make_shard(args) -> None:
    """One batched round (or the held-out replies) into the cache, its ids into the record."""
    import torch
    from research.distill_smollm2 import load_teacher
    from research.diverse_prompts import prompts
    from research.teacher_record import RECORD_DIR, save_record
    train, held = split(prompts())
    if args.pool != "diverse":  # a typed pool is all training prompts; the held-out ones stay the first pool's
        from research.typed_prompts import prompts as typed
        train = typed(pool=args.pool)
    name = shard_name(args)
    path = args.cache / f"{name}.pt"
    if path.exists():
        sys.exit(f"{path} exists: remove it to sample it again")
    model, tok = load_teacher()
    draft = load_writer(args.draft) if args.writer == "draft" else None
    torch.set_num_threads(args.threads)
    t0 = time.time()
    seed = 99 if args.heldout else POOLS[args.pool] + 1000 * args.round + round(100 * args.temperature)
    if args.continue_from:
        train = continued(tok, torch.load(args.cache / f"{args.continue_from}.pt"), train, seed)
    train = of_kinds(train, args.kinds)
    examples = shard(model, tok, held if args.heldout else train, 0.7 if args.heldout else args.temperature,
                     args.batch, seed, t0 + 60 * args.max_minutes, draft)
    seconds = time.time() - t0
    args.cache.mkdir(parents=True, exist_ok=True)
    torch.save(examples, path)
    save_record(examples, RECORD_DIR / f"{name}.npz", seconds)
    tokens = sum(len(e["tk_ids"]) for e in examples)
    print(f"{path}: {len(examples)} replies, {tokens:,} reply tokens in {seconds:.0f} s "
          f"({tokens / seconds:.1f} tokens/s)")


def rebuild(args) -> None:
    """A recorded shard (`--rebuild NAME`: RECORD_DIR/NAME.npz) into the cache as a training shard,
    the teacher's top-K recomputed by one forward pass (research.distill_smollm2.teacher_topk), so
    that a run on the diverse rounds can also keep some of the template replies it learned from."""
    import torch
    from research.distill_smollm2 import load_teacher, teacher_topk
    from research.teacher_record import RECORD_DIR, load_record
    model, _ = load_teacher()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    examples = teacher_topk(model, load_record(RECORD_DIR / f"{args.rebuild}.npz"), args.batch)
    args.cache.mkdir(parents=True, exist_ok=True)
    torch.save(examples, args.cache / f"{args.rebuild}.pt")
    print(f"{args.cache / args.rebuild}.pt: {len(examples)} replies rebuilt in {time.time() - t0:.0f} s")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="the JSON-lines file to append to (resumes it)")
    ap.add_argument("--pack", type=Path, default=None, help="write OUT's lines as a teacher_record .npz and stop")
    ap.add_argument("--tokens", type=int, default=128, help="reply tokens per reply (default 128)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=list(TEMPERATURES))
    ap.add_argument("--limit", type=int, default=None, help="stop after this many prompt-temperature pairs")
    ap.add_argument("--draft", type=Path, default=None, help="the draft directory: the pair loads with it, and "
                    "--writer draft samples with it (default: the shipped draft)")
    ap.add_argument("--writer", choices=["target", "draft"], default="target", help="batched mode: who writes the "
                    "replies; draft: the draft writes, the teacher scores every position (research.onpolicy), "
                    "saved as DIR/{pool}_d{round}_T{T}.pt")
    ap.add_argument("--cache", type=Path, default=None, help="batched mode: the teacher-output directory")
    ap.add_argument("--round", type=int, default=0, help="batched mode: which round (new seeds)")
    ap.add_argument("--temperature", type=float, default=0.7, help="batched mode: one temperature")
    ap.add_argument("--heldout", action="store_true", help="batched mode: answer the held-out prompts once")
    ap.add_argument("--batch", type=int, default=64, help="batched mode: prompts per generate call")
    ap.add_argument("--rebuild", metavar="NAME", help="batched mode: a recorded shard (demo_models/smollm2_replies/"
                    "NAME.npz) into the cache with the teacher's top-K (one forward pass)")
    ap.add_argument("--continue-from", metavar="NAME", help="batched mode: continue the turn-1 replies of the "
                    "cached shard DIR/NAME.pt (research.diverse_data.continued) into DIR/diverse_cR_T.pt")
    ap.add_argument("--kinds", nargs="+", default=[], choices=KINDS, help="batched mode: only the training prompts of these "
                    "kinds (after --continue-from), e.g. languages factual summarise")
    ap.add_argument("--pool", choices=list(POOLS), default="diverse", help="batched mode: the training "
                    "prompts of research.diverse_prompts (default) or a pool of research.typed_prompts")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-minutes", type=float, default=60.0, help="batched mode: time cap of sampling")
    args = ap.parse_args(argv)
    if args.writer == "draft" and (args.heldout or args.continue_from or not args.cache):
        ap.error("--writer draft writes a training round: not with --heldout or --continue-from, and only with --cache")
    if args.cache:
        rebuild(args) if args.rebuild else make_shard(args)
        return
    if args.out is None:
        ap.error("--out or --cache is required")
    if args.pack:
        print(f"packed {pack(args.out, args.pack)} examples into {args.pack}")
        return
    if not 1 <= args.tokens <= 512 or any(not 0 < t <= 2 for t in args.temperatures):
        ap.error("--tokens must be 1..512 and each temperature in (0, 2]")
    from research.diverse_prompts import prompts
    from research.flagship import load as load_pair
    pair = load_pair("cpu", args.draft)
    n = run(pair, prompts(), args.out, tuple(args.temperatures), args.tokens, args.limit)
    print(f"answered {n} prompt-temperature pairs into {args.out}")


if __name__ == "__main__":
    main()
