"""Record the gallery of runs in demo_models/recorded/: the shipped pairs on this machine's CPU
(or its GPU: --device), each on its own example prompts, through the CLI (`python -m app
generate --json`), so every file is an ordinary export that the app and `python -m app trace`
read like an upload.

    python benchmarks/record_gallery.py                  # every run below, then manifest + README
    python benchmarks/record_gallery.py --only embedded  # one pair's runs (the manifest keeps the rest)
    python benchmarks/record_gallery.py --device cuda    # the same runs on a GPU: cuda-*.json beside them

Runs: greedy, 48 new tokens, torch's default thread count (what the app uses: no --threads; each
file's `recorded.threads` says how many), with the baseline (target-only) run for the
speedup, interleaved as the app does; both pairs with the app's defaults (app.settings.DEFAULTS:
the roofline depth policy up to gamma 4, the fast path and the int8 draft where they measure
faster), so that a CPU run and a GPU run of one example differ by the device alone. The prompts are the Live tab's examples
(app/ui/live.py EXAMPLES): the chat questions for the instruction-tuned flagship, the prose
openings for the embedded pair, which was trained on Austen and Shakespeare.

Each file is the CLI's export with three edits: model paths inside this checkout are made
relative to it (the absolute path of whoever recorded says nothing), the recording machine's
CPU model and core count are added to `recorded` (a GPU run's host too), and the command names
the file where it lies in the gallery, not the temporary folder the CLI wrote it to (every run
is recorded before a gallery file changes, so the checkout is clean for each); nothing else. The
trace itself says where, when, how and at which commit it was made (Trace.device, .recorded);
manifest.json lists the files with their headline numbers (app.recorded.manifest_entry) and
README.md says what was run on which CPU. Record from a clean checkout: the commit recorded is
HEAD, and a dirty work tree is flagged in each file.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.recorded import GALLERY_DIR, MANIFEST, load_trace, manifest_entry  # noqa: E402

NEW_TOKENS = 48
QUESTIONS = ["What is the capital of France, and what is it famous for?",
             "Explain in three sentences why the sky is blue."]
OPENINGS = ["It is a truth universally acknowledged, that a single man in possession of a good fortune",
            "Mr. Darcy walked towards the window and said,",
            "ROMEO:\nBut soft, what light through yonder window breaks?",
            "First Citizen:\nBefore we proceed any further, hear me speak.",
            "Emma Woodhouse, handsome, clever, and rich,"]
FLAGSHIP = "smollm2-135m q4 / distilled draft"  # demo_models.presets.FLAGSHIP
# (short name for the files, preset, extra CLI flags, prompts)
RUNS = [("embedded", "embedded", [], OPENINGS),  # the app's defaults for both (DEFAULTS)
        ("flagship", FLAGSHIP, [], QUESTIONS)]
COMMON = ["--max-new-tokens", str(NEW_TOKENS), "--temperature", "0", "--baseline"]
DEVICES = ("cpu", "cuda", "mps")
CPU_ONLY = {"--draft-int8"}  # flags dropped off a CPU (app.lean's int8 weights run on a CPU only)


def slug(text: str, words: int = 5) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())[:words])


def cpu_model() -> str:
    """lscpu's "Model name" (what the README names), else /proc/cpuinfo's."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    from app.hardware import device_info
    return device_info("cpu")["name"]


def relative_models(path: Path) -> None:
    """Rewrite model paths inside this checkout as paths relative to it, and add the recording
    machine's CPU (lscpu model name, cores visible) to `recorded` (in place)."""
    trace = load_trace(path)
    for key in ("target", "draft"):
        value = trace.models.get(key)
        if isinstance(value, str) and value.startswith(str(ROOT) + os.sep):
            trace.models[key] = Path(value).relative_to(ROOT).as_posix()
    trace.recorded |= {"cpu_model": cpu_model(), "cpu_count": os.cpu_count()}
    path.write_text(trace.to_json())


def record(name: str, preset: str, flags: list[str], prompt: str, out: Path, device: str = "cpu",
           staging: Path | None = None) -> Path:
    """One CLI run on `device` into <device>-<name>-<prompt slug>.json: written in `staging`
    (default: out) and named in the command as it will lie in `out`; exits on failure."""
    path = out / f"{device}-{name}-{slug(prompt)}.json"
    flags = flags if device == "cpu" else [f for f in flags if f not in CPU_ONLY]
    cmd = [sys.executable, "-m", "app", "generate", "--prompt", prompt, "--pair", preset, "--device", device,
           *COMMON, *flags, "--json", os.path.relpath(path, ROOT)]
    if staging is not None:  # the CLI writes there; its recorded command names the file in `out`
        cmd[-1] = str(staging / path.name)
        path = staging / path.name
    print(f"recording {path.name} ...", flush=True)
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{path.name}: the CLI failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    relative_models(path)
    if staging is not None:
        trace = load_trace(path)
        trace.recorded["command"] = trace.recorded["command"].replace(str(path), os.path.relpath(out / path.name, ROOT))
        path.write_text(trace.to_json())
    return path


def write_manifest(out: Path) -> list[dict]:
    """manifest.json from every recorded file in `out` (sorted by name)."""
    entries = [manifest_entry(p, load_trace(p), out) for p in sorted(out.glob("*.json")) if p.name != MANIFEST]
    manifest = {"about": "Runs recorded by the project (benchmarks/record_gallery.py); each file is a "
                         "trace.json: load it with app.recorded.load_trace or `python -m app trace FILE`.",
                "runs": entries}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return entries


