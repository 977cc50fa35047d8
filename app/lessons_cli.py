"""`lesson` subcommand: run one experiment of app.lessons from a terminal.

    python -m app lesson list
    python -m app lesson knee --qs 1,2,4,8 --json knee.json
    python -m app lesson batch_depth --batches 1,8,64 --gammas 0,2,4 --alpha 0.7
    python -m app lesson lossless -n 1000 -k 1 --json -          (JSON on stdout, summary on stderr)
    python -m app lesson memory_wall --params 70e9 --dtype fp16 --bandwidth 2 --context 1024 --kv-per-token 327680

Every result starts with its verdict (claim, held: true / false / null for inconclusive, evidence),
computed from the run's own timings; --json writes it under "verdict", and each timing as
{min, median, max, n}. On a shared machine add --threads 1.

Models: the embedded pair by default; --pair PRESET for a named pair of app.presets (the
flagship too); --target DIR --draft DIR for another local pair (or hub
ids when online), --shape TARGET,DRAFT for a shape-only pair (random weights: timing only).
Errors print one line to stderr and exit with status 2.
"""
from __future__ import annotations

import argparse
import json
import sys

from app.lessons import LESSONS


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}")


def _number(text: str) -> float:
    """70e9, 70B, 7M, 1.5k -> float."""
    scale = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}.get(text[-1:].lower(), 1.0)
    try:
        return float(text[:-1] if scale != 1.0 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number like 70e9 or 70B, got {text!r}")


def _pair_args(p) -> None:
    from app.presets import PRESETS
    p.add_argument("--pair", metavar="PRESET", help="a named pair instead of --target/--draft/--shape: "
                   + "; ".join(f"'{name}'" for name in PRESETS))
    p.add_argument("--target", help="target model directory or hub id (default: embedded pair)")
    p.add_argument("--draft", help="draft model directory or hub id (default: embedded pair)")
    p.add_argument("--shape", help="shape-only pair TARGET,DRAFT, e.g. llama-3.1-8b,llama-3.2-1b")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | mps")
    p.add_argument("--dtype", default="auto", help="auto | float32 | float16 | bfloat16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (fewer than the cores when other jobs share the machine)")


def _prompts(p, many: bool) -> None:
    p.add_argument("--prompt", action="append" if many else "store",
                   help="prompt text" + (" (repeat for several)" if many else ""))


def _lesson_parsers(sub) -> None:
    k = sub.add_parser("knee", help=LESSONS["knee"].title)
    k.add_argument("--qs", type=_ints, default=None, help="tokens per pass, e.g. 1,2,3,4,5,8,16")
    k.add_argument("--kv-len", type=int, default=None, help="cached tokens before each pass (default 64)")
    k.add_argument("--repeats", type=int, default=None)
    b = sub.add_parser("batch_depth", help=LESSONS["batch_depth"].title)
    b.add_argument("--batches", type=_ints, default=None, help="e.g. 1,2,4,8,16,32,64")
    b.add_argument("--gammas", type=_ints, default=None, help="e.g. 0,1,2,4,8 (0 is always added)")
    b.add_argument("--alpha", type=float, default=None, help="acceptance rate (default: measured on the pair)")
    b.add_argument("--steps", type=int, default=200, help="simulated steps per cell")
    b.add_argument("--kv-len", type=int, default=None, help="cached tokens before each pass (default 32)")
    b.add_argument("--repeats", type=int, default=None)
    p = sub.add_parser("policies", help=LESSONS["policies"].title)
    _prompts(p, True)
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--gamma-max", type=int, default=8)
    p.add_argument("--threshold", type=float, default=0.4, help="confidence stop threshold")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--rounds", type=int, default=None, help="interleaved repeats of every run (default 3)")
    t = sub.add_parser("theory", help=LESSONS["theory"].title)
    _prompts(t, True)
    t.add_argument("--gammas", type=_ints, default=None, help="default 1,...,8")
    t.add_argument("--max-new-tokens", type=int, default=64)
    t.add_argument("--temperature", type=float, default=0.0)
    t.add_argument("--rounds", type=int, default=None, help="interleaved repeats of every run (default 3)")
    lo = sub.add_parser("lossless", help=LESSONS["lossless"].title)
    _prompts(lo, False)
    lo.add_argument("-n", type=int, default=None, help="samples per arm (default 2000)")
    lo.add_argument("-k", type=int, default=1, help="tokens per sample (1-4)")
    lo.add_argument("--gamma", type=int, default=3)
    lo.add_argument("--temperature", type=float, default=1.0)
    lo.add_argument("--variants", default="exact,greedy_draft,no_residual",
                    help="comma-separated: exact, greedy_draft, no_residual")
    f = sub.add_parser("flops", help=LESSONS["flops"].title)
    _prompts(f, False)
    f.add_argument("--gamma", type=int, default=4, help="deepest γ of the sweep 1..γ; the fastest is tested")
    f.add_argument("--max-new-tokens", type=int, default=64)
    f.add_argument("--repeats", type=int, default=3, help="interleaved plain/speculative rounds (at least 3)")
    for parser in (k, b, p, t, lo, f):
        _pair_args(parser)
    m = sub.add_parser("memory_wall", help=LESSONS["memory_wall"].title)
    m.add_argument("--params", type=_number, default=70e9, help="parameters, e.g. 70e9 or 70B")
    m.add_argument("--dtype", default="fp16", help="fp32 | fp16 | bf16 | fp8 | int8 | int4")
    m.add_argument("--batch", type=int, default=1)
    m.add_argument("--q", type=int, default=1, help="tokens per sequence per pass (gamma + 1 when verifying)")
    m.add_argument("--bandwidth", type=float, default=None, help="TB/s (default 2, or the device's)")
    m.add_argument("--peak", type=float, default=None, help="TFLOP/s (optional)")
    m.add_argument("--device", default=None, help="a datasheet row, e.g. 'H100 SXM', or 'measured'")
    m.add_argument("--alpha", type=float, default=0.7, help="acceptance rate: tokens emitted per pass when q > 1")
    m.add_argument("--context", type=int, default=0, help="KV-cache tokens per sequence read by each pass")
    m.add_argument("--kv-per-token", type=_number, default=0.0,
                   help="bytes of K and V per cached token (2 x layers x kv_heads x head_dim x bytes)")
    m.add_argument("--here", action="store_true", help="also measure this device's ridge (a few seconds, once)")


def add_parsers(subparsers) -> None:
    """Register `lesson NAME [options] [--json FILE]` on an argparse subparsers object."""
    lesson = subparsers.add_parser("lesson", help="run one of the lessons' experiments")
    sub = lesson.add_subparsers(dest="lesson", required=True, metavar="NAME")
    sub.add_parser("list", help="list the lessons")
    _lesson_parsers(sub)
    for name, parser in sub.choices.items():
        parser.add_argument("--json", metavar="FILE", help="write the result as JSON ('-' = stdout)")
    lesson.set_defaults(func=run)


def _load_pair(args):
    from app.cpu_threads import set_threads
    from app.models import load_pair, load_shape_pair

    set_threads(args.threads)  # else torch's count, capped at a container's CPU quota
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # stderr keeps to progress lines and one-line errors

    if args.pair:
        from app import validation
        from app.pairs import get_pair
        if args.target or args.draft or args.shape:
            raise ValueError("--pair names a whole pair: leave out --target, --draft and --shape")
        return get_pair(validation.preset(args.pair), device=args.device, dtype=args.dtype,
                        progress=lambda message: print(message, file=sys.stderr))
    if args.shape:
        names = args.shape.split(",")
        if len(names) != 2:
            raise ValueError("--shape takes TARGET,DRAFT, e.g. llama-3.1-8b,llama-3.2-1b")
        return load_shape_pair(*names, device=args.device, dtype=args.dtype)
    return load_pair(args.target, args.draft, device=args.device, dtype=args.dtype)


def _kwargs(args) -> dict:
    """The lesson function's keyword arguments from the parsed options (None = its default)."""
    a, name = vars(args), args.lesson
    keep = {"knee": ("qs", "kv_len", "repeats"),
            "batch_depth": ("batches", "gammas", "alpha", "steps", "kv_len", "repeats", "seed"),
            "policies": ("gamma", "gamma_max", "threshold", "max_new_tokens", "temperature", "seed", "rounds"),
            "theory": ("gammas", "max_new_tokens", "temperature", "seed", "rounds"),
            "lossless": ("n", "k", "gamma", "temperature", "seed"),
            "flops": ("gamma", "max_new_tokens", "seed", "repeats")}[name]
    kw = {key: a[key] for key in keep if a.get(key) is not None}
    if a.get("prompt"):
        kw["prompts" if isinstance(a["prompt"], list) else "prompt"] = a["prompt"]
    if name == "lossless":
        kw["variants"] = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    return kw


def _memory_wall(args):
    from app.lessons.memory_wall import BANDWIDTH, PEAK, in_unit, memory_wall

    # in the units the options take, as the app's memory-wall tab checks them (app.ui.lessons)
    bandwidth = in_unit("bandwidth", args.bandwidth, 1e12, "TB/s", BANDWIDTH) if args.bandwidth else None
    peak = in_unit("peak", args.peak, 1e12, "TFLOP/s", PEAK) if args.peak else None
    device = args.device
    if device == "measured":
        from app.hardware import detect_device, measure_ceilings
        ceilings = measure_ceilings(detect_device("auto"), "fp32" if args.dtype == "fp32" else "fp16",
                                    progress=_progress)
        bandwidth, peak = bandwidth or ceilings.measured_bytes_per_s, peak or ceilings.measured_flops_per_s
        device, source = None, f"{ceilings.device_name} (measured)"
    else:
        source = None
    if not device and not bandwidth:
        bandwidth = 2e12
    return memory_wall(args.params, dtype=args.dtype, batch=args.batch, q=args.q, bytes_per_s=bandwidth,
                       flops_per_s=peak, device=device, source=source, alpha=args.alpha, context=args.context,
                       kv_bytes_per_token=args.kv_per_token, this_device=args.here)


def _progress(fraction: float, message: str) -> None:
    print(f"  [{fraction:4.0%}] {message}", file=sys.stderr, flush=True)


def check_args(args) -> None:
    """What can be checked before a model is loaded: the --json path, the prompts, the
    temperature (app.validation, shared with the app and `generate`)."""
    from app import validation
    if getattr(args, "json", None) and args.json != "-":
        validation.output_path(args.json)
    prompts = getattr(args, "prompt", None)
    for prompt in prompts if isinstance(prompts, list) else [prompts] if prompts is not None else []:
        validation.prompt_text(prompt)
    if getattr(args, "temperature", None) is not None:
        validation.check_temperature(args.temperature)


def run(args) -> int:
    """Run the chosen lesson; print the summary and write JSON. Errors: one line, exit 2.
    Every argument that needs no model is checked first (check_args)."""
    try:
        check_args(args)
        if args.lesson == "list":
            for lesson in LESSONS.values():
                print(f"{lesson.name:12s} {lesson.title}")
            return 0
        if args.lesson == "memory_wall":
            result = _memory_wall(args)
        else:
            result = LESSONS[args.lesson].function(_load_pair(args), progress=_progress, **_kwargs(args))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the CLI's contract: one line, no traceback
        message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"error: {message}", file=sys.stderr)
        return 2
    out = sys.stderr if args.json == "-" else sys.stdout
    print("\n".join(result.summary()), file=out)
    if args.json == "-":
        print(json.dumps(result.to_dict(), indent=1))
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_dict(), f, indent=1)
        print(f"wrote {args.json}", file=out)
    return 0
