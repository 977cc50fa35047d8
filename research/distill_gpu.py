"""The flagship draft's GPU route: research/distill_smollm2.py's recipe in one run on a CUDA
device, where the target samples fresh replies instead of reading a cache.

    python -m research.distill_gpu --device cuda --out DIR                  # drafts in DIR/6x320 ...
    python -m research.distill_gpu --device cpu --data-minutes 0.2 ...      # the same steps, small
    python -m research.distill_gpu --device cuda --out DIR --pools typed typed2 typed3 typed4 \
        --resume demo_models/smollm2_draft --replay --corpus-windows 0 --corpus-per-batch 0 --lr 3e-4 --epochs 4

Why a second route: on the 2-thread CPU the draft is data-limited. It trains for 90 minutes on
replies cached once (~1M tokens, about 5 passes over them) and memorises them: its acceptance
bound is 0.65-0.68 on replies it trained on against 0.52 on new ones (research/RESULTS.md, "The draft memorises
its replies"). The issue allows more on a GPU; there the target answers faster than a draft can
learn, so this route samples new replies to all 11,690 training prompts (train, more and the four
wide rounds of research/prompts.py; never the held-out topics), round after round with new
seeds, until `--data-minutes` is spent, then trains each `--shapes` draft on the same batches for
at most `--epochs` passes over them or `--train-minutes`, whichever ends first.

With `--pools typed typed2 typed3 typed4 --resume DIR` it is instead the GPU form of the CPU fine-tunes
of issue 42 (research/RESULTS.md, the first to eleventh fine-tunes): the saved draft in DIR (its kept
vocabulary and weights) trains further on fresh replies to the typed pools' prompts
(research.typed_prompts; multi-turn ones answered twice, research.diverse_data.shard), round
after round with seeds of this route's own (pool_seed), checked on research.diverse_data's
held-out prompts; with `--replay` the replies its own run learned from go in too (replayed); its
final weights are saved (the parent's calibrated logit scale is divided back out before training,
research.distill_smollm2.unfold_scale: calibrate after, and let the realistic set decide).

Everything else is the CPU recipe's, by the same functions: replies() (T = 0.7, top-K from
generate's logits), corpus_windows(), the 48 held-out replies that choose the checkpoint
(HELDOUT_FOR_TRAINING), choose_vocab / make_draft (kept vocabulary, SVD-initialised tied
embeddings), train_step (forward KL to the teacher's top-K, here under CUDA bf16 autocast),
lr_at's schedule and save_draft (fp16, the target's tokenizer, train_log.json).
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from app.draft_vocab import DraftVocab
from research.distill_smollm2 import (HELDOUT_FOR_TRAINING, MORE_T, bound_key, broaden, calibrated_scale, choose_vocab,
                                      collate, corpus_windows, draft_shape, heldout_alpha, heldout_bounds,
                                      kept_coverage, lr_at, make_draft, replies, round_as_saved, save_draft,
                                      seen_sample, special_ids, train_step, unfold_scale, width_x_mlp)
from research.prompts import WIDE_LISTS, heldout_prompts, more_prompts, train_prompts, wide_prompts
from research.typed_prompts import POOL_DIRS

COMMAND = "python -m research.distill_gpu"
# What a GPU-route train_log.json's "command" starts with: logs written before the lab moved from
# demo_models/ to research/ record the module as it was then named.
LOGGED_COMMANDS = (COMMAND, "python -m demo_models.distill_gpu")


def training_prompts() -> list[str]:
    """Every prompt the CPU recipe can ask (train, more, wide rounds 0-3): 11,690 distinct ones,
    none of them a held-out topic (tests/research/test_distill_gpu.py)."""
    asked = train_prompts() + more_prompts() + [p for r in range(len(WIDE_LISTS)) for p in wide_prompts(r)]
    return list(dict.fromkeys(asked))


def sample_rounds(model, tok, prompts: list[str], batch: int, deadline: float) -> tuple[list[dict], int]:
    """(replies at T = MORE_T, rounds begun): every prompt answered once per round, in a new order
    and with new seeds each round, until the deadline (a round cut short keeps what it made)."""
    data, r = [], 0
    while time.time() < deadline:
        order = prompts[:]
        random.Random(100 + r).shuffle(order)
        data += replies(model, tok, order, MORE_T, batch, 20_000 + 100_000 * r, deadline)
        r += 1
    return data, r


def pool_seed(pool: str, r: int) -> int:
    """The seed of round `r` of a typed pool on this route: 1,000,000 x (the pool's place in
    research.diverse_data.POOLS + 1) + 10,000 r. Apart from every CPU round's (a pool's base +
    1000 x round + 100 T: under 200,000) and from each other for r < 100, with room for the
    batch offsets sample_rows adds (the batch's first row: under 10,000)."""
    from research.diverse_data import POOLS
    return 1_000_000 * (list(POOLS).index(pool) + 1) + 10_000 * r


def pool_rounds(model, tok, pools: list[str], batch: int, deadline: float) -> tuple[list[dict], int]:
    """(replies at T = MORE_T to every prompt of the typed `pools`, second turns included,
    rounds begun): pool after pool, round after round with pool_seed's seeds, until the deadline
    (a round cut short keeps what it made)."""
    from research.diverse_data import shard
    from research.typed_prompts import prompts as typed
    asked = {pool: typed(pool=pool) for pool in pools}
    data, r = [], 0
    while time.time() < deadline:
        for pool in pools:
            if time.time() < deadline:
                data += shard(model, tok, asked[pool], MORE_T, batch, pool_seed(pool, r), deadline)
        r += 1
    return data, r


def pool_heldout(model, tok, batch: int, n: int) -> list[dict]:
    """The replies that check a --pools run: the first `n` of research.diverse_data's held-out
    prompts (all 48 by default) answered as its --heldout does (T = 0.7, seed 99), never trained
    on by either route."""
    from research.diverse_data import shard, split
    from research.diverse_prompts import prompts
    return shard(model, tok, split(prompts())[1][:n], 0.7, batch, 99, float("inf"))


def replayed(model, parent: dict, batch: int) -> tuple[list[dict], dict]:
    """(the replies the resumed draft's own run learned from, {record name: replies}): each shard
    its log lists, rebuilt from its record in demo_models/smollm2_replies/ with the teacher's
    top-K by one forward pass (research.distill_smollm2.teacher_topk). The CPU fine-tunes mixed
    fresh replies with these; fresh ones alone did not pay there (research/RESULTS.md, "Fresh
    rounds alone")."""
    from research.distill_smollm2 import teacher_topk
    from research.teacher_record import load_record, record_path
    out, counts = [], {}
    for shard in parent["data"]["replies"]:
        part = teacher_topk(model, load_record(record_path(shard)), batch, verbose=False)
        out += part
        counts[Path(shard).stem] = len(part)
    return out, counts


def parse_shape(text: str) -> dict:
    """'6x320' -> draft_shape(width=320, layers=6)."""
    layers, width = (int(v) for v in text.lower().split("x"))
    return draft_shape(width, layers)


class Run:
    """One draft being trained: the model, its optimiser, and its best checkpoint so far."""

    def __init__(self, name: str, draft, lr: float):
        self.name, self.draft = name, draft
        self.opt = torch.optim.AdamW(draft.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95),
                                     fused=draft.device.type == "cuda")
        self.curve: list[dict] = []
        self.best = (-1.0, -1, None, {})  # (selecting bound, step, weights, its bounds)


