"""Which fp32 product form makes a CPU's few-token passes cheap? The lean decoder (app/lean.py)
computes products of at most FEW_ROWS rows as (W @ x.T).T (app.lean.few_rows_product) instead of
F.linear(x, W). Same arithmetic up to reassociation, another MKL code path. This prints, side by
side in one run, the lean target's pass times for q = 1, 2, 4, 8 tokens under both forms (rounds
interleaved, so background load hits them alike), their ratio, and t(q) / t(1) (the knee).
With --padding it compares instead, for q = 1 .. 8, the form with app.lean.PADDED_ROWS (3 rows
computed as 4, 7 as 8) against the form that pads only one row to two.

    python benchmarks/cpu_few_rows.py [--model smollm2|tiny] [--rounds 3] [--padding]
    MKL_CBWR=AVX2 python benchmarks/cpu_few_rows.py      # with MKL's AVX2 path forced

Run it as installed and with MKL_CBWR (app.cpu_regime.suggested_cbwr); the README ("Few-row
products in another form") has the numbers measured on the AVX2 dev CPU.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import app.lean as lean  # noqa: E402
from app.knee import time_passes  # noqa: E402

QS = [1, 2, 4, 8]
FORMS = {"F.linear": {"FEW_ROWS": 0}, "few-row form": {}}
PADDINGS = {"1 -> 2 only": {"PADDED_ROWS": {1: 2}}, "PADDED_ROWS": {}}  # --padding


def load_target(name: str):
    if name == "smollm2":
        from demo_models.evaluate_smollm2 import load
        return load("cpu").target
    from app.models import load_pair
    return load_pair().target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--padding", action="store_true", help="compare PADDED_ROWS with one-to-two padding only")
    args = ap.parse_args()
    target = load_target(args.model)
    forms, qs = (PADDINGS, list(range(1, 9))) if args.padding else (FORMS, QS)
    times: dict[str, list[list[float]]] = {k: [] for k in forms}
    defaults = {"FEW_ROWS": lean.FEW_ROWS, "PADDED_ROWS": lean.PADDED_ROWS}
    for r in range(args.rounds):
        for form, knobs in forms.items():
            for name, value in {**defaults, **knobs}.items():
                setattr(lean, name, value)
            times[form].append(time_passes(target, device="cpu", batch=1, qs=qs, kv_len=64,
                                           repeats=args.repeats, fast=True))
            print(f"  round {r + 1} {form}: " + ", ".join(f"{t * 1e3:.1f}" for t in times[form][-1]) + " ms", flush=True)
    med = {form: [statistics.median(t[i] for t in rows) for i in range(len(qs))] for form, rows in times.items()}
    print(f"\n{args.model} target, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"ISA {torch.backends.cpu.get_cpu_capability()}, MKL_CBWR={os.environ.get('MKL_CBWR')}; "
          f"median of {args.rounds} rounds (ms)")
    a, b = forms
    print(f"{'q':>3} | {a:>12} | {b:>12} | ratio | knee t(q)/t(1): {a}, {b}")
    old, new = med[a], med[b]
    for i, q in enumerate(qs):
        print(f"{q:>3} | {old[i] * 1e3:12.1f} | {new[i] * 1e3:12.1f} | {old[i] / new[i]:5.2f} | "
              f"{old[i] / old[0]:.2f}, {new[i] / new[0]:.2f}")


if __name__ == "__main__":
    main()
