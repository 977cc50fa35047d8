"""Tokens/s of a decode streamed through the app against the CLI engine, same settings.

    python benchmarks/stream_vs_cli.py [--max-new-tokens 128] [--gamma 4] [--repeats 3]
    python benchmarks/stream_vs_cli.py --pair "smollm2-135m q4 / distilled draft"  # a preset
    python benchmarks/stream_vs_cli.py --target DIR --draft DIR     # another local pair

The app runs in a subprocess (this script with --serve), as a user would run it; this process
is its gradio_client, consuming every streamed update. The CLI side is the loop of
`python -m app generate` (app.engine.run, pieces written out as they come), in a fresh
subprocess per run (--cli-worker: one warm-up decode, then the measured one) while the server
idles, so that neither side shares a process (or a GIL) with the client. Runs alternate (CLI,
app, CLI, app, ...) after a warm-up of the app, and the medians are compared:

    engine tokens/s  - what the engine measured inside each (the stats panel / CLI summary)
    end-to-end       - new tokens / wall time from request to the update that carries the
                       end marker, i.e. every token on the page (app), or from the call to the
                       last piece (CLI): queueing and streaming included
    with charts      - the same, to the last update (the final charts, stats and exports,
                       which the app sends right after the finished text)

Goal: the app keeps >= 90% of the CLI's tokens/s.

--threads N sets torch's thread count on both sides. On a small, busy CPU it matters more than
anything measured here: with 2 threads on 2 cores shared with other work, a tiny pair decoded
~20x slower in a process's main thread (the CLI) than in a worker thread (the app's decode
thread) or with 1 thread. Compare like with like: --threads 1 there.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPT = "It is a truth universally acknowledged, that a single man in possession of a good fortune"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--drafter", default="model", help="model | ngram")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pair", default="embedded",
                    help="a preset of app.presets (default: embedded, the fastest pair, "
                         "where the app's per-token costs weigh most)")
    ap.add_argument("--prompt-mode", default="auto", choices=["auto", "chat", "continue"],
                    help="auto: chat when the target has a chat template (as the app and CLI do)")
    ap.add_argument("--target", default=None, help="local target directory (instead of --pair)")
    ap.add_argument("--draft", default=None, help="local draft directory (default: embedded)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads in both the app and the CLI (0: torch's default)")
    ap.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)  # server mode
    ap.add_argument("--cli-worker", action="store_true", help=argparse.SUPPRESS)  # one CLI run
    return ap.parse_args(argv)


def loader_for(args):
    """app.pairs.get_pair for the embedded pair, else one cached load of --target/--draft."""
    from app.models import load_pair
    if args.target is None:
        from app.pairs import get_pair
        return get_pair
    pairs = {}

    def load(preset, device="auto", dtype="auto", ngram=False):
        if ngram not in pairs:
            pairs[ngram] = load_pair(args.target, None if ngram else args.draft, device=device,
                                     dtype=dtype, ngram=ngram)
        return pairs[ngram]
    return load


def serve(args) -> None:
    from app.ui import build_demo
    build_demo(loader_for(args)).launch(server_name="127.0.0.1", server_port=args.serve, quiet=True)


def start_server(args) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, __file__, "--serve", str(port), "--threads", str(args.threads)]
    if args.target:
        cmd += ["--target", args.target, "--draft", args.draft or args.target]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the app did not start within 180 s")


def app_run(client, args) -> tuple[float, float, int, float]:
    """(engine tokens/s, end-to-end tokens/s, streamed updates, tokens/s to the final charts)
    of one decode via the API."""
    start = time.perf_counter()
    job = client.submit(args.prompt, args.pair, args.drafter, args.gamma, "fixed", 0.0, 1.0, 0, 0,
                        args.max_new_tokens, "auto", False, False, mode(args), api_name="/decode")
    updates, text_done = 0, None
    for out in job:
        updates += 1
        if text_done is None and 'id="stream-end"' in out[0]:
            text_done = time.perf_counter() - start
    result = job.result()
    wall = time.perf_counter() - start
    summary = result[6]
    n = summary["new_tokens"]
    return summary["summary"]["tokens_per_s"], n / (text_done or wall), updates, n / wall


def mode(args) -> str:
    """The app's prompt mode: the CLI side mirrors it in cli_worker."""
    return "continue" if args.target else args.prompt_mode


