"""The command line: the same engine as the app, from a terminal.

    python -m app generate "What is the capital of France?" --baseline   # the Live tab's defaults
    python -m app bench
    python -m app trace trace.json --json summary.json   # a recorded run's numbers
    python -m app roofline | knee --model NAME        (app.roofline_cli)

Errors are one line on stderr and exit status 2; no tracebacks for bad input. Every argument
that needs no model (prompt, settings, --json path, device, dtype) is checked before one is loaded.
"""
from __future__ import annotations

import argparse
import os
import sys

from app.trace import CHOICE_NOTES, shown_text

FATE_ANSI = {"accepted": "32", "rejected": "9;31", "correction": "34", "bonus": "35", "target": "0"}


def colour(pieces, tty: bool) -> str:
    """Token texts, ANSI-coloured by fate on a terminal; plain (rejected drafts dropped) if not.
    Special tokens (Piece.special: a chat model's "<|im_end|>") are not printed."""
    if not tty:
        return shown_text(pieces)
    return "".join(f"\x1b[{FATE_ANSI[p.fate]}m{p.text}\x1b[0m" for p in pieces if not p.special)


def summary_lines(trace) -> list[str]:
    from app.metrics import mean_acceptance_length
    s, length = trace.summary, mean_acceptance_length(trace.steps)
    lines = [f"acceptance rate        {s.acceptance_rate:.3f}  ({s.accepted}/{s.drafted} drafted tokens)",
             f"mean acceptance length {length:.2f} tokens per drafting step" if length is not None else
             "mean acceptance length n/a (no step drafted)",
             f"tokens per target pass {s.tokens_per_pass:.2f}",
             f"forward passes         target {s.target_passes}, draft {s.draft_passes} (prefill excluded)",
             f"speculative            {s.new_tokens} tokens in {s.seconds:.2f} s = {s.tokens_per_s:.1f} tokens/s"]
    if trace.baseline is not None:
        from app.metrics import speedup_text, summary
        b, m = trace.baseline, summary(trace)
        lines.append(f"baseline (target only) {len(b.output_ids)} tokens in {b.seconds:.2f} s = {b.tokens_per_s:.1f} tokens/s")
        lines.append(f"measured speedup       {speedup_text(m)}")
        lines += [f"note                   {note}" for note in m["speedup_notes"]]
        if b.identical is not None:
            lines.append(f"greedy outputs identical: {'yes' if b.identical else 'NO'}")
    settings = trace.settings or {}
    for key, name in CHOICE_NOTES.items():
        if settings.get(key):
            lines.append(f"{name:<22} {settings[key]}")
    return lines


def place_on_roofline(pair, trace) -> None:
    """Fill flops / bytes / bound of every forward (baseline included) from this device's
    measured ceilings (cached on disk after the first measurement), and the summary's FLOPs;
    ceilings a pass beat are re-measured, once (app.annotate.Annotator.settle). The ceilings
    the passes were classified by go into trace.device (its name, measured and datasheet roofs),
    so a replay draws the roofline of the device the run was recorded on."""
    from app.annotate import Annotator, ceilings
    say = lambda fraction, message: print(f"  [{fraction:4.0%}] {message}", file=sys.stderr)  # noqa: E731
    annotator = Annotator(pair, ceilings(pair.device, pair.dtype), progress=say)
    note = annotator.trace(trace, settle=True)
    trace.device |= annotator.ceilings.to_dict()
    if note:  # the ceilings were re-measured (a pass beat its floor), or a timing is impossible
        print(f"note: {note}", file=sys.stderr)


def roofline_lines(trace) -> list[str]:
    """How many passes of each model were memory-, compute- or overhead-bound (measured)."""
    counts: dict[str, dict[str, int]] = {}
    for f in trace.forwards():
        if f.bound and f.phase != "prefill":
            counts.setdefault(f.model, {}).setdefault(f.bound, 0)
            counts[f.model][f.bound] += 1
    parts = [f"{model}: " + ", ".join(f"{n} {bound}-bound" for bound, n in sorted(c.items()))
             for model, c in sorted(counts.items())]
    return [f"roofline (measured)    {'; '.join(parts)}",
            f"FLOPs spent            {trace.summary.flops / 1e9:.2f} GFLOP"] if parts else []