def resumed(path: Path, device: str, lr: float) -> tuple[Run, dict]:
    """(a Run of the saved draft in `path`, named by its shape, in float32 on `device`, its
    calibrated logit scale divided back out (unfold_scale); its train log, which the new log keeps
    as "resumed_from")."""
    from transformers import AutoModelForCausalLM
    draft = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).train()
    log = json.loads((path / "train_log.json").read_text())
    unfold_scale(draft, log)
    name = f"{draft.config.num_hidden_layers}x{draft.config.hidden_size}"
    return Run(name, draft, lr), log


def check(run: Run, step: int, row: dict, held, seen, pad: int, sel: str) -> None:
    """Held-out bounds at T = 0.7 and 1 and the bound on training replies; keep the best weights."""
    bounds = heldout_bounds(run.draft, held, pad, (0.7, 1.0))
    row = {**row, **bounds, "seen_alpha_topk": heldout_alpha(run.draft, seen, pad)}
    if bounds[sel] > run.best[0]:
        run.best = (bounds[sel], step, {k: v.clone() for k, v in run.draft.state_dict().items()}, bounds)
    run.curve.append(row)
    print(f"  {run.name}", row, flush=True)


def train(runs: list[Run], data, corpus, held, seen, pad: int, args) -> int:
    """Train every run on the same batches, checking each on the held-out replies and on `seen`
    (training replies: seen_sample); returns the steps done."""
    vocab = DraftVocab.of(runs[0].draft)  # the same kept tokens for every shape
    steps = max(1, int(args.epochs * len(data) / args.batch))
    rng, t0, cap, sel = random.Random(args.seed), time.time(), args.train_minutes * 60, bound_key(1.0)
    print(f"training {[r.name for r in runs]}: at most {steps} steps ({args.epochs} epochs of {len(data)} "
          f"replies) or {args.train_minutes} minutes", flush=True)
    step = 0
    for step in range(steps):
        lr = lr_at(step, steps, time.time() - t0, cap, args.lr)
        batch = collate(rng.sample(data, args.batch) + rng.sample(corpus, args.corpus_per_batch), pad, vocab)
        for run in runs:
            for g in run.opt.param_groups:
                g["lr"] = lr
            loss, alpha = train_step(run.draft, run.opt, batch, args.bf16, args.tvd, args.tvd_temperature)
            if step % args.check_every == 0:
                check(run, step, {"step": step, "loss": round(loss.item(), 4),
                                  "alpha_topk": round(alpha.mean().item(), 4),
                                  "seconds": round(time.time() - t0, 1)}, held, seen, pad, sel)
        if time.time() - t0 > cap:
            break
    for run in runs:
        check(run, step + 1, {"step": step + 1, "seconds": round(time.time() - t0, 1)}, held, seen, pad, sel)
    return step + 1


