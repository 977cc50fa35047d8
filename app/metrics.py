"""A run's numbers in the serving engines' definitions (vLLM, llama.cpp): pure functions of a
Trace, plain values out, no torch, so the CLI (`python -m app trace`), the engine's Summary,
the stats table and a replay of a recorded run all count the same way.

    mean_acceptance_length = 1 + accepted / drafting steps        (tokens per drafting step)
    draft_acceptance_rate  = accepted / drafted tokens
    per_position_acceptance[i] = drafting steps that accepted > i drafts
                                 / drafting steps that drafted > i

A drafting step is a target pass that verified at least one draft token; a step that drafted
nothing (the baseline, the last token of a run, an n-gram drafter that found no match) counts
in tokens per pass but not in the acceptance figures. Steps of different gamma are fine: a
position counts only in the steps that drafted that far.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from app.lessons.verdict import Spread
from app.settings import InputError
from app.trace import Baseline, StepEvent, Trace

MODELS = ("draft", "target")
WIDE_SPREAD = 0.2  # (max - min) / median of the speed-up samples above this: said in words
SERIES = ("spec_tokens_per_s", "plain_tokens_per_s", "load_avg")  # Baseline's lists of numbers
MAX_RUNS = 1024
CLASSES = ("memory", "compute", "overhead")  # ForwardTiming.bound, as app.roofline classifies


@dataclass
class Counts:
    """What a list of steps holds; passes exclude the prefill (as Summary always has)."""
    new_tokens: int
    steps: int
    drafting_steps: int
    drafted: int
    accepted: int
    target_passes: int
    draft_passes: int


def counts(steps: list[StepEvent]) -> Counts:
    """Tokens, drafts and passes of `steps` (app.engine.summarize builds the Summary from them)."""
    forwards = [f for s in steps for f in s.forwards if f.phase != "prefill"]
    return Counts(new_tokens=sum(len(s.emitted_ids) for s in steps), steps=len(steps),
                  drafting_steps=sum(1 for s in steps if s.draft_ids),
                  drafted=sum(len(s.draft_ids) for s in steps),
                  accepted=sum(s.n_accepted for s in steps if s.draft_ids),
                  target_passes=sum(f.model == "target" for f in forwards),
                  draft_passes=sum(f.model == "draft" for f in forwards))


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _mean_length(c: Counts) -> float | None:
    return 1 + c.accepted / c.drafting_steps if c.drafting_steps else None


def mean_acceptance_length(steps: list[StepEvent]) -> float | None:
    """1 + accepted drafts / drafting steps: tokens one drafting step yields (vLLM's "mean
    acceptance length", llama.cpp's accepted-per-draft plus the target's own token).
    None when no step drafted."""
    return _mean_length(counts(steps))


def draft_acceptance_rate(steps: list[StepEvent]) -> float | None:
    """Accepted drafts / drafted tokens; None when nothing was drafted."""
    c = counts(steps)
    return _ratio(c.accepted, c.drafted)


def per_position_acceptance(steps: list[StepEvent]) -> list[float]:
    """[i] = drafting steps that accepted more than i drafts / drafting steps that drafted more
    than i, for i = 0 .. the deepest draft - 1 (the chance the (i+1)-th draft survives, among
    steps that drafted it)."""
    depth = max((len(s.draft_ids) for s in steps), default=0)
    out = []
    for i in range(depth):
        reached = [s for s in steps if len(s.draft_ids) > i]
        out.append(sum(s.n_accepted > i for s in reached) / len(reached))
    return out


def wall_seconds(trace: Trace) -> tuple[float, str]:
    """The run's seconds and where they come from: the summary's wall clock of the decode loop
    (prefill included) when the run finished, else the sum of its timed forward passes."""
    if trace.summary is not None:
        return trace.summary.seconds, "wall clock"
    return sum(f.seconds for f in trace.forwards()), "forward passes"


def time_by_model(trace: Trace) -> dict[str, float]:
    """Seconds in the draft's and the target's forward passes (prefill included) and "other":
    the rest of the wall clock (sampling, verification, bookkeeping)."""
    seconds, _ = wall_seconds(trace)
    out = {m: sum(f.seconds for f in trace.forwards() if f.model == m) for m in MODELS}
    out["other"] = max(0.0, seconds - sum(out.values()))
    return out


def time_by_class(trace: Trace) -> dict[str, float]:
    """Seconds in memory-, compute- and overhead-bound passes (ForwardTiming.bound), and in
    passes nobody classified ("unclassified": no ceilings were measured)."""
    out = {c: 0.0 for c in CLASSES + ("unclassified",)}
    for f in trace.forwards():
        out[f.bound if f.bound in CLASSES else "unclassified"] += f.seconds
    return out


def device(trace: Trace) -> dict:
    """Where the run ran: device, dtype, the device's name and its measured ceilings (present in
    traces exported with them: app.cli adds Ceilings.to_dict() to Trace.device)."""
    d = trace.device or {}
    measured = d.get("measured") if isinstance(d.get("measured"), dict) else {}
    flops, bw = measured.get("flops_per_s"), measured.get("bytes_per_s")
    return {"device": d.get("device"), "dtype": d.get("dtype"), "name": d.get("device_name"),
            "measured_flops_per_s": flops, "measured_bytes_per_s": bw,
            "ridge_flops_per_byte": flops / bw if flops and bw else None}


def check_baseline_numbers(v: dict, where: str) -> None:
    """The numbers of a Baseline read from a file (app.recorded checks the rest): tokens_per_s,
    seconds, cores and the SERIES lists (at most MAX_RUNS entries), each finite and >= 0;
    InputError naming the first that is not."""
    def number(x, at: str) -> None:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
            shown = repr(x) if len(repr(x)) <= 60 else repr(x)[:57] + "..."
            raise InputError(f"{at} must be a finite number >= 0, got {shown}")
    for k in ("tokens_per_s", "seconds", "cores"):
        number(v.get(k, 0), f"{where}.{k}")
    for k in SERIES:
        values = v.get(k, [])
        if not isinstance(values, list) or len(values) > MAX_RUNS:
            raise InputError(f"{where}.{k} must be a list of at most {MAX_RUNS} numbers")
        for i, x in enumerate(values):
            number(x, f"{where}.{k}[{i}]")


def interleaved_speedups(spec_tps: list[float], plain_tps: list[float]) -> list[float]:
    """Speed-up samples of runs made in the order spec[0], plain[0], spec[1], plain[1], ...
    (app.engine.measure_speedup): one per pair of neighbours, speculative tokens/s over plain
    tokens/s, so a change of load between two samples hits both runs of each alike. With 2 + 2
    runs: [s0/p0, s1/p0, s1/p1]. Pairs with a run of 0 tokens/s are left out."""
    order = [("spec", x) for x in spec_tps[:1]]
    for i, p in enumerate(plain_tps):
        order.append(("plain", p))
        order += [("spec", x) for x in spec_tps[i + 1:i + 2]]
    out = []
    for (kind_a, a), (_, b) in zip(order, order[1:]):
        spec, plain = (a, b) if kind_a == "spec" else (b, a)
        if spec > 0 and plain > 0:
            out.append(spec / plain)
    return out


def speedup_spread(baseline: Baseline | None, spec_tps: float | None = None) -> Spread | None:
    """The speed-up's samples as a Spread (min / median / max): from the interleaved runs, or
    for a trace without them (an older export) the one ratio spec_tps / baseline tokens/s."""
    if baseline is None:
        return None
    samples = interleaved_speedups(baseline.spec_tokens_per_s, baseline.plain_tokens_per_s)
    if not samples and spec_tps and baseline.tokens_per_s > 0:
        samples = [spec_tps / baseline.tokens_per_s]
    return Spread.of(samples) if samples else None


def measurement_notes(spread: Spread | None, load_avg: list[float], cores: int) -> list[str]:
    """Sentences that say when the speed-up is not to be trusted: a spread wider than WIDE_SPREAD
    between interleaved runs, or a 1-minute load average above the cores (other work shared the
    CPU). Empty when neither holds."""
    notes = []
    if spread is not None and spread.n > 1 and spread.width > WIDE_SPREAD:
        notes.append(f"wide spread: the speed-up varied by {spread.width:.0%} of its median between "
                     f"interleaved runs (more than {WIDE_SPREAD:.0%}), so the load changed while it was "
                     "measured; run it again on a quiet machine")
    busy = max(load_avg, default=0.0)
    if cores and busy > cores:
        notes.append(f"busy machine: the 1-minute load average was {busy:.1f} on {cores} cores, so "
                     "other work shared the CPU with these runs")
    return notes


def summary(trace: Trace) -> dict:
    """Every number above for one trace, as plain values (None where undefined), plus the
    baseline's throughput and the speedup when the trace carries a baseline run."""
    c = counts(trace.steps)
    seconds, source = wall_seconds(trace)
    settings = trace.settings or {}
    out = {
        "pair": (getattr(trace, "recorded", None) or {}).get("pair"),
        "models": {k: trace.models.get(k) for k in MODELS} if trace.models else {},
        "device": device(trace),
        "settings": {k: settings.get(k) for k in ("gamma", "temperature", "top_k", "top_p", "seed",
                                                  "max_new_tokens", "drafter", "fast", "draft_int8")},
        "stopped": trace.stopped,
        **{k: getattr(c, k) for k in ("new_tokens", "steps", "drafting_steps", "drafted", "accepted",
                                      "target_passes", "draft_passes")},
        "mean_acceptance_length": _mean_length(c),
        "draft_acceptance_rate": _ratio(c.accepted, c.drafted),
        "per_position_acceptance": per_position_acceptance(trace.steps),
        "tokens_per_target_pass": _ratio(c.new_tokens, c.target_passes),
        "seconds": seconds, "seconds_from": source,
        "tokens_per_s": _ratio(c.new_tokens, seconds),
        "time_by_model_s": time_by_model(trace),
        "time_by_class_s": time_by_class(trace),
        "depth_policy": settings.get("depth_policy"), "policy_note": settings.get("policy_note"),
        "baseline": None, "speedup": None, "speedup_spread": None, "speedup_notes": [],
    }
    b = trace.baseline
    if b is not None:
        out["baseline"] = {"new_tokens": len(b.output_ids), "seconds": b.seconds,
                           "tokens_per_s": b.tokens_per_s, "identical": b.identical,
                           "spec_tokens_per_s": list(b.spec_tokens_per_s),
                           "plain_tokens_per_s": list(b.plain_tokens_per_s)}
        spread = speedup_spread(b, out["tokens_per_s"])
        if spread is not None:
            out["speedup"], out["speedup_spread"] = spread.median, spread.to_dict()
        out["speedup_notes"] = measurement_notes(spread, list(b.load_avg), b.cores)
    return out


