"""Distil a feature draft (app/feature_draft.py, EAGLE) for the flagship target, SmolLM2-135M.

    MKL_CBWR=AVX512 python -m research.distill_smollm2 data   # the target's replies, top-K
    MKL_CBWR=AVX512 python -m research.features_smollm2       # ...and its features F, cached
    MKL_CBWR=AVX512 python -m research.distill_features       # the head, time-capped
    MKL_CBWR=AVX512 python -m research.evaluate --pair smollm2 --draft DIR --fast --draft-int8

The head (saved to <speclab cache>/smollm2-feature-draft unless --out says otherwise; it is not
shipped, see below): --layers Llama decoder layers of the target's width (576), the target's
first layers as their start, over the DRAFT_VOCAB tokens the token draft keeps
(app/draft_vocab.py). Its tied embedding is the target's own rows of those tokens and stays
frozen, so its output layer is the target's; its final norm starts as the target's. Trained are
the projection of F, the layers and the final norm, by the token draft's loss (cross-entropy to
the teacher's top-K restricted to the kept tokens: forward KL up to a constant; Leviathan et
al.'s acceptance is sum min(p, q)) plus EAGLE's feature regression (smooth L1 between the head's
final-normed output and the target's F at the same position). Noise on the input features
(EAGLE adds uniform noise) trains it for the later drafted tokens, which see its own predictions
instead of F. The checkpoint with the best held-out alpha bound on the heldout.pt prompts (the
first HELDOUT_FOR_TRAINING held-out prompts) is saved in fp16.

Measured on the 2-core dev CPU (research/RESULTS.md, "A feature draft
(EAGLE)"): one layer, 55 minutes, 2,838 steps on the previous token draft's 6,316 replies:
held-out top-32 bound 0.472 at T = 1 (that draft: 0.497 in 90 min; 0.400 against 0.456 at
step 1,000), 0.504 at T = 0.7, and 0.338 at T = 0.7 when fed
its own features. With int8 weights its pass costs half the token draft's (c = 0.019), but
the drafts after the first are seldom accepted (greedy: 0.56 of drafts at gamma 1, 0.27 at
gamma 3), so its best speed-ups, 1.59x greedy and 1.47x at T = 0.7 (both gamma 1), stay below
that token draft's 1.66x and 1.52x (the shipped one, since 1 December, learned
from 2,255 more replies too: research/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from app.draft_vocab import DraftVocab
from app.feature_draft import head_inputs, one_back, save_head
from research.distill_smollm2 import (DRAFT_VOCAB, TOP_K, cache_dir, choose_vocab, cpu_has_bf16, kept_ce,
                                      load_teacher, lr_at, reply_files, tempered_alpha)

SHARDS = reply_files([0.7, 1.0])  # the previous token draft's replies (the head was measured on them: below)


def make_head(teacher, kept: list[int], layers: int = 1):
    """A one-layer LlamaForCausalLM over the kept tokens (+ the extra input row) with the
    target's width, embedding rows, first layer and final norm; model.feature_proj [576, 576]."""
    from transformers import LlamaConfig, LlamaForCausalLM
    tc = teacher.config
    vocab = DraftVocab(kept, tc.vocab_size, "cpu")
    special = {k: int(vocab.to_draft[getattr(tc, k)]) for k in ("bos_token_id", "eos_token_id", "pad_token_id")
               if getattr(tc, k, None) is not None}
    cfg = LlamaConfig(vocab_size=len(kept) + 1, hidden_size=tc.hidden_size, num_hidden_layers=layers,
                      num_attention_heads=tc.num_attention_heads, num_key_value_heads=tc.num_key_value_heads,
                      head_dim=tc.hidden_size // tc.num_attention_heads, intermediate_size=tc.intermediate_size,
                      rms_norm_eps=tc.rms_norm_eps, max_position_embeddings=tc.max_position_embeddings,
                      rope_parameters=dict(tc.rope_parameters), tie_word_embeddings=True,
                      feature_draft=True, draft_vocab_ids=kept, target_vocab_size=tc.vocab_size, **special)
    head = LlamaForCausalLM(cfg)
    emb = teacher.get_input_embeddings().weight.detach().float()                # [V, 576]
    with torch.no_grad():
        rows = emb[vocab.ids]
        head.get_input_embeddings().weight.copy_(torch.cat([rows, rows.mean(0, keepdim=True)]))
        for i, layer in enumerate(head.model.layers):
            layer.load_state_dict(teacher.model.layers[i].state_dict())
        head.model.norm.weight.copy_(teacher.model.norm.weight)
    head.get_input_embeddings().weight.requires_grad_(False)  # tied: the target's output rows
    head.feature_proj = torch.nn.Linear(tc.hidden_size, tc.hidden_size, bias=False)
    torch.nn.init.zeros_(head.feature_proj.weight)  # starts as the target's layer 0 on tokens alone
    return head


