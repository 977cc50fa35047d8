"""Which fp32 product form makes a CPU's few-token passes cheap? The lean decoder (app/lean.py)
can compute products of at most FEW_ROWS rows as (W @ x.T).T (app.lean.few_rows_product) instead
of F.linear(x, W): the same arithmetic up to reassociation, another MKL code path; it measures
per row count which is faster when it is built (app.lean.choose_form_rows). This prints, side by
side in one run, the lean target's pass times for q = 1, 2, 4, 8 tokens with F.linear, with the
form for every row count, and with the measured choice (rounds interleaved, so background load
hits them alike), and t(q) / t(1) (the knee).
With --padding it compares instead, for q = 1 .. 8, the form with app.lean.PADDED_ROWS (3 rows
computed as 4, 7 as 8) against the form that pads only one row to two.

    python benchmarks/cpu_few_rows.py [--model smollm2|tiny] [--rounds 3] [--padding] [--qs 1 2 3 ...]
    MKL_CBWR=AVX2 python benchmarks/cpu_few_rows.py      # with MKL's AVX2 path forced

Run it as installed and with MKL_CBWR (app.cpu_regime.suggested_cbwr);
research/RESULTS.md ("Few-row products in another form") has the numbers
measured on the AVX2 dev CPU.
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
ALL_ROWS = frozenset(range(1, lean.FEW_ROWS + 1))
PADDINGS = {"1 -> 2 only": {1: 2}, "PADDED_ROWS": lean.PADDED_ROWS}  # --padding, the form for all rows


def load_target(name: str):
    if name == "smollm2":
        from research.flagship import load
        return load("cpu").target
    from app.models import load_pair
    return load_pair().target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--padding", action="store_true", help="compare PADDED_ROWS with one-to-two padding only")
    ap.add_argument("--qs", type=int, nargs="+", default=None, help=f"tokens per pass (default {QS}; 1..8 with --padding)")
    args = ap.parse_args()
    target = load_target(args.model)
    from app import fastpath
    runner = fastpath._runner(target, False)  # the LeanModel that time_passes(fast=True) runs
    print(f"rows the LeanModel measured the form faster for (app.lean.choose_form_rows): {sorted(runner.form_rows)}")
    if args.padding:
        forms, qs = {name: (ALL_ROWS, rows) for name, rows in PADDINGS.items()}, list(range(1, 9))
    else:
        forms = {"F.linear": (frozenset(), lean.PADDED_ROWS), "few-row form": (ALL_ROWS, lean.PADDED_ROWS),
                 "measured choice": (runner.form_rows, lean.PADDED_ROWS)}
        qs = QS
    qs = args.qs or qs
    times: dict[str, list[list[float]]] = {k: [] for k in forms}
    for r in range(args.rounds):
        for form, (form_rows, padded) in forms.items():
            runner.form_rows, lean.PADDED_ROWS = form_rows, padded
            times[form].append(time_passes(target, device="cpu", batch=1, qs=qs, kv_len=64,
                                           repeats=args.repeats, fast=True))
            print(f"  round {r + 1} {form}: " + ", ".join(f"{t * 1e3:.1f}" for t in times[form][-1]) + " ms", flush=True)
    med = {form: [statistics.median(t[i] for t in rows) for i in range(len(qs))] for form, rows in times.items()}
    print(f"\n{args.model} target, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"ISA {torch.backends.cpu.get_cpu_capability()}, MKL_CBWR={os.environ.get('MKL_CBWR')}; "
          f"median of {args.rounds} rounds (ms; in brackets the knee t(q)/t(1))")
    print(f"{'q':>3} | " + " | ".join(f"{name:>18}" for name in forms))
    for i, q in enumerate(qs):
        print(f"{q:>3} | " + " | ".join(f"{m[i] * 1e3:9.1f} ({m[i] / m[0]:4.2f}) " for m in med.values()))


if __name__ == "__main__":
    main()
