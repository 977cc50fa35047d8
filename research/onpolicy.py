"""Training replies written by the draft itself and scored by the teacher: on-policy distillation.

DistillSpec (Zhou et al. 2024, "DistillSpec: Improving Speculative Decoding via Knowledge
Distillation", ICLR) trains the draft on sequences it generated, with the target's distribution
at every position as the label, and found such student-written data gave the best acceptance
of the data sources it compared. Here it is also the cheaper source: on a CPU, sampling the
135M target is the slow part of the draft's data (research/RESULTS.md), while the draft writes a
reply in a fraction of the time and the teacher's top-K at every position of a fixed reply is
one batched forward (research.distill_smollm2.teacher_topk): about 1.5 times the fresh
positions an hour of sampling the target, on the dev CPU (research/RESULTS.md, "Replies written
by the draft"). The labels stay the teacher's exactly; only the prefixes come from the draft.

    MKL_CBWR=AVX512 python -m research.diverse_data --cache DIR --round 0 --pool typed --writer draft
"""
from __future__ import annotations

import time

import torch

from app.draft_vocab import DraftVocab
from research.distill_smollm2 import left_padded, reply_length, teacher_topk


@torch.inference_mode()
def draft_rows(draft, tok, prompt_rows: list[list[int]], temperature: float, seed: int,
               max_new: int) -> list[dict]:
    """The draft's sampled continuations of prompt rows (target ids), one left-padded generate
    call: [{"ids" LongTensor [L] target ids (prompt + reply, EOS included), "first"}]. A draft
    over part of the vocabulary (app.draft_vocab) reads draft rows and never proposes its extra
    "any other token" row, as when it drafts in the app."""
    from transformers import GenerationConfig
    vocab = DraftVocab.of(draft)
    to_rows = vocab.draft_input if vocab else (lambda t: t)                     # target ids -> draft rows
    to_ids = (lambda r: vocab.ids[r]) if vocab else (lambda r: r)               # draft rows -> target ids
    row = lambda i: int(to_rows(torch.tensor(i)))                               # noqa: E731
    cfg = GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new,
                           pad_token_id=row(tok.pad_token_id), eos_token_id=row(tok.eos_token_id),
                           suppress_tokens=[vocab.other] if vocab else None)
    ids, mask = left_padded(prompt_rows, tok.pad_token_id)                      # [b, width] target ids
    width = ids.shape[1]
    torch.manual_seed(seed)
    gen = draft.generate(input_ids=to_rows(ids), attention_mask=mask, generation_config=cfg)
    new = to_ids(gen[:, width:])                                                 # [b, n_new] target ids
    out = []
    for b, r in enumerate(prompt_rows):
        n = reply_length(new[b], tok.eos_token_id)
        out.append({"ids": torch.tensor(r + new[b, :n].tolist()), "first": len(r) - 1})
    return out


def scored_rows(draft, teacher, tok, prompt_rows: list[list[int]], temperature: float, batch: int, seed: int,
                deadline: float, max_new: int = 128) -> list[dict]:
    """research.distill_smollm2.sample_rows' examples (ids, first, the teacher's top-K at every
    reply position) with the draft writing the replies: `batch` prompts at a time, each batch
    written by the draft (seed + its offset) then scored by one teacher forward (teacher_topk),
    until `deadline` (the first batch always runs, as in sample_rows)."""
    out: list[dict] = []
    for i in range(0, len(prompt_rows), batch):
        if i and time.time() > deadline:
            print(f"  time cap: stopping after {i} prompts", flush=True)
            break
        written = draft_rows(draft, tok, prompt_rows[i:i + batch], temperature, seed + i, max_new)
        out += teacher_topk(teacher, written, batch, verbose=False)
        print(f"  draft at T={temperature}: {i + len(written)}/{len(prompt_rows)} prompts, "
              f"{sum(len(e['tk_ids']) for e in out):,} reply positions scored", flush=True)
    return out
