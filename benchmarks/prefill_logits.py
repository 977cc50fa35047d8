"""What skipping the output layer saves a prefill. The engine's prefills (target and draft) fill
the KV cache and read no logits, so they run app.models.fill_cache instead of a forward. This
prints, side by side in one run, a prompt's prefill with logits (forward) and without
(fill_cache) on the fast path's lean decoder and eagerly, rounds interleaved so that background
load hits both alike, and their ratio.

    python benchmarks/prefill_logits.py [--model smollm2|tiny] [--tokens 37 128] [--rounds 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from app.models import fill_cache, forward, new_cache  # noqa: E402
from cpu_few_rows import load_target  # noqa: E402  (this folder: the script's own)


@torch.inference_mode()
def seconds(run, model, ids: torch.Tensor, fast: bool) -> float:
    cache = new_cache(model, ids.shape[1]) if fast else new_cache()
    start = time.perf_counter()
    run(model, ids, cache)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    ap.add_argument("--tokens", type=int, nargs="+", default=[37, 128])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    model = load_target(args.model)
    vocab = model.config.vocab_size
    runs = {"forward": forward, "fill_cache": fill_cache}
    print(f"{args.model} target, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"ISA {torch.backends.cpu.get_cpu_capability()}; median of {args.rounds} rounds (ms)")
    print(f"{'path':>6} {'tokens':>6} | {'forward':>8} | {'fill_cache':>10} | ratio")
    for fast, path in ((True, "lean"), (False, "eager")):
        for n in args.tokens:
            ids = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n))
            times = {k: [] for k in runs}
            for r in range(args.rounds + 1):  # the first round warms up
                for name, run in runs.items():
                    t = seconds(run, model, ids, fast)
                    if r:
                        times[name].append(t)
            a, b = (statistics.median(times[k]) * 1e3 for k in runs)
            print(f"{path:>6} {n:>6} | {a:8.1f} | {b:10.1f} | {a / b:5.2f}", flush=True)


if __name__ == "__main__":
    main()
