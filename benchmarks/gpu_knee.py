"""The knee on a CUDA GPU, eager and fast path side by side, for the llama-3.2-1b and -3.1-8b shapes.

    python benchmarks/gpu_knee.py [--json FILE] [--kv-len 512] [--repeats 10] [--no-fast]

Random-weight models built directly on the GPU in bf16 (app.shapes), timed with
app.knee.measure_knee against the measured ceilings (app.hardware). Prints, per shape, t(q)/t(1)
and the ratio of each time to its memory floor and to max(floors); compare with
shared/anchors/h200_hf_eager.log. Then the fast path (app.fastpath: static cache + CUDA graphs
via torch.compile, compiled once per q) at batch 1 for q in QS_FAST, and the issue's goals,
measured in this run: fast t(1) <= 1.5x its memory floor, fast t(5) / t(1) <= 1.3 (a lean decoder
reached 1.35x and 1.21x on an H200: shared/anchors/h200_lean_graph.log). Without CUDA it says so
and exits 0.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root, for `app`

import torch  # noqa: E402

SHAPES = ("llama-3.2-1b", "llama-3.1-8b")
QS = (1, 2, 3, 4, 5, 6, 8, 16, 32, 64, 128, 256, 512, 1024)
BATCHES = (1, 4, 16, 64)
QS_FAST = (1, 2, 3, 4, 5, 6, 8)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--kv-len", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--no-fast", action="store_true", help="eager only (no compilation)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: gpu_knee.py only runs on an NVIDIA GPU; nothing to do")
        return 0
    from app.hardware import device_info, measure_ceilings
    from app.knee import measure_knee
    from app.shapes import make_shape_model

    start = time.perf_counter()
    print(device_info("cuda"), {"torch": torch.__version__})
    ceilings = measure_ceilings("cuda", torch.bfloat16, refresh=True)
    print(f"copy {ceilings.measured_bytes_per_s / 1e12:.2f} TB/s, "
          f"matmul {ceilings.measured_flops_per_s / 1e12:.1f} TFLOP/s, ridge {ceilings.ridge:.0f} FLOP/B")
    results = {}
    for name in SHAPES:
        model = make_shape_model(name, "cuda", torch.bfloat16)
        result = measure_knee(model, model.config, device="cuda", dtype=torch.bfloat16,
                              ceilings=ceilings, qs=QS, batches=BATCHES, kv_len=args.kv_len,
                              repeats=args.repeats)
        print(f"[{time.perf_counter() - start:6.1f}s] {name}, eager, KV {args.kv_len}")
        print(table(result))
        results[name] = result.to_dict()
        if not args.no_fast:
            fast = measure_knee(model, model.config, device="cuda", dtype=torch.bfloat16,
                                ceilings=ceilings, qs=QS_FAST, batches=(1,), kv_len=args.kv_len,
                                repeats=args.repeats, fast=True)
            print(f"[{time.perf_counter() - start:6.1f}s] {name}, fast path, KV {args.kv_len}")
            print(table(fast) + "\n" + goals(fast))
            results[name + " fast"] = fast.to_dict()
        del model
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"ceilings": ceilings.to_dict(), **results}, indent=1))
    return 0


def goals(fast) -> str:
    """The issue's two goals, from this run's fast-path rows at batch 1."""
    t = {r.q: r for r in fast.rows}
    floor = t[1].seconds / t[1].memory_floor_s
    knee = t[5].seconds / t[1].seconds
    return (f"goal: fast t(1) / memory floor = {floor:.2f} (<= 1.5: {'met' if floor <= 1.5 else 'NOT met'}); "
            f"fast t(5) / t(1) = {knee:.2f} (<= 1.3: {'met' if knee <= 1.3 else 'NOT met'})")


def table(result) -> str:
    """batch, q, ms, t/t1, x memory floor, x max(floors), bound: one row per pass."""
    base = result.rows[0].seconds
    lines = [f"{'b':>4} {'q':>5} {'ms':>9} {'t/t1':>6} {'x mem':>7} {'x floor':>8}  bound"]
    for r in result.rows + result.batch_rows:
        lines.append(f"{r.batch:4d} {r.q:5d} {r.seconds * 1e3:9.3f} {r.seconds / base:6.2f} "
                     f"{r.seconds / r.memory_floor_s:7.2f} {r.ratio_to_floor:8.2f}  {r.bound}")
    lines.append(f"bend: q={result.bend}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