def add_decode_args(p: argparse.ArgumentParser) -> None:
    """The decoding options; every default is the Live tab's (app.settings.DEFAULTS)."""
    from app.settings import DEFAULTS as D
    p.add_argument("--gamma", type=int, default=D.gamma,
                   help="draft tokens per target pass (1-16); the cap of the roofline and confidence policies")
    p.add_argument("--depth-policy", default=D.depth_policy,
                   help="fixed | heuristic | confidence | roofline (default: roofline, which measures "
                        "this pair's passes and may choose plain decoding)")
    p.add_argument("--temperature", type=float, default=D.temperature, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=D.top_p)
    p.add_argument("--top-k", type=int, default=D.top_k)
    p.add_argument("--seed", type=int, default=D.seed)
    p.add_argument("--max-new-tokens", type=int, default=D.max_new_tokens)
    p.add_argument("--drafter", default=D.drafter, help="model | ngram")
    p.add_argument("--pair", default=None,
                   help="a preset name (default: the SmolLM2 flagship when installed, else embedded)")
    p.add_argument("--target", default=None,
                   help="model directory, hub id, or gguf:smollm2-135m-instruct (instead of --pair)")
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                   help="send the prompt through the chat template (default: on for gguf:, else off)")
    p.add_argument("--draft", default=None, help="model directory or hub id (with --target)")
    p.add_argument("--device", default=D.device, help="auto | cpu | cuda | mps")
    p.add_argument("--dtype", default="auto", help="auto | float32 | float16 | bfloat16")
    p.add_argument("--fast", action=argparse.BooleanOptionalAction, default=None,
                   help="fast path (app.fastpath): lean decoder on a CPU, CUDA graphs on CUDA "
                        "(default: on where a pass measures faster on it)")
    p.add_argument("--draft-int8", action=argparse.BooleanOptionalAction, default=None,
                   help="run the draft with int8 weights (app.lean.Int8Weight; fast path, CPU; "
                        "default: on where its pass measures faster)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice; 1 is steadier on a busy machine)")


def load_cli_pair(args):
    """--target/--draft when given, else the --pair preset (default: app's default pair)."""
    from app import validation
    from app.models import load_pair
    from app.presets import default_preset
    ngram = args.drafter == "ngram"
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if (args.target or "").startswith("gguf:"):
        from app.gguf import load_gguf_pair
        from app.assets import SMOLLM2_DRAFT_DIR
        draft = None if ngram else (args.draft or SMOLLM2_DRAFT_DIR)
        return load_gguf_pair(args.device, args.dtype, progress=say, draft=draft)
    if args.target or args.draft:
        return load_pair(args.target, args.draft, device=args.device, dtype=args.dtype, ngram=ngram)
    name = validation.preset(args.pair) if args.pair else default_preset()
    from app.pairs import get_pair
    return get_pair(name, device=args.device, dtype=args.dtype, ngram=ngram, progress=say)


def flagship_note(args) -> str | None:
    """The install hint when the default pair fell back to the embedded one because the flagship
    is not installed; printed once, after a successful run (never ahead of an error)."""
    from app.presets import FALLBACK, FLAGSHIP, FLAGSHIP_HINT, PRESETS, default_preset
    if args.pair or args.target or args.draft or default_preset() != FALLBACK or PRESETS[FLAGSHIP].installed:
        return None
    return f"note: {FLAGSHIP_HINT}"


def check_generate_args(args):
    """Every argument that can be checked without a model, before one is loaded: the prompt,
    the settings, the --json path, the device and dtype, the preset. Returns the settings."""
    from app import validation
    from app.models import resolve_device, resolve_dtype
    validation.prompt_text(args.prompt)
    settings = validation.settings(gamma=args.gamma, temperature=args.temperature, top_k=args.top_k,
                                   top_p=args.top_p, seed=args.seed, max_new_tokens=args.max_new_tokens,
                                   drafter=args.drafter, fast=args.draft_int8 is True if args.fast is None else args.fast,
                                   draft_int8=bool(args.draft_int8))
    runner_policy(args.depth_policy)
    if args.json:
        validation.output_path(args.json)
    resolve_dtype(args.dtype, resolve_device(args.device))
    if args.pair and not (args.target or args.draft):
        validation.preset(args.pair)
    return settings


def runner_policy(name) -> str:
    """--depth-policy checked against app.runner.DEPTH_POLICIES (InputError: one line)."""
    from app.runner import DEPTH_POLICIES
    from app.settings import InputError
    if name not in DEPTH_POLICIES:
        raise InputError(f"--depth-policy must be one of {', '.join(DEPTH_POLICIES)}, got {name!r}")
    return name


