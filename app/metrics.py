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

from dataclasses import dataclass

from app.trace import StepEvent, Trace

MODELS = ("draft", "target")
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
        "baseline": None, "speedup": None,
    }
    b = trace.baseline
    if b is not None:
        out["baseline"] = {"new_tokens": len(b.output_ids), "seconds": b.seconds,
                           "tokens_per_s": b.tokens_per_s, "identical": b.identical}
        if b.tokens_per_s > 0 and out["tokens_per_s"]:
            out["speedup"] = out["tokens_per_s"] / b.tokens_per_s
    return out


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
        lines.append(f"speedup                  {_num(s['speedup'], '.3f')}x (tokens/s over the baseline's)")
    return lines