def _f(x, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def machines(traces) -> str:
    """Each device the traces ran on: its name and dtype, and for a CPU its host's lscpu model
    name and cores (as recorded in the files; this machine's for files from before that)."""
    seen = []
    for t in traces:
        d, r = t.device, t.recorded
        host = f"CPU `{r.get('cpu_model') or cpu_model()}` (lscpu model name), {r.get('cpu_count') or os.cpu_count()} cores visible"
        line = host + (f", {d.get('dtype')}" if d.get("device") == "cpu" else f"; GPU `{d.get('device_name')}`, {d.get('dtype')}")
        seen += [line] if line not in seen else []
    return "; ".join(seen) + f" (the traces' device names: {', '.join(sorted({t.device.get('device_name') or '?' for t in traces}))})"


def threads(traces) -> str:
    """The torch thread counts the traces recorded, e.g. "2 threads per run"."""
    counts = sorted({t.recorded.get("threads") for t in traces if t.recorded.get("threads")})
    return (" or ".join(map(str, counts)) + " threads per run, each file's `recorded.threads`") if counts else "not recorded"


def write_readme(out: Path, entries: list[dict]) -> None:
    commits = sorted({e["commit"] or "unknown" for e in entries})
    dates = sorted(e["date"] or "" for e in entries)
    traces = [load_trace(out / e["file"]) for e in entries]
    versions = sorted({json.loads((out / e["file"]).read_text()).get("schema_version", 1) for e in entries})
    first = traces[0].recorded if traces else {}
    loads = [t.recorded.get("load_average_1min") for t in traces if t.recorded.get("load_average_1min") is not None]
    roofs = sorted({(t.device["measured"]["bytes_per_s"], t.device["measured"]["flops_per_s"])
                    for t in traces if isinstance(t.device.get("measured"), dict)})
    rows = [f"| `{e['file']}` | {e['pair']} | {json.dumps(e['prompt'])[1:-1]} | {e['settings']['gamma']} | "
            f"{_f(e['tokens_per_s'], '.1f')} | {_f(e['mean_acceptance_length'], '.2f')} | "
            f"{_f(e['speedup'], '.2f')}× |" for e in entries]
    text = f"""# Recorded runs

Runs the project recorded with its own CLI, kept so that anyone can replay them, compare them
with their own, and read their numbers without loading a model:

    python -m app trace demo_models/recorded/{entries[0]['file'] if entries else 'FILE.json'}

Each `.json` file is a `trace.json` as the Live tab exports it (schema version{'s' if len(versions) > 1 else ''} {' and '.join(map(str, versions))}; an
older file is upgraded when it loads, app.trace.upgrade): every step,
every timed forward pass with its place on the roofline, the device (`device`: its name and
the ceilings measured on it), the settings, and `recorded`: the date, the commit, the exact
command and the machine's load when it ran. `manifest.json` lists the files with their headline
numbers; `tests/test_recorded.py` checks that every file loads and matches its entry.

## What was run

- Machines: {machines(traces)}; torch's default thread count as in the app: {threads(traces)}. Measured ceilings
  (app.hardware, in each file's `device.measured`): {'; '.join(f'{bw / 1e9:.1f} GB/s copy, {fl / 1e9:.1f} GFLOP/s matmul' for bw, fl in roofs) or 'none'}.
- Commit: {', '.join(f'`{c}`' for c in commits)}; recorded {dates[0] if dates else '?'} to {dates[-1] if dates else '?'} (UTC).
- Command: `python benchmarks/record_gallery.py`, which runs, for each prompt,
  `python -m app generate --prompt PROMPT --pair PAIR {' '.join(COMMON)} [flags] --json FILE`
  (for example: `{first.get('command', '')}`).
- Both pairs (the embedded one and `{FLAGSHIP}`) with the app's defaults: the roofline depth
  policy up to γ = 4, the fast path and the int8 draft where they measure faster. Greedy
  decoding, {NEW_TOKENS} new tokens, and plain decoding interleaved for the speed-up and its range. The prompts are the Live tab's examples: prose
  openings for the embedded pair, chat questions for the flagship.
- Times are wall clock on a machine that other jobs shared: the 1-minute load average was
  {f'{min(loads):.1f} to {max(loads):.1f}' if loads else 'not recorded'} on {os.cpu_count()} cores while they ran (each file's
  `recorded.load_average_1min`), so tokens/s and speedups here are what this machine gave then,
  not the pairs' best. Acceptance counts do not depend on the load (greedy decoding).

## The runs

| file | pair | prompt | γ | tokens/s | mean acceptance length | speedup |
|---|---|---|---|---|---|---|
""" + "\n".join(rows) + """

Mean acceptance length = 1 + accepted drafts / drafting steps (vLLM's and llama.cpp's
definition; app/metrics.py); speedup = tokens/s over the baseline run's.
"""
    (out / "README.md").write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=[r[0] for r in RUNS], help="record one pair's runs only")
    ap.add_argument("--device", choices=DEVICES, default="cpu",
                    help="where the runs decode (files are named after it; default: cpu)")
    ap.add_argument("--out", type=Path, default=GALLERY_DIR)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from app.recorded import git_commit
    if git_commit()[1]:
        print("warning: the work tree has uncommitted changes; the files will say dirty: true", file=sys.stderr)
    # every run is recorded before any file in the checkout changes, so each says dirty: false
    staging = Path(tempfile.mkdtemp(prefix="gallery-"))
    for name, preset, flags, prompts in RUNS:
        if args.only and name != args.only:
            continue
        for prompt in prompts:
            record(name, preset, flags, prompt, args.out, args.device, staging)
    for path in sorted(staging.glob("*.json")):
        shutil.move(str(path), args.out / path.name)
    entries = write_manifest(args.out)
    write_readme(args.out, entries)
    for e in entries:
        print(f"{e['file']:60s} {_f(e['tokens_per_s'], '6.1f')} tokens/s  "
              f"mean acceptance length {_f(e['mean_acceptance_length'], '.2f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