def speedup_text(s: dict) -> str:
    """The speed-up of summary() in words: median, range and samples, or n/a."""
    sp = s.get("speedup_spread")
    if not sp:
        return "n/a"
    if sp["n"] == 1:
        return f"{sp['median']:.2f}x (one plain run after the speculative one)"
    return (f"{sp['median']:.2f}x median, range {sp['min']:.2f}–{sp['max']:.2f}x "
            f"({sp['n']} neighbouring pairs of interleaved speculative and plain runs)")


def _text(x, cap: int = 120) -> str:
    """A string from a trace file, safe on a terminal: control characters (ANSI escapes, new
    lines) escaped, at most `cap` characters."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(x))
    return text if len(text) <= cap else text[:cap - 3] + "..."


def _num(x, fmt: str, none: str = "n/a") -> str:
    return none if x is None else format(x, fmt)


def _split(parts: dict[str, float], total: float) -> str:
    return ", ".join(f"{k} {v:.3f} s ({v / total:.0%})" if total > 0 else f"{k} {v:.3f} s"
                     for k, v in parts.items())


def summary_lines(s: dict) -> list[str]:
    """summary() as one line per metric, each with its unit (the `python -m app trace` output)."""
    dev = s["device"]
    where = f"{_text(dev['device'] or '?')}, {_text(dev['dtype'] or '?')}" + (f", {_text(dev['name'])}" if dev["name"] else "")
    if dev["measured_bytes_per_s"] and dev["measured_flops_per_s"]:
        where += (f"; measured {dev['measured_bytes_per_s'] / 1e9:.1f} GB/s, "
                  f"{dev['measured_flops_per_s'] / 1e9:.1f} GFLOP/s")
    st = s["settings"]
    temp = st.get("temperature")
    mode = "greedy" if temp == 0 else f"T = {temp}" if temp is not None else "?"
    per_pos = " ".join(f"{x:.2f}" for x in s["per_position_acceptance"]) or "n/a"
    total = s["seconds"]
    lines = [
        f"pair                     {_text(s['pair'] or 'preset not recorded')} (target {_text(s['models'].get('target'))}, "
        f"draft {_text(s['models'].get('draft'))})",
        f"device                   {where}",
        f"settings                 gamma {st.get('gamma')}, {mode}, drafter {_text(st.get('drafter'))}, "
        f"max {st.get('max_new_tokens')} new tokens, fast path {'on' if st.get('fast') else 'off'}"
        f"{', int8 draft' if st.get('draft_int8') else ''}",
        f"new tokens               {s['new_tokens']} tokens in {s['steps']} steps ({s['drafting_steps']} drafting; "
        f"stopped: {_text(s['stopped'] or '?')})",
        f"mean acceptance length   {_num(s['mean_acceptance_length'], '.3f')} tokens per drafting step "
        f"(1 + {s['accepted']} accepted / {s['drafting_steps']} drafting steps)",
        f"draft acceptance rate    {_num(s['draft_acceptance_rate'], '.3f')} "
        f"({s['accepted']} accepted / {s['drafted']} drafted tokens)",
        f"per-position acceptance  {per_pos} (position 1, 2, ...: fraction of drafting steps that reached it)",
        f"tokens per target pass   {_num(s['tokens_per_target_pass'], '.3f')} tokens "
        f"({s['new_tokens']} tokens / {s['target_passes']} target passes, prefill excluded; "
        f"{s['draft_passes']} draft passes)",
        f"throughput               {_num(s['tokens_per_s'], '.2f')} tokens/s "
        f"({s['new_tokens']} tokens in {total:.3f} s, {s['seconds_from']})",
        f"time by model            {_split(s['time_by_model_s'], total)}",
        f"time by class            {_split(s['time_by_class_s'], total)}",
    ]
    b = s["baseline"]
    if b is not None:
        same = "" if b["identical"] is None else f"; greedy outputs identical: {'yes' if b['identical'] else 'NO'}"
        lines.append(f"baseline (target only)   {b['tokens_per_s']:.2f} tokens/s ({b['new_tokens']} tokens in "
                     f"{b['seconds']:.3f} s){same}")
        lines.append(f"speedup                  {speedup_text(s)}")
        lines += [f"note                     {n}" for n in s["speedup_notes"]]
    if s.get("policy_note"):
        lines.append(f"depth policy             {_text(s['depth_policy'] or '?')}: {_text(s['policy_note'], 500)}")
    return lines
