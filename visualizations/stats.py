"""A run's numbers as a compact Markdown table (for gr.Markdown or a terminal)."""
from __future__ import annotations

from app.metrics import mean_acceptance_length
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
    """Measured speedup: speculative tokens/s divided by the baseline's, or None."""
    if trace.summary is None or trace.baseline is None or trace.baseline.tokens_per_s <= 0:
        return None
    return trace.summary.tokens_per_s / trace.baseline.tokens_per_s


def _summary_rows(trace: Trace) -> list[tuple[str, str]]:
    s = trace.summary
    rows = [("new tokens", f"{s.new_tokens} in {s.seconds:.3f} s")]
    if s.drafted > 0:
        rows.append(("acceptance rate",
                     f"{s.acceptance_rate:.1%} ({s.accepted} of {s.drafted} drafted)"))
        rows.append(("mean acceptance length",  # app.metrics: 1 + accepted / drafting steps
                     f"{mean_acceptance_length(trace.steps):.2f} tokens per drafting step"))
    rows.append(("tokens per target pass", f"{s.tokens_per_pass:.2f}"))
    passes = f"target {s.target_passes}"
    if s.draft_passes > 0:
        passes += f" · draft {s.draft_passes}"
    rows.append(("forward passes", passes))
    rows.append(("throughput", f"{s.tokens_per_s:.1f} tokens/s"))
    if s.flops > 0:
        rows.append(("estimated compute", _si(s.flops, "FLOP")))
    return rows


def _baseline_rows(trace: Trace) -> list[tuple[str, str]]:
    b = trace.baseline
    rows = [("baseline throughput", f"{b.tokens_per_s:.1f} tokens/s (autoregressive, target only)")]
    ratio = speedup(trace)
    if ratio is not None:
        rows.append(("measured speedup", f"**{ratio:.2f}×**"))
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