def save(run: Run, tok, args, steps: int, log: dict, held: list[dict], seen: list[dict],
         parent: dict | None = None) -> None:
    """The run's best checkpoint by the held-out bound at T = 1 (the CPU recipe's choice), or,
    for a resumed draft (`parent`: its train log), its final weights (the CPU fine-tunes'
    --keep last), saved by save_draft in DIR/<name> with its curve, the data log and its bounds
    as saved (fp16)."""
    final = run.curve[-1]
    if parent is None:
        run.draft.load_state_dict(run.best[2])
        step, bounds = run.best[1], run.best[3]
    else:
        step, bounds = steps, {k: v for k, v in final.items() if k.startswith("heldout_alpha")}
    round_as_saved(run.draft)
    out = argparse.Namespace(**{**vars(args), "out": str(Path(args.out) / run.name)})
    save_draft(run.draft, tok, out, {
        "data": log, "steps_done": steps, "curve": run.curve, "saved_step": step, **bounds,
        "keep": "best" if parent is None else "last",
        "final_heldout_alpha_topk": final[bound_key(1.0)], "selected_by": bound_key(1.0),
        "as_saved": heldout_bounds(run.draft, held, tok.pad_token_id, (0.7, 1.0)),
        "seen_alpha_topk": heldout_alpha(run.draft, seen, tok.pad_token_id),  # the saved checkpoint's
        "seen_replies": len(seen), "heldout_kept_coverage": log["heldout_kept_coverage"],
        "distill_temperature": 1.0, "tvd": args.tvd, "tvd_temperature": args.tvd_temperature,
        "autocast": "bf16" if args.bf16 else None, "seconds": log["train_seconds"],
        **({"resumed_from": parent, "unfolded_scale": calibrated_scale(parent)} if parent is not None else {})},
        command=COMMAND)