def cmd_generate(args) -> int:
    """Decode through app.runner (the Live tab's path, with its defaults): the CLI's own pair
    (load_cli_pair), no CPU-regime probe (the Live tab's roofline note), quiet progress. The
    tokenizer's special tokens (Piece.special) are not printed."""
    from app import runner, validation
    req = generate_request(args, check_generate_args(args))
    prepared = runner.prepare(req, lambda *a, **k: load_cli_pair(args), lambda *a, **k: None, regime=False)
    pair = prepared.pair
    chat = validation.chat_for(req.prompt_mode, pair.tokenizer)
    tty, shown = sys.stdout.isatty(), 0
    sys.stdout.write(args.prompt + ("\n" if chat else ""))
    for trace in runner.start(prepared, req):
        for step in trace.steps[shown:]:
            sys.stdout.write(colour(step.pieces, tty))
        shown = len(trace.steps)
        sys.stdout.flush()
    place_on_roofline(pair, trace)
    trace.recorded = recorded_by(args)
    print("\n" + "\n".join(summary_lines(trace) + roofline_lines(trace)))
    if args.json:
        with open(args.json, "w") as f:
            f.write(trace.to_json(indent=1))
    note = flagship_note(args)
    if note:
        print(note, file=sys.stderr)
    return 0


def generate_request(args, settings):
    """app.runner's DecodeRequest for `generate`: --chat on / off / unset as the prompt modes
    chat / continue / auto (auto: chat when the tokenizer has a chat template)."""
    from app.runner import DecodeRequest
    mode = {True: "chat", False: "continue", None: "auto"}[args.chat]
    preset = None if (args.target or args.draft) else args.pair
    return DecodeRequest(args.prompt, preset, args.device, settings, bool(args.baseline), args.depth_policy,
                         mode, fast_auto=args.fast is None and args.draft_int8 is not True,
                         int8_auto=args.draft_int8 is None)


def recorded_by(args) -> dict:
    """Trace.recorded for a CLI run: date, commit, the command line, the preset, torch's
    threads and version (app.recorded.provenance)."""
    import torch

    from app.recorded import provenance
    from app.presets import default_preset
    pair = None if (args.target or args.draft) else (args.pair or default_preset())
    return provenance(getattr(args, "argv", None), pair, threads=torch.get_num_threads(),
                      torch=torch.__version__)


def cmd_trace(args) -> int:
    """Print a recorded run's summary (app.metrics), one metric a line; --json writes it.
    Every check (the --json path, the file's size, JSON and schema) comes before any output."""
    import json

    from app import metrics, validation
    from app.recorded import load_trace
    if args.json:
        validation.output_path(args.json)
    s = metrics.summary(load_trace(args.file))
    if args.json:
        try:
            with open(args.json, "w") as f:
                f.write(json.dumps(s, indent=1, allow_nan=False) + "\n")
        except OSError as exc:
            raise validation.InputError(f"--json {args.json}: cannot write it ({exc.strerror or exc})") from None
    print("\n".join(metrics.summary_lines(s)))
    return 0


def cmd_bench(args) -> int:
    from app import bench
    return bench.main(args)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m app", description="Speculative Decoding Lab")
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode one prompt, tokens coloured by fate")
    g.add_argument("text", nargs="?", metavar="PROMPT", help="the prompt (or --prompt)")
    g.add_argument("--prompt", help="the prompt, where it starts with a dash")
    add_decode_args(g)
    g.add_argument("--baseline", action="store_true", help="also run target-only decoding")
    g.add_argument("--json", default=None, help="write the trace here")
    g.set_defaults(func=cmd_generate)
    b = sub.add_parser("bench", help="plain vs transformers assisted vs this engine")
    add_decode_args(b)
    b.add_argument("--repeats", type=int, default=3)
    b.set_defaults(func=cmd_bench)
    t = sub.add_parser("trace", help="a recorded run's numbers (an exported trace.json; no model loaded)")
    t.add_argument("file", metavar="FILE", help="a trace.json (Live tab download, or generate --json)")
    t.add_argument("--json", default=None, help="also write the summary here, as JSON")
    t.set_defaults(func=cmd_trace)
    from app import lessons_cli, roofline_cli
    roofline_cli.add_parsers(sub)
    lessons_cli.add_parsers(sub)
    return ap


def main(argv=None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded with the run (recorded_by)
    if args.command == "generate":
        if (args.text is None) == (args.prompt is None):
            parser.error("generate takes one prompt: PROMPT or --prompt PROMPT")
        args.prompt = args.prompt if args.text is None else args.text
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    import torch

    from app.engine import NonFiniteLogits
    from app.settings import InputError, ModelLoadError
    from app.cpu_threads import set_threads
    set_threads(getattr(args, "threads", None))  # else torch's count, capped at a container's CPU quota
    try:
        return args.func(args)
    except (InputError, ModelLoadError, NonFiniteLogits) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except torch.OutOfMemoryError as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"error: out of memory: try a smaller pair, fewer new tokens or the CPU ({first})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
