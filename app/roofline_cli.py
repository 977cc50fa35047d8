"""`roofline` and `knee` subcommands: thin wrappers over hardware, roofline and knee.

    python -m app roofline [--device D] [--dtype T] [--json FILE] [--model M] [--refresh]
    python -m app knee --model M [--device D] [--dtype T] [--fast] [--json FILE]

`app/cli.py` calls `add_parsers(subparsers)`; each subcommand's `func(args)` returns an exit
code. Errors print one line to stderr and return 1, never a traceback. --model takes a
shape-only name (`app.shapes.list_shapes()`), "tiny-target" / "tiny-draft" (the embedded
pair) or a local model directory (loaded without trust_remote_code; nothing is downloaded).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PASSES = ((1, 1, 128, "decode"), (1, 5, 128, "verify gamma=4"), (1, 128, 0, "prefill"))


def add_parsers(subparsers) -> None:
    """Register `roofline` and `knee` on an argparse subparsers object."""
    p = subparsers.add_parser("roofline", help="measure this device's roofline ceilings")
    _common(p)
    p.add_argument("--model", help="also place a few timed forwards of this model")
    p.add_argument("--refresh", action="store_true", help="re-measure, ignoring the cache")
    p.set_defaults(func=_guarded(run_roofline))
    k = subparsers.add_parser("knee", help="time one forward against tokens per pass")
    _common(k)
    k.add_argument("--model", required=True, help="shape name, tiny-target/-draft or a directory")
    k.add_argument("--fast", action="store_true",
                   help="also time the fast path (app.fastpath: lean decoder on a CPU, CUDA graphs on CUDA), side by side")
    k.add_argument("--kv-len", type=int, default=128, help="cached tokens before each pass")
    k.add_argument("--qs", type=_ints, help="tokens per pass, e.g. 1,2,4,8 (default: past the ridge)")
    k.add_argument("--batches", type=_ints, default=(1,), help="batch sweep, e.g. 1,2,4,8")
    k.add_argument("--repeats", type=int, default=5, help="timed repeats per point (median)")
    k.add_argument("--refresh", action="store_true", help="re-measure the ceilings")
    k.set_defaults(func=_guarded(run_knee))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, mps")
    p.add_argument("--dtype", default="auto", help="auto (cuda bf16, mps fp16, cpu fp32), fp32, fp16, bf16")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _guarded(func):
    """Turn any exception into one line on stderr and exit code 1; the --json path is checked
    before anything is measured or loaded."""
    def run(args) -> int:
        try:
            if args.json:
                from app.validation import output_path
                output_path(args.json)
            return func(args)
        except Exception as exc:  # the CLI's contract: no tracebacks
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            print(f"error: {type(exc).__name__}: {message}", file=sys.stderr)
            return 1
    run.__name__ = func.__name__
    return run


def _device_dtype(args):
    """(device, torch dtype) from --device / --dtype; "auto" matches app.models.resolve_dtype:
    bf16 on CUDA (fp16 where unsupported), fp16 on MPS, fp32 on CPU."""
    import torch

    from app.hardware import detect_device, parse_dtype

    device = detect_device(args.device)
    if args.dtype != "auto":
        return device, parse_dtype(args.dtype)
    if device.startswith("cuda"):
        return device, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return device, torch.float16 if device == "mps" else torch.float32


def _ceilings(args, device, dtype):
    from app.hardware import measure_ceilings

    return measure_ceilings(device, dtype, refresh=args.refresh, progress=_progress)


def _progress(fraction: float, message: str) -> None:
    print(f"  [{fraction:4.0%}] {message}", file=sys.stderr, flush=True)


def load_model(spec: str, device: str, dtype):
    """(model, label) for a shape name, tiny-target / tiny-draft, gguf:smollm2-135m-instruct
    (the flagship target), smollm2-draft, or a local directory."""
    from app.shapes import LABEL, list_shapes, make_shape_model
    from app.assets import SMOLLM2_DRAFT_DIR, TINY_DIR

    if spec in list_shapes():
        return make_shape_model(spec, device, dtype), LABEL
    if spec.startswith("gguf:"):
        from app.gguf import WEIGHTS_NOTE, load_gguf_pair
        return load_gguf_pair(device, dtype, progress=lambda m: print(m, file=sys.stderr)).target, \
            f"SmolLM2-135M-Instruct, {WEIGHTS_NOTE}"
    named = {"tiny-target": TINY_DIR / "target", "tiny-draft": TINY_DIR / "draft",
             "smollm2-draft": SMOLLM2_DRAFT_DIR}
    path = named.get(spec, Path(spec))
    if not path.is_dir():
        raise ValueError(f"unknown model {spec!r}: give a local model directory or one of "
                         f"{', '.join(list_shapes() + list(named) + ['gguf:smollm2-135m-instruct'])}")
    from app.models import load_model as load_dir, locate  # from_pretrained, no remote code

    return load_dir(locate(path), device, dtype), f"local model {path}"


def run_roofline(args) -> int:
    device, dtype = _device_dtype(args)
    ceilings = _ceilings(args, device, dtype)
    print(format_ceilings(ceilings))
    out = {"ceilings": ceilings.to_dict(), "placements": []}
    if args.model:
        from app.roofline import CeilingCheck
        check = CeilingCheck(ceilings, _progress)  # re-measures, once, ceilings a pass beats
        out["placements"] = place_passes(args.model, device, dtype, check)
        out["ceilings"] = check.ceilings.to_dict()
        by_q = {r["q"]: r["seconds"] for r in out["placements"] if r["kv_len"] == PASSES[0][2]}
        from app.cpu_regime import from_times
        regime = from_times(by_q, ceilings.device_name)
        if regime is not None:
            print(f"regime      {regime.explanation}")
            out["regime"] = regime.to_dict()
    _write_json(args.json, out)
    return 0


def format_ceilings(c) -> str:
    """Device, datasheet and measured ceilings with ridge points, one fact a line."""
    lines = [f"device      {c.device} ({c.device_name}), {c.dtype}"]
    if c.datasheet_flops_per_s or c.datasheet_bytes_per_s:
        ridge = f", ridge {c.datasheet_ridge:.0f} FLOP/B" if c.datasheet_ridge else ""
        lines.append(f"datasheet   {_rate(c.datasheet_flops_per_s, 'FLOP/s')}, "
                     f"{_rate(c.datasheet_bytes_per_s, 'B/s')}{ridge}  [{c.datasheet_source}]")
    else:
        lines.append(f"datasheet   none{f'  [{c.datasheet_source}]' if c.datasheet_source else ''}")
    lines.append(f"measured    matmul {_rate(c.measured_flops_per_s, 'FLOP/s')}, "
                 f"copy {_rate(c.measured_bytes_per_s, 'B/s')} (read + write), "
                 f"ridge {c.ridge:.1f} FLOP/B")
    return "\n".join(lines)


def place_passes(spec: str, device: str, dtype, check) -> list[dict]:
    """Time PASSES of the model, classify each on the measured roofline, print and return.
    check: an app.roofline.CeilingCheck; ceilings a pass beats are re-measured (once) first."""
    import torch

    from app.knee import time_forward
    from app.roofline import classify
    from app.costmodel import forward_cost

    model, label = load_model(spec, device, dtype)
    dtype_bytes = torch.empty((), dtype=dtype).element_size()
    timed = [(batch, q, kv_len, what,
              time_forward(model, device=device, batch=batch, q=q, kv_len=kv_len, repeats=3),
              forward_cost(model.config, batch, q, kv_len, dtype_bytes))
             for batch, q, kv_len, what in PASSES]
    note = check.check((seconds, cost.flops, cost.bytes) for *_, seconds, cost in timed)
    if check.remeasured:
        print(format_ceilings(check.ceilings))
    print(f"model       {spec} ({label})")
    rows = []
    for batch, q, kv_len, what, seconds, cost in timed:
        place = classify(seconds, cost.flops, cost.bytes, check.ceilings)
        print(f"  {what:15s} b={batch} q={q:<4d} kv={kv_len:<4d} {seconds * 1e3:9.3f} ms  "
              f"floors mem {place.memory_floor_s * 1e3:.3f} / compute "
              f"{place.compute_floor_s * 1e3:.3f} ms  x{place.ratio_to_floor:.1f}  {place.bound}")
        rows.append({"what": what, "batch": batch, "q": q, "kv_len": kv_len,
                     "seconds": seconds, **place.to_dict()})
    if note:
        print(f"note        {note}")
    return rows


def run_knee(args) -> int:
    import torch

    from app.knee import default_qs, max_positions, measure_knee

    device, dtype = _device_dtype(args)
    if args.fast:
        from app.fastpath import describe
        print(f"fast path   {describe(device)}")
    model, label = load_model(args.model, device, dtype)
    ceilings = _ceilings(args, device, dtype)
    print(format_ceilings(ceilings))
    from app.roofline import CeilingCheck
    check = CeilingCheck(ceilings, _progress)  # re-measures, once, ceilings a pass beats
    dtype_bytes = torch.empty((), dtype=dtype).element_size()
    room = max_positions(model.config) - args.kv_len  # GPT-2: 1024 positions in all
    qs = args.qs or default_qs(ceilings, dtype_bytes, max_q=min(1024, room))
    measure = lambda fast: measure_knee(model, model.config, device=device, dtype=dtype,  # noqa: E731
                                        ceilings=check.ceilings, qs=qs, batches=args.batches, kv_len=args.kv_len,
                                        repeats=args.repeats, fast=fast, progress=_progress)
    result = settle_knee(check, measure(False))
    print(f"model       {args.model} ({label}), KV cache {args.kv_len} tokens")
    print(format_knee(result))
    fast = settle_knee(check, measure(True)) if args.fast else None
    if fast is not None:
        print("fast path:\n" + format_knee(fast) + "\n" + format_side_by_side(result, fast))
    from app.cpu_regime import from_knee
    regime = from_knee(result, ceilings.device_name)
    if regime is not None:
        print(f"regime      {regime.explanation}")
    fast_regime = from_knee(fast, ceilings.device_name, fast=True) if fast is not None else None
    if fast_regime is not None:
        print(f"fast path   {fast_regime.explanation}")
    _write_json(args.json, {"model": args.model, "label": label, **result.to_dict(),
                            "regime": regime.to_dict() if regime else None,
                            "fast": fast.to_dict() if fast is not None else None,
                            "fast_regime": fast_regime.to_dict() if fast_regime else None})
    return 0


def settle_knee(check, result):
    """Check a KneeResult's passes with `check` (app.roofline.CeilingCheck: a pass under its
    floor re-measures the ceilings, once), re-classify its rows if the ceilings changed since
    they were timed, print what the check says; returns the result."""
    import dataclasses

    from app.roofline import classify

    note = check.check((r.seconds, r.flops, r.bytes) for r in result.rows + result.batch_rows)
    if result.ceilings != check.ceilings.to_dict():  # re-measured: the new ceilings classify
        print(format_ceilings(check.ceilings))
        places = lambda rows: [(r, classify(r.seconds, r.flops, r.bytes, check.ceilings)) for r in rows]  # noqa: E731
        again = lambda rows: [dataclasses.replace(  # noqa: E731
            r, memory_floor_s=p.memory_floor_s, compute_floor_s=p.compute_floor_s, bound=p.bound,
            ratio_to_floor=p.ratio_to_floor) for r, p in places(rows)]
        result.rows, result.batch_rows = again(result.rows), again(result.batch_rows)
        result.ceilings = check.ceilings.to_dict()
    if note:
        print(f"note        {note}")
    return result


def format_side_by_side(eager, fast) -> str:
    """q, eager ms, fast ms and eager / fast for the q sweep, measured in this run."""
    lines = [f"{'q':>5} {'eager ms':>10} {'fast ms':>10} {'eager/fast':>10}"]
    for e, f in zip(eager.rows, fast.rows):
        lines.append(f"{e.q:5d} {e.seconds * 1e3:10.3f} {f.seconds * 1e3:10.3f} {e.seconds / f.seconds:10.2f}")
    return "\n".join(lines)


def format_knee(result) -> str:
    """The q sweep and batch sweep as a table, then the bend."""
    base = result.rows[0].seconds if result.rows else 1.0
    line = lambda r: (f"{r.batch:5d} {r.q:5d} {r.seconds * 1e3:10.3f} {r.seconds / base:6.2f} "
                      f"{r.memory_floor_s * 1e3:9.3f} {r.compute_floor_s * 1e3:9.3f} "
                      f"{r.ratio_to_floor:8.1f}  {r.bound}")
    lines = [f"{'batch':>5} {'q':>5} {'ms':>10} {'t/t1':>6} {'mem ms':>9} {'cmp ms':>9} "
             f"{'x floor':>8}  bound"]
    lines += [line(r) for r in result.rows]
    lines += ["batch sweep:"] * bool(result.batch_rows) + [line(r) for r in result.batch_rows]
    bend = (f"bend at q={result.bend} (first t(q)/t(1) > {result.bend_ratio})" if result.bend
            else f"no bend: t(q)/t(1) stayed <= {result.bend_ratio}")
    return "\n".join(lines + [bend])


def _rate(value: float | None, unit: str) -> str:
    if not value:
        return f"? {unit}"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if value >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def _write_json(path: str | None, data: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=1))
        print(f"wrote {path}")