def main(argv=None) -> None:
    args = parse_args(argv)
    from app.gguf import find_smollm2_gguf, load_gguf_model
    from app.hardware import device_info
    t0 = time.time()
    torch.manual_seed(args.seed)
    teacher, tok = load_gguf_model(find_smollm2_gguf(), args.device, torch.float32, progress=print)
    if args.pools:
        held = pool_heldout(teacher, tok, args.gen_batch, args.heldout)
    else:
        held = replies(teacher, tok, heldout_prompts()[:args.heldout], 0.7, args.gen_batch, 99, float("inf"))
    texts = [Path(p).read_text(encoding="utf-8") for p in args.corpus] if args.corpus_windows else []
    corpus = corpus_windows(teacher, tok, texts, args.corpus_windows, args.gen_batch // 2, 7) if texts else []
    t_data, deadline = time.time(), time.time() + args.data_minutes * 60
    if args.pools:
        data, rounds = pool_rounds(teacher, tok, args.pools, args.gen_batch, deadline)
    else:
        data, rounds = sample_rounds(teacher, tok, training_prompts(), args.gen_batch, deadline)
    log = {"device": device_info(args.device)["name"],
           "teacher": "SmolLM2-135M-Instruct Q4_1 GGUF, dequantised, float32", "rounds_begun": rounds,
           "prompts": args.pools or "templates", "replies": len(data),
           "reply_tokens": sum(len(e["tk_ids"]) for e in data),
           "sample_seconds": round(time.time() - t_data, 1), "setup_seconds": round(t_data - t0, 1),
           "heldout_examples": len(held), "corpus_windows": len(corpus), "temperature": MORE_T}
    print("data:", log, flush=True)
    runs, parent = start_runs(args, teacher, tok, data + corpus)
    if args.replay:
        old, log["replayed"] = replayed(teacher, parent, args.gen_batch)
        data += old
    log["heldout_kept_coverage"] = kept_coverage(DraftVocab.of(runs[0].draft), held)  # the same for every run
    del teacher
    t_train = time.time()
    seen = seen_sample(data, len(held), args.seed)
    steps = train(runs, data, corpus, held, seen, tok.pad_token_id, args)
    log["train_seconds"] = round(time.time() - t_train, 1)
    for run in runs:
        save(run, tok, args, steps, log, held, seen, parent)


def start_runs(args, teacher, tok, examples: list[dict]) -> tuple[list[Run], dict | None]:
    """(the drafts to train, the resumed draft's train log or None): with --resume the saved
    draft, and with --broaden beside it a wider copy (broaden: the same function to start with,
    so the two differ only by capacity on the same batches), else a new draft of each --shapes
    over the vocabulary choose_vocab keeps."""
    if args.resume:
        run, parent = resumed(Path(args.resume), args.device, args.lr)
        if not args.broaden:
            return [run], parent
        wide = broaden(run.draft, *args.broaden).to(args.device).train()
        return [run, Run(f"{wide.config.num_hidden_layers}x{wide.config.hidden_size}", wide, args.lr)], parent
    kept = choose_vocab(examples, special_ids(tok))
    embedding = teacher.get_input_embeddings().weight.detach().cpu()
    return [Run(f"{s['num_hidden_layers']}x{s['hidden_size']}", make_draft(teacher.config, embedding, kept, s)
                .to(args.device), args.lr) for s in map(parse_shape, args.shapes)], None


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True, help="a folder: each draft is saved in OUT/<layers>x<width>")
    ap.add_argument("--shapes", nargs="+", default=["6x320", "6x384"], help="drafts as LAYERSxWIDTH")
    ap.add_argument("--data-minutes", type=float, default=2.5, help="time for sampling replies")
    ap.add_argument("--train-minutes", type=float, default=3.0)
    ap.add_argument("--epochs", type=float, default=6.0, help="passes over the replies at most")
    ap.add_argument("--gen-batch", type=int, default=768, help="prompts per generate call")
    ap.add_argument("--batch", type=int, default=256, help="replies per training step")
    ap.add_argument("--corpus-per-batch", type=int, default=64)
    ap.add_argument("--corpus-windows", type=int, default=4096)
    ap.add_argument("--corpus", nargs="+", default=["../shared/corpus/austen.txt",
                                                    "../shared/corpus/tinyshakespeare.txt"])
    ap.add_argument("--heldout", type=int, default=HELDOUT_FOR_TRAINING)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--check-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--pools", nargs="+", choices=list(POOL_DIRS), default=[],
                    help="sample the typed pools' prompts (research.typed_prompts) instead of the templates")
    ap.add_argument("--resume", help="train this saved draft further (its directory; --shapes unused) "
                                     "and save its final weights")
    ap.add_argument("--replay", action="store_true", help="with --resume: also learn from the replies the "
                    "resumed draft's own run learned from (replayed: rebuilt from their records)")
    ap.add_argument("--tvd", type=float, default=0.0, help="weight of the rejection-rate term beside the "
                    "cross-entropy, as distill_smollm2 train --tvd (the fifteenth CPU fine-tune's: 1.0)")
    ap.add_argument("--tvd-temperature", type=float, default=0.7)
    ap.add_argument("--broaden", type=width_x_mlp, metavar="WIDTHxMLP",
                    help="with --resume: also train a wider copy of the draft (e.g. 384x1024) on the same batches")
    args = ap.parse_args(argv)
    if args.broaden and not args.resume:
        ap.error("--broaden needs --resume (it widens the resumed draft)")
    if args.replay and not args.resume:
        ap.error("--replay needs --resume (it replays the resumed draft's own replies)")
    if args.corpus_per_batch and not args.corpus_windows:
        ap.error("--corpus-per-batch needs corpus windows (--corpus-windows > 0)")
    return args


if __name__ == "__main__":
    main()
