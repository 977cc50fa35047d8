"""Train the embedded draft/target pair from plain UTF-8 text.

    python -m research.train --corpus ../shared/corpus/austen.txt ../shared/corpus/tinyshakespeare.txt

Pipeline: byte-level BPE tokenizer -> Llama-style target (cross-entropy) -> Llama-style draft
distilled from the target (forward KL to the target's next-token distribution) -> save both as
ordinary Hugging Face model directories -> `research.evaluate`.

Everything is seeded; the log (loss curves, times, device, command) goes to `train_log.json`
next to the models so the model card can quote it.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from app.assets import TINY_DIR
from research.compact import compact_tokenizer

EOS = "<|endoftext|>"
VOCAB_SIZE = 4096
SEQ_LEN = 256
CONTEXT = 1024  # max_position_embeddings of both models
HELDOUT_FRACTION = 0.05  # the last 5% of every corpus file is held out for evaluation

# Shapes chosen for a 2-core CPU (measured in the model card): a wide, shallow target does more
# arithmetic per layer of Python overhead; the draft is as small as still drafts usefully.
TARGET_SHAPE = dict(hidden_size=384, num_hidden_layers=5, num_attention_heads=12,
                    num_key_value_heads=12, intermediate_size=1024)
# One layer: a 2-layer draft distilled from this target came within 6% of its perplexity (58.3
# vs 62.2), which teaches nothing; one layer keeps alpha high and halves the draft's cost.
DRAFT_SHAPE = dict(hidden_size=128, num_hidden_layers=1, num_attention_heads=4,
                   num_key_value_heads=4, intermediate_size=384)


def build_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Byte-level BPE: every Unicode string maps to tokens, so there is no unknown token."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS,
                                   unk_token=None, pad_token=EOS, model_max_length=CONTEXT)


def encode_split(tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of the training and held-out parts, each a flat LongTensor [n_tokens]."""
    train, heldout = [], []
    for text in texts:
        cut = int(len(text) * (1 - HELDOUT_FRACTION))
        train += tokenizer(text[:cut])["input_ids"] + [tokenizer.eos_token_id]
        heldout += tokenizer(text[cut:])["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(train), torch.tensor(heldout)


def make_model(shape: dict, tokenizer) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=CONTEXT,
                         tie_word_embeddings=True, bos_token_id=tokenizer.eos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id,
                         rope_theta=10000.0, **shape)
    return LlamaForCausalLM(config)


def batches(data: torch.Tensor, batch: int, gen: torch.Generator):
    """Endless random windows of SEQ_LEN + 1 tokens: [batch, SEQ_LEN + 1]."""
    while True:
        starts = torch.randint(0, len(data) - SEQ_LEN - 1, (batch,), generator=gen)
        yield torch.stack([data[s:s + SEQ_LEN + 1] for s in starts])


def lr_at(step: int, steps: int, peak: float, warmup: int = 50) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def heldout_loss(model, heldout: torch.Tensor, device: str, max_windows: int = 64) -> float:
    """Mean next-token cross-entropy over non-overlapping held-out windows."""
    model.eval()
    n = min(max_windows, (len(heldout) - 1) // SEQ_LEN)
    losses = []
    for i in range(n):
        x = heldout[i * SEQ_LEN:(i + 1) * SEQ_LEN + 1].to(device)[None]  # [1, SEQ_LEN + 1]
        losses.append(model(input_ids=x[:, :-1], labels=x[:, :-1]).loss.item())
    model.train()
    return sum(losses) / len(losses)


def train(model, data, heldout, *, steps, batch, lr, device, seed, teacher=None,
          max_minutes=None, log_every=25) -> dict:
    """Train `model` by cross-entropy, or by KL to `teacher` when one is given.

    Distillation loss: KL(p_target || q_draft) over every position, the quantity whose
    complement sum_x min(p, q) is the acceptance rate (Leviathan et al. 2023, Sec. 3).
    """
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, betas=(0.9, 0.95))
    model.to(device).train()
    curve, start = [], time.time()
    for step, xb in zip(range(steps), batches(data, batch, gen)):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr)
        xb = xb.to(device)  # [batch, SEQ_LEN + 1]
        logits = model(input_ids=xb[:, :-1]).logits  # [batch, SEQ_LEN, vocab]
        if teacher is None:
            loss = F.cross_entropy(logits.flatten(0, 1), xb[:, 1:].flatten())
        else:
            with torch.no_grad():
                p_target = F.softmax(teacher(input_ids=xb[:, :-1]).logits, dim=-1)
            loss = F.kl_div(F.log_softmax(logits, -1).flatten(0, 1), p_target.flatten(0, 1),
                            reduction="batchmean")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        elapsed = time.time() - start
        if step % log_every == 0 or step == steps - 1:
            curve.append({"step": step, "loss": round(loss.item(), 4), "seconds": round(elapsed, 1)})
            print(f"  step {step:5d}/{steps}  loss {loss.item():.4f}  {elapsed:6.0f}s", flush=True)
        if max_minutes and elapsed > max_minutes * 60:
            print(f"  stopping at the {max_minutes}-minute cap after {step + 1} steps", flush=True)
            break
    model.eval()
    return {"steps_done": step + 1, "steps_planned": steps, "batch": batch, "seq_len": SEQ_LEN,
            "peak_lr": lr, "tokens_seen": (step + 1) * batch * SEQ_LEN,
            "seconds": round(time.time() - start, 1), "curve": curve,
            "heldout_loss": round(heldout_loss(model, heldout, device), 4)}


