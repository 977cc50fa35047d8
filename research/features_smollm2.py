"""The target's features for a feature-level draft (EAGLE, Li et al. 2024, arXiv 2401.15077).

    MKL_CBWR=AVX512 python -m research.features_smollm2 [--shards replies_T0.7.pt ...]

For every example the distill_smollm2 data stage cached (its ids: prompt + the target's reply),
one prefill pass of the target gives F [L, 576]: the final-normed hidden state at each position,
the vector its output layer turns into the next-token logits. Saved beside the examples as
features_<shard>.pt (fp16, one [L, 576] tensor per example, same order), so training never runs
the target. One fp32 pass, no sampling: ~700 tokens/s on the 2-core dev CPU.
"""
from __future__ import annotations

import argparse
import time

import torch

from research.distill_features import SHARDS
from research.distill_smollm2 import cache_dir, load_teacher

DEFAULT_SHARDS = ["heldout.pt", *SHARDS]  # what distill_features reads by default


@torch.inference_mode()
def features(model, examples: list[dict], batch_tokens: int = 1536) -> list[torch.Tensor]:
    """F [L, hidden] fp16 per example: model.model(ids).last_hidden_state (after the final norm).
    Examples are batched by length, right-padded (causal attention: padding never leaks back)."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i]["ids"]))
    out: list[torch.Tensor | None] = [None] * len(examples)
    i = 0
    while i < len(order):
        width = len(examples[order[min(len(order) - 1, i + 7)]]["ids"])
        group = order[i:i + max(1, batch_tokens // width)]
        width = max(len(examples[g]["ids"]) for g in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)                # [b, width]
        mask = torch.zeros_like(ids)
        for b, g in enumerate(group):
            n = len(examples[g]["ids"])
            ids[b, :n], mask[b, :n] = examples[g]["ids"], 1
        h = model.model(input_ids=ids, attention_mask=mask).last_hidden_state  # [b, width, hidden]
        for b, g in enumerate(group):
            out[g] = h[b, :len(examples[g]["ids"])].to(torch.float16).clone()
        i += len(group)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", help="teacher-output directory (default: <speclab cache>/smollm2-teacher)")
    ap.add_argument("--shards", nargs="+", default=DEFAULT_SHARDS)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    src = cache_dir(args.cache)
    model, _ = load_teacher()
    model.eval()
    for shard in args.shards:
        dest = src / f"features_{shard}"
        if dest.is_file():
            print(f"  reusing {dest}", flush=True)
            continue
        t0, examples = time.time(), torch.load(src / shard)
        feats = features(model, examples)
        torch.save(feats, dest)
        n = sum(len(e["ids"]) for e in examples)
        print(f"  {shard}: {len(examples)} examples, {n:,} tokens in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
