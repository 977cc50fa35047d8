"""A run's numbers as a compact Markdown table (for gr.Markdown or a terminal)."""
from __future__ import annotations

from app.metrics import (mean_acceptance_length, measurement_notes, per_position_acceptance,
                         speedup_spread)
from app.trace import Trace

# One normal-sized line in italics (a <sub> footnote is unreadably small on a projector).
FOOTNOTE = ("*Times are wall clock, read after synchronising the device; tokens/s counts "
            "emitted tokens over the whole decode loop, prefill included.*")


def _si(x: float, unit: str) -> str:
    """1.23e9 -> '1.23 G' + unit."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {prefix}{unit}"
    return f"{x:.0f} {unit}"


def speedup(trace: Trace) -> float | None:
    """Measured speedup: the median of the interleaved runs' ratios (app.metrics.speedup_spread;
    one ratio for an older trace), or None."""
    spread = None if trace.summary is None else speedup_spread(trace.baseline, trace.summary.tokens_per_s)
    return None if spread is None else spread.median


def _summary_rows(trace: Trace) -> list[tuple[str, str]]:
    s = trace.summary
    rows = [("new tokens", f"{s.new_tokens} in {s.seconds:.3f} s")]
    if s.drafted > 0:
        rows.append(("acceptance rate",
                     f"{s.acceptance_rate:.1%} ({s.accepted} of {s.drafted} drafted)"))
        rows.append(("mean acceptance length",  # app.metrics: 1 + accepted / drafting steps
                     f"{mean_acceptance_length(trace.steps):.2f} tokens per drafting step "
                     "(1 + accepted / drafting steps, as vLLM and llama.cpp count it)"))
        by_position = " · ".join(f"{i + 1}: {x:.0%}" for i, x in enumerate(per_position_acceptance(trace.steps)))
        rows.append(("acceptance by draft position", by_position))
    rows.append(("tokens per target pass", f"{s.tokens_per_pass:.2f}"))
    passes = f"target {s.target_passes}"
    if s.draft_passes > 0:
        passes += f" · draft {s.draft_passes}"
    rows.append(("forward passes", passes))
    rows.append(("throughput", f"{s.tokens_per_s:.1f} tokens/s"))
    if s.flops > 0:
        rows.append(("estimated compute", _si(s.flops, "FLOP")))
    settings = trace.settings or {}
    if settings.get("policy_note"):
        rows.append((f"depth policy ({settings.get('depth_policy', '?')})", str(settings["policy_note"])))
    for key, name in (("fast_path_choice", "fast path (measured)"), ("draft_int8_choice", "int8 draft (measured)")):
        if settings.get(key):
            rows.append((name, str(settings[key])))
    return rows


def _baseline_rows(trace: Trace) -> list[tuple[str, str]]:
    b = trace.baseline
    rows = [("baseline throughput", f"{b.tokens_per_s:.1f} tokens/s (autoregressive, target only)")]
    spread = speedup_spread(b, trace.summary.tokens_per_s)
    if spread is not None and spread.n > 1:
        rows.append(("measured speedup", f"**{spread.median:.2f}×** (range {spread.min:.2f}–{spread.max:.2f}× "
                     f"over {spread.n} neighbouring pairs of {len(b.spec_tokens_per_s)} speculative and "
                     f"{len(b.plain_tokens_per_s)} plain runs, interleaved)"))
    elif spread is not None:
        rows.append(("measured speedup", f"**{spread.median:.2f}×** (one plain run after this one)"))
    rows += [("⚠ " + note.split(":")[0], note.split(": ", 1)[-1])
             for note in measurement_notes(spread, list(b.load_avg), b.cores)]
    if b.identical is not None:
        rows.append(("greedy outputs identical", "yes ✓" if b.identical else "**no ✗**"))
    return rows


def stats_markdown(trace: Trace) -> str:
    """Acceptance, tokens per pass, passes per model, throughput, FLOPs, and against the
    baseline (when present) its throughput, the measured speedup and greedy identity."""
    if trace.summary is None:
        return "_No finished run yet._"
    rows = _summary_rows(trace)
    if trace.baseline is not None:
        rows += _baseline_rows(trace)
    lines = ["| measure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    return "\n".join(lines) + "\n\n" + FOOTNOTE + "\n"