def load_examples(src: Path, shards: list[str]) -> list[dict]:
    """The cached examples of `shards` with their features (features_smollm2) as "F" [L, 576]."""
    out = []
    for shard in shards:
        feats = src / f"features_{shard}"
        if not feats.is_file():
            sys.exit(f"no {feats.name} in {src}: run python -m research.features_smollm2 first")
        out += [dict(e, F=f) for e, f in zip(torch.load(src / shard), torch.load(feats))]
    return out


def feature_scale(examples: list[dict]) -> torch.Tensor:
    """Per-dimension RMS of F over the examples' positions [d]. The head's input is F / scale
    while training (a few of SmolLM2's 576 dimensions are tens of times larger than the rest,
    and Adam moves every weight by about the same step, so unscaled they would drown the
    others); save() folds 1 / scale into the projection, so decoding feeds F as it is."""
    f = torch.cat([e["F"] for e in examples]).float()                            # [positions, d]
    return f.pow(2).mean(0).sqrt().clamp_min(1e-3)


def collate(examples: list[dict], pad: int, vocab: DraftVocab, scale: torch.Tensor | None = None):
    """Right-padded draft rows [b, L], mask [b, L], F one position back [b, L, d] (zeros at 0;
    divided by `scale` when given), the flat target positions [n], F there [n, d], the
    teacher's top-K rows / probs [n, TOP_K]."""
    width, d = max(len(e["ids"]) for e in examples), examples[0]["F"].shape[1]
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    f_prev = torch.zeros(len(examples), width, d)
    f_all = torch.zeros(len(examples), width, d)
    pos, tk_ids, tk_lp = [], [], []
    for b, e in enumerate(examples):
        n_ids = len(e["ids"])
        ids[b, :n_ids], mask[b, :n_ids] = e["ids"], 1
        f_all[b, :n_ids] = e["F"].float()
        f_prev[b, 1:n_ids] = f_all[b, :n_ids - 1]
        n = min(len(e["tk_ids"]), n_ids - e["first"])
        pos.append(b * width + e["first"] + torch.arange(n))
        tk_ids.append(e["tk_ids"][:n].long())
        tk_lp.append(e["tk_lp"][:n].float())
    pos = torch.cat(pos)
    if scale is not None:
        f_prev = f_prev / scale
    return (vocab.draft_input(ids), mask, f_prev, pos, f_all.flatten(0, 1)[pos],
            vocab.draft_input(torch.cat(tk_ids)), torch.cat(tk_lp).softmax(-1))


def head_out(head, rows, mask, f_prev, pos) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits over the kept tokens [n, K], predicted F [n, d]) at the target positions."""
    h = head.model(inputs_embeds=head_inputs(head, rows, f_prev), attention_mask=mask).last_hidden_state
    h = h.flatten(0, 1)[pos]                                                    # [n, d]
    return head.lm_head(h).float()[:, :-1], h.float()


def loss_of(head, batch, reg: float, noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy to the teacher's kept top-K + reg * smooth L1 to F; the per-position alpha
    bound at T = 1 [n]. noise: Gaussian noise on the input features, in units of their RMS."""
    rows, mask, f_prev, pos, f_true, tk_rows, p_target = batch
    if noise > 0:
        f_prev = f_prev + noise * f_prev.pow(2).mean().sqrt() * torch.randn_like(f_prev)
    logits, f_hat = head_out(head, rows, mask, f_prev, pos)
    loss, alpha = kept_ce(logits, tk_rows, p_target)
    return loss + reg * F.smooth_l1_loss(f_hat, f_true), alpha


@torch.no_grad()
def heldout_alpha(head, held: list[dict], pad: int, temperature: float, own: bool = False,
                  scale: torch.Tensor | None = None) -> float:
    """The held-out alpha bound at `temperature`, first drafted token (true features): mean over
    reply positions of sum over the teacher's kept top-K of min(p_T, q_T). own=True: every
    position fed the head's own predicted features instead (a pessimistic stand-in for later
    drafted tokens, which see one prediction after true features)."""
    head.eval()
    vocab, sums = DraftVocab.of(head), []
    for i in range(0, len(held), 8):
        rows, mask, f_prev, pos, _, tk_rows, p_target = collate(held[i:i + 8], pad, vocab, scale)
        if own:
            h = head.model(inputs_embeds=head_inputs(head, rows, f_prev), attention_mask=mask).last_hidden_state
            f_prev = one_back(h) if scale is None else one_back(h) / scale             # [b, L, d]
        sums.append(tempered_alpha(p_target, head_out(head, rows, mask, f_prev, pos)[0], tk_rows, temperature))
    head.train()
    return round(torch.cat(sums).mean().item(), 4)


