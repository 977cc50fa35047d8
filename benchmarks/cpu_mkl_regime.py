"""Does this CPU hide the knee? Small matrix products and speculative speedup, with and without
MKL's widest code path for this CPU forced (MKL_CBWR=AVX512, or AVX2 on a CPU without AVX-512:
app.cpu_regime.suggested_cbwr; Intel MKL's documented Conditional Numerical Reproducibility
setting).

On some AMD CPUs the MKL inside torch runs fp32 matrix products with more than one row on a slow
generic path (shared/anchors/cpu_smollm2.md): a verify pass of gamma + 1 tokens then costs far
more than one token, and speculative decoding gains little. MKL_CBWR must be set before torch
starts, so each setting runs in its own subprocess; rounds alternate between them.

    python benchmarks/cpu_mkl_regime.py [--rounds 3] [--tokens 96]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.cpu_regime import suggested_cbwr  # noqa: E402

FORCED = suggested_cbwr() or "AVX2"
SETTINGS = {"default": {}, f"MKL_CBWR={FORCED}": {"MKL_CBWR": FORCED}}

CHILD = r"""
import json, sys, time, torch
from transformers.utils import logging; logging.disable_progress_bar()
from app.models import load_pair
from app.engine import DecodeSettings, speculative_generate, autoregressive_generate
tokens = int(sys.argv[1])
W = torch.randn(1024, 384)
def us(m, reps=300):
    x = torch.randn(m, 384)
    for _ in range(20): torch.nn.functional.linear(x, W)
    t = time.perf_counter()
    for _ in range(reps): torch.nn.functional.linear(x, W)
    return (time.perf_counter() - t) / reps * 1e6
out = {"gemm_us": {m: us(m) for m in (1, 2, 4, 8)}}
pair = load_pair()
prompts = [pair.tokenizer(p)["input_ids"] for p in
           ("It is a truth universally acknowledged, that", "ROMEO:\nBut soft", "Emma Woodhouse, handsome,")]
for temperature in (0.0, 0.7):
    for gamma in (0, 2, 4):
        s = DecodeSettings(gamma=max(gamma, 1), temperature=temperature, max_new_tokens=tokens)
        gen = speculative_generate if gamma else autoregressive_generate
        start = time.perf_counter()
        n = sum(len(e.emitted_ids) for ids in prompts for e in gen(pair, ids, s))
        out[f"T={temperature} gamma={gamma}"] = n / (time.perf_counter() - start)
print(json.dumps(out))
"""


def run_child(env_extra: dict, tokens: int) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **env_extra}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tokens)], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()
    runs = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name, env in SETTINGS.items():
            runs[name].append(run_child(env, args.tokens))
    print(f"embedded pair, {args.tokens} new tokens x 3 prompts, median of {args.rounds} alternating rounds")
    for name, rs in runs.items():
        gemm = {m: statistics.median(r["gemm_us"][m] for r in rs) for m in rs[0]["gemm_us"]}
        print(f"\n{name}: fp32 [m x 384] @ [384 x 1024]: "
              + ", ".join(f"m={m} {t:.0f} us ({t / gemm['1']:.2f}x m=1)" for m, t in gemm.items()))
        for key in [k for k in rs[0] if k.startswith("T=")]:
            rate = statistics.median(r[key] for r in rs)
            plain = statistics.median(r[key.split(" ")[0] + " gamma=0"] for r in rs)
            print(f"  {key:16s} {rate:7.1f} tok/s  {rate / plain:5.2f}x plain")


if __name__ == "__main__":
    main()