def cli_decode(pair, ids, args) -> tuple[float, float]:
    """(engine tokens/s, end-to-end tokens/s) of the CLI's loop: app.engine.run, pieces out."""
    from app import validation
    from app.cli import colour
    from app.engine import run
    settings = validation.settings(gamma=args.gamma, max_new_tokens=args.max_new_tokens,
                                   drafter=args.drafter)
    out, shown, start = io.StringIO(), 0, time.perf_counter()
    for trace in run(pair, ids, args.prompt, settings):
        for step in trace.steps[shown:]:
            out.write(colour(step.pieces, False))
        shown = len(trace.steps)
    wall = time.perf_counter() - start
    return trace.summary.tokens_per_s, trace.summary.new_tokens / wall


def cli_worker(args) -> None:
    """Load the pair, decode once to warm up, decode again and print the measured numbers."""
    from app import validation
    pair = loader_for(args)(args.pair, device="auto", dtype="auto", ngram=args.drafter == "ngram")
    chat = validation.chat_for(mode(args), pair.tokenizer)
    ids = validation.prompt_ids(pair.tokenizer, args.prompt, pair.context, args.max_new_tokens, chat)
    cli_decode(pair, ids, args)
    import torch
    print(json.dumps({"result": cli_decode(pair, ids, args), "pair": [pair.target_id, pair.draft_id],
                      "device": pair.device, "threads": torch.get_num_threads()}))


def cli_run(args) -> tuple[tuple[float, float], dict]:
    cmd = [sys.executable, __file__, "--cli-worker", "--threads", str(args.threads),
           "--prompt", args.prompt, "--gamma", str(args.gamma),
           "--max-new-tokens", str(args.max_new_tokens), "--drafter", args.drafter,
           "--pair", args.pair, "--prompt-mode", args.prompt_mode]
    if args.target:
        cmd += ["--target", args.target, "--draft", args.draft or args.target]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    info = json.loads(out.strip().splitlines()[-1])
    return tuple(info["result"]), info


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    if args.serve:
        serve(args)
        return 0
    if args.cli_worker:
        cli_worker(args)
        return 0
    from gradio_client import Client
    proc, url = start_server(args)
    try:
        client = Client(url, analytics_enabled=False, verbose=False)
        log(f"app up at {url}; warming up")
        app_run(client, args)  # warm-up: loading, ceilings, caches
        cli, app = [], []
        for i in range(args.repeats):
            result, info = cli_run(args)
            cli.append(result)
            app.append(app_run(client, args))
            log(f"run {i + 1}: CLI {cli[-1][0]:.1f} tokens/s, app {app[-1][0]:.1f} tokens/s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    report(args, info, cli, app)
    return 0


def report(args, info, cli, app) -> None:
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    print(f"pair {info['pair'][0]} / {info['pair'][1]} on {info['device']}; gamma {args.gamma}, "
          f"{args.max_new_tokens} new tokens, greedy, {info['threads']} torch thread(s); "
          f"median of {args.repeats} alternating runs")
    print(f"{'':18}{'CLI':>10}{'app':>10}{'app / CLI':>12}")
    for name, i in (("engine tokens/s", 0), ("end-to-end tok/s", 1)):
        c, a = med(cli, i), med(app, i)
        print(f"{name:18}{c:10.1f}{a:10.1f}{a / c:11.0%}")
    print(f"{'with charts':18}{med(cli, 1):10.1f}{med(app, 3):10.1f}{med(app, 3) / med(cli, 1):11.0%}")
    print(f"streamed updates per app run: {statistics.median(r[2] for r in app):.0f}")


if __name__ == "__main__":
    sys.exit(main())