def train(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    src = cache_dir(args.cache)
    data, held = load_examples(src, args.shards), load_examples(src, ["heldout.pt"])
    teacher, tok = load_teacher()
    special = sorted({i for i in tok.all_special_ids} | {tok.bos_token_id, tok.eos_token_id, tok.pad_token_id})
    head = make_head(teacher, choose_vocab(data, special, DRAFT_VOCAB), args.layers)
    del teacher
    pad, vocab = tok.pad_token_id, DraftVocab.of(head)
    trained = [p for p in head.parameters() if p.requires_grad]
    print(f"head: {head.num_parameters():,} parameters ({sum(p.numel() for p in trained):,} trained); "
          f"{len(data)} replies", flush=True)
    scale = feature_scale(data[:500]) if args.standardise else None
    opt = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    rng, t0, curve, cap = random.Random(args.seed), time.time(), [], args.max_minutes * 60
    best = (-1.0, -1, None)
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, time.time() - t0, cap, args.lr)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss, alpha = loss_of(head, collate(rng.sample(data, args.batch), pad, vocab, scale), args.reg, args.noise)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        last = time.time() - t0 > cap or step == args.steps - 1 or step + 1 == args.stop_at
        if step % 25 == 0 or last:
            row = {"step": step, "loss": round(loss.item(), 4), "alpha_topk": round(alpha.mean().item(), 4),
                   "seconds": round(time.time() - t0, 1)}
            if step % 100 == 0 or last:
                row["heldout_alpha_topk"] = heldout_alpha(head, held, pad, 1.0, scale=scale)
                row["heldout_alpha_topk_T0.7"] = heldout_alpha(head, held, pad, 0.7, scale=scale)
                row["heldout_alpha_topk_T0.7_own_features"] = heldout_alpha(head, held, pad, 0.7, True, scale)
                if row["heldout_alpha_topk"] > best[0]:
                    best = (row["heldout_alpha_topk"], step, {k: v.clone() for k, v in head.state_dict().items()})
            curve.append(row)
            print("  ", row, flush=True)
        if last:
            break
    head.load_state_dict(best[2])
    if scale is not None:  # decoding feeds F itself: W (F / scale) = (W / scale) F
        with torch.no_grad():
            head.feature_proj.weight.div_(scale)
    save(head, tok, args, {"steps_done": step + 1, "curve": curve, "saved_step": best[1],
                           "heldout_alpha_topk": best[0], "seconds": round(time.time() - t0, 1),
                           "shards": args.shards, "replies": len(data)})


def save(head, tok, args, log: dict) -> None:
    from app.gguf import cache_root
    out = Path(args.out) if args.out else cache_root() / "smollm2-feature-draft"
    save_head(head.eval(), tok, out)
    log.update(command="python -m research.distill_features " + " ".join(sys.argv[1:]),
               parameters=head.num_parameters(), torch=torch.__version__, threads=torch.get_num_threads(),
               batch=args.batch, peak_lr=args.lr, reg=args.reg, noise=args.noise, top_k=TOP_K,
               standardise=args.standardise, layers=args.layers,
               draft_vocab=len(head.config.draft_vocab_ids), autocast="bf16" if args.bf16 else None)
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(f"saved the head to {out}: held-out alpha (top-{TOP_K} bound, T=1) {log['heldout_alpha_topk']}")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", help="teacher-output directory (default: <speclab cache>/smollm2-teacher)")
    ap.add_argument("--out", help="where to save the head (default: <speclab cache>/smollm2-feature-draft)")
    ap.add_argument("--shards", nargs="+", default=SHARDS)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--reg", type=float, default=1.0, help="weight of the feature regression")
    ap.add_argument("--noise", type=float, default=0.1, help="input-feature noise, in units of their RMS")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-minutes", type=float, default=60.0)
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=cpu_has_bf16(),
                    help="bf16 autocast; default: whether oneDNN has bf16 kernels for this CPU "
                    "(distill_smollm2.cpu_has_bf16)")
    ap.add_argument("--standardise", action=argparse.BooleanOptionalAction, default=True,
                    help="train on F / its per-dimension RMS (feature_scale)")
    ap.add_argument("--layers", type=int, default=1, help="decoder layers (the target's first ones to start)")
    ap.add_argument("--stop-at", type=int, default=0,
                    help="stop after this many steps, the schedule unchanged (quick comparisons)")
    return ap.parse_args(argv)


if __name__ == "__main__":
    train(parse_args())