def save(model, tokenizer, out: Path) -> None:
    """Weights in fp16 on disk (half the bytes; the loaders cast to the run dtype, app.models).
    The model is left rounded the same way, in fp32 on the CPU, so what is distilled from and
    evaluated after saving is exactly what ships."""
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").half().save_pretrained(out)
    model.float()
    tokenizer.save_pretrained(out)
    compact_tokenizer(out)
    # tokenizers-library tokenizers save as "TokenizersBackend"; PreTrainedTokenizerFast loads
    # in more transformers versions (../shared/DESIGN.md, gotchas).
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


def stage_one(args, texts, command):
    """Tokenizer and target, trained and saved."""
    t0 = time.time()
    tokenizer = build_tokenizer(texts)
    data, heldout = encode_split(tokenizer, texts)
    print(f"tokenizer: {len(tokenizer)} entries; {len(data):,} training / {len(heldout):,} held-out tokens")
    log = {"command": command, "device": args.device, "seed": args.seed, "torch": torch.__version__,
           "threads": torch.get_num_threads(), "corpus": [Path(p).name for p in args.corpus],
           "train_tokens": len(data), "heldout_tokens": len(heldout),
           "tokenizer_seconds": round(time.time() - t0, 1)}
    target = make_model(TARGET_SHAPE, tokenizer)
    print(f"target: {target.num_parameters():,} parameters")
    log["target"] = train(target, data, heldout, steps=args.target_steps, batch=args.batch, lr=2e-3,
                          device=args.device, seed=args.seed, max_minutes=args.max_minutes)
    save(target, tokenizer, args.out / "target")
    return target, tokenizer, data, heldout, log


def load_stage_one(out: Path, command: str):
    """The tokenizer and target a previous run saved in `out`, and that run's log."""
    from transformers import AutoTokenizer
    log = json.loads((out / "train_log.json").read_text())
    log["stage_one_seconds"] = log["total_seconds"] - log["draft"]["seconds"]
    log["draft_command"] = command
    tokenizer = AutoTokenizer.from_pretrained(out / "target")
    target = LlamaForCausalLM.from_pretrained(out / "target", dtype=torch.float32).eval()
    print(f"reusing the target in {out / 'target'} ({target.num_parameters():,} parameters)")
    return target, tokenizer, log


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", nargs="+", required=True, help="UTF-8 text files")
    ap.add_argument("--out", type=Path, default=TINY_DIR)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--target-steps", type=int, default=800)
    ap.add_argument("--draft-steps", type=int, default=700)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-minutes", type=float, default=40.0,
                    help="cap per model, so a slow or busy CPU still finishes within 90 minutes")
    ap.add_argument("--skip-eval", action="store_true")
    ap.add_argument("--reuse-target", action="store_true",
                    help="keep the tokenizer and target already in --out; train only the draft")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    texts = [Path(p).read_text(encoding="utf-8") for p in args.corpus]
    command = "python -m research.train " + " ".join(sys.argv[1:] if argv is None else argv)
    t0 = time.time()
    if args.reuse_target:
        target, tokenizer, log = load_stage_one(args.out, command)
        data, heldout = encode_split(tokenizer, texts)
    else:
        target, tokenizer, data, heldout, log = stage_one(args, texts, command)
    torch.manual_seed(args.seed + 1)  # the draft's init does not depend on stage one's RNG use
    draft = make_model(DRAFT_SHAPE, tokenizer)
    print(f"draft: {draft.num_parameters():,} parameters, distilled from the target")
    log["draft"] = train(draft, data, heldout, steps=args.draft_steps, batch=args.batch, lr=3e-3,
                         device=args.device, seed=args.seed + 1, teacher=target.to(args.device),
                         max_minutes=args.max_minutes)
    save(draft, tokenizer, args.out / "draft")
    log["target"]["parameters"], log["draft"]["parameters"] = target.num_parameters(), draft.num_parameters()
    log["total_seconds"] = round(log.get("stage_one_seconds", 0) + time.time() - t0, 1)
    (args.out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(f"saved to {args.out} in {log['total_seconds']:.0f}s")
    if not args.skip_eval:
        from research import evaluate
        evaluate.main(["--corpus", *args.corpus, "--device", args.device])


if __name__ == "__main__":
    main()
