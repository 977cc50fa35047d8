"""Figures and HTML built from a saved trace (tests/data/trace_small.json): no model runs."""
from dataclasses import replace
import html
import math
import re
import subprocess
import sys
from pathlib import Path

import plotly.graph_objects as go
import pytest

from app.trace import FATES, Check, ForwardTiming, Piece, StepEvent, Trace
from visualizations import (batch_figure, inspector_figure, knee_figure, legend_html,
                            prompt_html, roofline_figure, stats_markdown, step_timeline,
                            token_stream_html)
from visualizations.knee import floors_cross
from visualizations.layout import log_ticks, nice_step, tick_label
from visualizations.tokens import SPECIAL_TEXT, STYLE

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "data" / "trace_small.json"
CEILINGS = {"device": "cpu", "device_name": "AMD EPYC", "dtype": "float32",
            "measured": {"flops_per_s": 1.9e11, "bytes_per_s": 2.0e10},
            "datasheet": {"flops_per_s": 3.0e11, "bytes_per_s": 4.0e10, "source": "spec sheet"}}


@pytest.fixture(scope="module")
def trace() -> Trace:
    return Trace.from_json(FIXTURE.read_text())


def by_role(fig: go.Figure, role: str) -> list:
    return [t for t in fig.data if isinstance(t.meta, dict) and t.meta.get("role") == role]


def all_pieces(trace: Trace) -> list[Piece]:
    return [p for s in trace.steps for p in s.pieces]


def assert_clean_log_ticks(axis, decades_only: bool = False) -> list[float]:
    """A log axis with explicit ticks at 1-2-5 (or only 1) times a power of ten, each with a
    full-size label: no plotly minor labels ("2", "5") squeezed between decades."""
    vals = list(axis.tickvals)
    assert axis.type == "log" and axis.tickmode == "array" and len(vals) >= 2
    assert len(axis.ticktext) == len(vals) and all(axis.ticktext)
    for v in vals:
        mantissa = v / 10 ** math.floor(math.log10(v) + 1e-9)
        allowed = (1,) if decades_only else (1, 2, 5)
        assert any(mantissa == pytest.approx(m) for m in allowed), v
    return vals


def legend_outside_plot(fig: go.Figure) -> bool:
    """The legend sits above or below the plot area (paper y outside 0..1), not over data."""
    legend = fig.layout.legend
    y = legend.y if legend.y is not None else 1
    return (y < 0 and legend.yanchor == "top") or (y > 1 and legend.yanchor == "bottom")


# --- shared layout helpers ------------------------------------------------------------------

def test_tick_labels_and_steps():
    assert [tick_label(v) for v in (0.1, 1, 10, 100, 1e3, 1e9, 1e10, 1e11, 2e12)] == \
        ["0.1", "1", "10", "100", "1k", "1G", "10G", "100G", "2T"]
    wide = log_ticks(0.05, 2000)
    assert wide["tickvals"] == [0.1, 1, 10, 100, 1000] and wide["ticktext"][0] == "0.1"
    short = log_ticks(3.0, 40.0)  # under three decades: 1-2-5
    assert short["tickvals"] == [5, 10, 20] and short["ticktext"] == ["5", "10", "20"]
    assert log_ticks(0.05, 6.0)["tickvals"] == [0.05, 0.1, 0.2, 0.5, 1, 2, 5]
    assert log_ticks(0.05, 6.0, decades_only=True)["tickvals"] == [0.1, 1]
    assert log_ticks(5.2, 6.7) == {} and log_ticks(0, 10) == {}  # plotly's own ticks
    assert [nice_step(n) for n in (1, 15, 16, 27, 30, 31, 75, 76, 400)] == \
        [1, 1, 2, 2, 2, 5, 5, 10, 50]


# --- the fixture itself -------------------------------------------------------------------

def test_fixture_covers_what_the_figures_need(trace):
    fates = {p.fate for p in all_pieces(trace)}
    assert {"accepted", "rejected", "correction", "bonus"} <= fates
    rejected = [c for s in trace.steps for c in s.checks if not c.accepted]
    assert any(c.residual_ids for c in rejected)
    assert trace.summary is not None and trace.baseline is not None and trace.baseline.identical
    assert all(f.flops > 0 and f.bytes > 0 and f.bound for f in trace.forwards())


# --- token stream ---------------------------------------------------------------------------

def test_stream_has_a_span_per_piece_and_every_fate(trace):
    pieces = all_pieces(trace) + [Piece(1, "x", "target", 9)]
    out = token_stream_html(pieces, finished=False)
    assert out.count('class="tok tok-') == len(pieces)
    for fate in FATES:
        assert f'class="tok tok-{fate}"' in out
        assert f".tok-{fate}" in STYLE


def test_stream_escapes_token_text():
    evil = [Piece(1, "<script>alert(1)</script>", "accepted", 0, 0.5, 0.25),
            Piece(2, ' say "hi" ', "rejected", 0, None, 0.1)]
    out = token_stream_html(evil, finished=True)
    assert "<script>" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert ' say &quot;hi&quot; ' in out  # leading/trailing spaces kept (white-space: pre-wrap)
    assert '"hi"' not in out
    assert "pre-wrap" in STYLE


def test_stream_hover_title_and_newlines():
    out = token_stream_html([Piece(7, "a\nb", "correction", 3, 0.4567, None)], finished=False)
    assert 'title="step 3 · correction · p=0.457 · q=—"' in out
    assert "<br>" in out and "a\nb" not in out


@pytest.mark.parametrize("special", ["<|im_end|>", "<|endoftext|>", "</s>"])
def test_a_special_token_reads_as_words_with_its_text_in_the_title(special):
    """The chat's end-of-turn token is a real emitted token (it keeps its chip and fate) but reads
    as "end of reply", its raw text kept in the hover title. What decides is Piece.special (the
    tokenizer's special ids), not the text: an ordinary token that reads the same stays text."""
    out = token_stream_html([Piece(2, special, "bonus", 4, 0.9, None, special=True),
                             Piece(3, "a <|x|> b", "accepted", 5, 0.5, 0.4),
                             Piece(4, special, "accepted", 6, 0.5, 0.4)], finished=True)
    assert out.count('class="tok tok-') == 3
    assert out.count(html.escape(special)) == 2  # the special one's title, the ordinary one's text
    assert f'<span class="tok-special">{SPECIAL_TEXT}</span>' in out and out.count("tok-special") == 1
    assert f"special token {html.escape(special)}: the model ends its reply" in out
    assert "a &lt;|x|&gt; b" in out and ".tok-special" in STYLE


def test_end_marker_only_when_finished(trace):
    pieces = all_pieces(trace)
    done = token_stream_html(pieces, finished=True)
    streaming = token_stream_html(pieces, finished=False)
    assert done.count('data-testid="stream-end"') == 1 and 'id="stream-end"' in done
    assert "stream-end" not in streaming and "end of stream" not in streaming
    assert done.index("stream-end") > done.rindex('class="tok ')


def test_legend_and_prompt():
    legend = legend_html()
    for fate in FATES:
        assert f"swatch-{fate}" in legend and f"<b>{fate}</b>" in legend
    out = prompt_html('Say <b>"hi"</b>')
    assert "<b>" not in out and "&lt;b&gt;&quot;hi&quot;&lt;/b&gt;" in out


def test_bonus_and_rejected_fills_differ():
    """Rejected tokens are hatched (a pattern, not only a hue); the bonus tint is far from the
    rejected one in RGB (the old pair, #F5E4ED vs #F7DFCC, differed by at most 33 per channel;
    now 48 in green)."""
    from visualizations.colors import FATE_TINTS
    from visualizations.tokens import FATE_FILLS, STYLE
    assert "repeating-linear-gradient" in FATE_FILLS["rejected"]
    assert all("gradient" not in FATE_FILLS[f] for f in FATES if f != "rejected")
    rgb = lambda c: [int(c[i:i + 2], 16) for i in (1, 3, 5)]  # noqa: E731
    far = max(abs(a - b) for a, b in zip(rgb(FATE_TINTS["bonus"]), rgb(FATE_TINTS["rejected"])))
    assert far >= 45
    assert f".tok-rejected {{ background: {FATE_FILLS['rejected']}" in STYLE
    assert ".swatch-rejected { background: linear-gradient" in STYLE  # the strike, over the hatching


# --- step timeline --------------------------------------------------------------------------

def test_timeline_one_x_per_step(trace):
    fig = step_timeline(trace)
    steps = [s.index for s in trace.steps]
    bars = by_role(fig, "phase")
    assert {b.meta["phase"] for b in bars} == {"prefill", "draft", "verify"}
    for b in bars:
        assert list(b.x) == steps
    draft = next(b for b in bars if b.meta["phase"] == "draft")
    expected = [1e3 * sum(f.seconds for f in s.forwards if f.phase == "draft") for s in trace.steps]
    assert list(draft.y) == pytest.approx(expected)
    assert list(draft.customdata) == [3, 3, 3, 3]
    tokens = by_role(fig, "tokens")[0]
    assert list(tokens.y) == [len(s.emitted_ids) for s in trace.steps] == [4, 2, 1, 3]
    assert fig.layout.barmode == "stack" and "ms" in fig.layout.yaxis.title.text
    assert fig.layout.title.text


def test_timeline_axis_starts_at_the_first_step(trace):
    fig = step_timeline(trace)
    first, last = trace.steps[0].index, trace.steps[-1].index
    x = fig.layout.xaxis
    assert x.range[0] == pytest.approx(first - 0.5) and x.range[1] == pytest.approx(last + 0.5)
    assert x.tick0 == first and x.dtick == 1 and x.tickmode == "linear"
    many = [replace(s, index=i) for i, s in enumerate((trace.steps * 10)[:27])]
    x = step_timeline(many).layout.xaxis
    assert x.range[0] == pytest.approx(-0.5) and x.tick0 == 0 and x.dtick == 2  # 14 labels
    later = step_timeline(trace.steps[2:]).layout.xaxis  # a window that starts at step 2
    assert later.range[0] == pytest.approx(1.5) and later.tick0 == 2


def test_timeline_of_the_baseline(trace):
    fig = step_timeline(trace.baseline.steps)
    decode = [b for b in by_role(fig, "phase") if b.meta["phase"] == "decode"][0]
    assert len(decode.x) == len(trace.baseline.steps) == 10
    assert "autoregressive" in fig.layout.title.text
    assert len(step_timeline([]).data) == 0


def test_timeline_legend_below_never_under_the_title(trace):
    """Above the plot, a legend that wraps onto two or three rows ran into the title."""
    legend = step_timeline(trace).layout.legend
    assert legend.y < 0 and legend.yanchor == "top"


# --- roofline -------------------------------------------------------------------------------

def test_roofline_one_point_per_costed_forward(trace):
    forwards = trace.forwards() + [replace(trace.forwards()[0], flops=0.0)]
    fig = roofline_figure(forwards, CEILINGS)
    points = by_role(fig, "forward")
    assert sum(len(t.x) for t in points) == len(trace.forwards()) == 18
    assert len({t.marker.symbol for t in points}) == len(points) == 3  # prefill, draft, verify
    verify = next(t for t in points if t.meta["phase"] == "verify")
    f = next(f for f in trace.forwards() if f.phase == "verify")
    assert verify.x[0] == pytest.approx(f.flops / f.bytes)
    assert verify.y[0] == pytest.approx(f.flops / f.seconds)
    assert "bound: overhead" in verify.text[0] and "ms" in verify.text[0]
    assert "AMD EPYC" in fig.layout.title.text


def test_roofline_hover_names_int8_weights(trace):
    drafts = [replace(f, weights="int8") if f.phase == "draft" else f for f in trace.forwards()]
    points = by_role(roofline_figure(drafts, CEILINGS), "forward")
    texts = {t.meta["phase"]: t.text[0] for t in points}
    assert "draft model (int8 weights)" in texts["draft"] and "int8" not in texts["verify"]


def test_roofline_hover_names_a_pass_without_logits(trace):
    passes = [replace(f, logits=False) if f.phase == "prefill" else f for f in trace.forwards()]
    texts = {t.meta["phase"]: t.text[0] for t in by_role(roofline_figure(passes, CEILINGS), "forward")}
    assert "prefill (KV cache only, no output layer)" in texts["prefill"]
    assert "output layer" not in texts["verify"] + texts["draft"]


def test_roofline_roofs_and_ridges():
    fig = roofline_figure([], CEILINGS)
    roofs = {t.meta["kind"]: t for t in by_role(fig, "roof")}
    assert roofs["measured"].line.dash == "solid" and roofs["datasheet"].line.dash == "dash"
    ridge = {t.meta["kind"]: t for t in by_role(fig, "ridge")}
    assert ridge["measured"].x[0] == pytest.approx(1.9e11 / 2.0e10)
    assert max(roofs["measured"].y) == pytest.approx(1.9e11)
    assert "ridge" in ridge["measured"].text[0]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert not by_role(fig, "forward") and fig.layout.annotations  # "no passes yet"
    no_sheet = roofline_figure([], dict(CEILINGS, datasheet=None))
    assert [t.meta["kind"] for t in by_role(no_sheet, "roof")] == ["measured"]
    assert isinstance(roofline_figure([], None), go.Figure)


def _inside(x: float, y: float, xs, ys) -> bool:
    """Whether (x, y) lies inside the polygon (xs, ys), on log axes (ray casting)."""
    x, y = math.log10(x), math.log10(y)
    px, py = [math.log10(v) for v in xs], [math.log10(v) for v in ys]
    inside, j = False, len(px) - 1
    for i in range(len(px)):
        if (py[i] > y) != (py[j] > y) and x < (px[j] - px[i]) * (y - py[i]) / (py[j] - py[i]) + px[i]:
            inside = not inside
        j = i
    return inside


def test_roofline_regions_match_the_classification():
    """Each shaded region holds exactly the passes app.roofline.classify puts in its class, the
    points are coloured by that class, and each region is named in visible text."""
    from app.hardware import Ceilings
    from app.roofline import OVERHEAD_FACTOR, classify
    from visualizations.colors import BOUND_COLORS
    from visualizations.roofline import OVERHEAD_FACTOR as DRAWN
    assert DRAWN == OVERHEAD_FACTOR
    c = Ceilings(device="cpu", device_name="AMD EPYC", dtype="float32",
                 measured_flops_per_s=1.9e11, measured_bytes_per_s=2.0e10)
    passes = []
    for intensity in (0.5, 2.0, 40.0):  # flops / bytes; ridge 9.5
        for slowdown in (1.2, 2.5, 10.0):  # seconds / floor
            flops, bytes_ = intensity * 1e6, 1e6
            seconds = slowdown * max(bytes_ / 2.0e10, flops / 1.9e11)
            bound = classify(seconds, flops, bytes_, c).bound
            passes.append(ForwardTiming(model="target", phase="verify", batch=1, tokens=4, kv_len=8,
                                        seconds=seconds, flops=flops, bytes=bytes_, bound=bound))
    fig = roofline_figure(passes, dict(CEILINGS, overhead_factor=OVERHEAD_FACTOR))
    regions = {t.meta["bound"]: t for t in by_role(fig, "region")}
    assert set(regions) == {"memory", "compute", "overhead"}
    for f in passes:
        x, y = f.flops / f.bytes, f.flops / f.seconds
        assert [b for b, r in regions.items() if _inside(x, y, r.x, r.y)] == [f.bound]
    assert {f.bound for f in passes} == {"memory", "compute", "overhead"}
    (points,) = by_role(fig, "forward")
    assert list(points.marker.color) == [BOUND_COLORS[f.bound] for f in passes]
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert all(word in texts for word in ("memory-bound", "compute-bound", "overhead-bound"))
    legend = [t.name for t in by_role(fig, "legend")]
    assert {"memory-bound", "compute-bound", "overhead-bound", "verify passes"} <= set(legend)


def test_roofline_note_wraps_inside_the_figure():
    from visualizations.roofline import NOTE_WIDTH
    note = "knee hidden: a pass of 8 tokens costs 4.00x one token; python -m app knee --fast. " * 4
    fig = roofline_figure([], dict(CEILINGS, note=note))
    shown = next(a for a in fig.layout.annotations if "knee hidden" in a.text)
    lines = shown.text.split("<br>")
    assert len(lines) > 4 and all(len(line) <= NOTE_WIDTH for line in lines)
    assert "python -m app knee --fast." in shown.text.replace("<br>", " ")  # no word cut


def test_roofline_legend_ticks_and_ranges(trace):
    fig = roofline_figure(trace.forwards(), CEILINGS)
    assert legend_outside_plot(fig)
    xs = assert_clean_log_ticks(fig.layout.xaxis, decades_only=True)
    ys = assert_clean_log_ticks(fig.layout.yaxis, decades_only=True)
    assert {"0.1", "1", "10"} <= set(fig.layout.xaxis.ticktext)
    assert {"1G", "10G", "100G"} <= set(fig.layout.yaxis.ticktext)
    x_lo, x_hi = (10 ** v for v in fig.layout.xaxis.range)
    y_lo, y_hi = (10 ** v for v in fig.layout.yaxis.range)
    assert x_lo <= min(xs) and max(xs) <= x_hi and y_lo <= min(ys) and max(ys) <= y_hi
    intensities = [f.flops / f.bytes for f in trace.forwards()]
    ridges = [t.x[0] for t in by_role(fig, "ridge")]
    assert x_lo <= min(intensities) / 5 and x_hi >= 5 * max(ridges + intensities)
    for roof in by_role(fig, "roof"):  # every roof whole: both ends inside the plotted range
        assert x_lo * 0.999 <= min(roof.x) and max(roof.x) <= x_hi * 1.001
        assert y_lo < min(roof.y) and max(roof.y) < y_hi
    performance = [y for t in by_role(fig, "forward") for y in t.y]
    assert y_lo < min(performance) and max(performance) < y_hi


# --- knee and batch sweeps ------------------------------------------------------------------

def knee_rows(label: str, scale: float) -> list[dict]:
    """H200 8B-shaped numbers from DESIGN.md §3 (fast path), scaled for an 'eager' curve."""
    measured = {1: 5.2e-3, 5: 6.3e-3, 64: 6.7e-3, 256: 9.3e-3, 1024: 28.5e-3}
    return [{"batch": 1, "q": q, "seconds": t * scale, "memory_floor_s": 3.85e-3,
             "compute_floor_s": q * 16e9 / 775e12, "bound": "memory", "label": label}
            for q, t in measured.items()]


def test_knee_curves_floors_and_ratio():
    fig = knee_figure(knee_rows("fast", 1.0) + knee_rows("eager", 4.0))
    measured = by_role(fig, "measured")
    assert [t.name for t in measured] == ["measured (fast)", "measured (eager)"]
    assert list(measured[0].x) == [1, 5, 64, 256, 1024]
    assert [round(c[0], 2) for c in measured[0].customdata] == [1.0, 1.21, 1.29, 1.79, 5.48]
    assert len(by_role(fig, "memory_floor")) == len(by_role(fig, "compute_floor")) == 1
    assert list(by_role(fig, "shade")[0].y)[-1] == pytest.approx(1024 * 16e9 / 775e12 * 1e3)
    assert fig.layout.xaxis.type == "log" and "ms" in fig.layout.yaxis.title.text
    knee = 3.85e-3 * 775e12 / 16e9  # compute floor = memory floor
    assert floors_cross(knee_rows("fast", 1.0), "q") == pytest.approx(knee, rel=1e-6)
    assert assert_clean_log_ticks(fig.layout.xaxis) == [1, 10, 100, 1000]
    assert_clean_log_ticks(fig.layout.yaxis)
    assert legend_outside_plot(fig)


def test_batch_figure_and_empty():
    rows = [{"batch": b, "q": 4, "seconds": 5e-3 + b * 1e-4, "memory_floor_s": 3.85e-3,
             "compute_floor_s": 4 * b * 16e9 / 775e12, "bound": "memory"} for b in (1, 2, 4, 8)]
    fig = batch_figure(rows)
    assert list(by_role(fig, "measured")[0].x) == [1, 2, 4, 8]
    assert "batch" in fig.layout.xaxis.title.text
    assert len(knee_figure([]).data) == 0


def test_lesson_figures_clean_ticks_and_no_notes_beside_the_plot():
    import visualizations.lessons as lessons
    qs = [1, 2, 4, 8, 16, 32, 64]
    spread = lambda v: {"min": v, "median": v, "max": v, "n": 3}  # noqa: E731 (a Spread's to_dict)
    knee = lessons.knee_lesson_figure({
        "qs": qs, "ratios": [spread(r) for r in (1, 1.01, 1.03, 1.1, 1.3, 1.8, 3.0)],
        "seconds": [spread(1e-3)] * 7, "rows": [{"bound": "memory"}] * 7, "bend_ratio": 1.5,
        "bend": 32, "ratio_at_5": 1.04, "model": "tiny"})
    assert assert_clean_log_ticks(knee.layout.xaxis) == [1, 2, 5, 10, 20, 50]
    bend = next(a for a in knee.layout.annotations if "q = 32" in a.text)
    assert bend.yref == "paper" and bend.y < 0.5  # at the foot of its line, not on the curve
    wall = lessons.memory_wall_figure({
        "params": 8e9, "bytes_per_param": 2, "bytes_per_s": 4.8e12, "flops_per_s": 9.9e14,
        "memory_floor_s": 16 / 4.8e3, "compute_floor_s": 16 / 9.9e5, "batch": 1, "q": 1,
        "dtype": "fp16", "device": "H200", "intensity": 1.0})
    assert assert_clean_log_ticks(wall.layout.xaxis, decades_only=True)[-1] == 10_000
    assert assert_clean_log_ticks(wall.layout.yaxis, decades_only=True)
    grid = lessons.batch_depth_figure({
        "batches": [1, 2, 4], "gammas": [0, 1, 2], "speedup": [[1, 1.5, 1.8], [1, 0.9, 1.1],
                                                               [1, 0.8, 0.7]],
        "lose_from_batch": [None, 2, 4], "disable_at_batch": 4, "source": "test"})
    assert not [a for a in grid.layout.annotations if a.xref == "paper" and a.x >= 1]
    named = [t.name for t in grid.data if t.type == "scatter" and t.showlegend]
    assert any("lose" in n for n in named) and any("from b=4 no γ ≥ 1 above 1×" in n
                                                   for n in named)
    assert legend_outside_plot(grid)


# --- stats ----------------------------------------------------------------------------------

def test_stats_markdown_speedup_from_fixture(trace):
    md = stats_markdown(trace)
    expected = trace.summary.tokens_per_s / trace.baseline.tokens_per_s
    assert f"{expected:.2f}×" in md and f"{expected:.2f}" == "1.36"
    assert "50.0%" in md and "2.50" in md and "target 4 · draft 12" in md
    assert "138.7 tokens/s" in md and "101.9 tokens/s" in md
    assert "identical | yes" in md and "synchronis" in md
    assert md.startswith("| measure | value |")
    footnote = md.rstrip("\n").split("\n")[-1]  # one line, normal size, in italics
    assert footnote.startswith("*") and footnote.endswith("*") and "synchronis" in footnote
    assert "<sub>" not in md and "<small>" not in md


def test_stats_without_baseline_or_summary(trace):
    bare = replace(trace, baseline=None)
    assert "speedup" not in stats_markdown(bare)
    different = replace(trace, baseline=replace(trace.baseline, identical=False))
    assert "**no ✗**" in stats_markdown(different)
    assert "No finished run" in stats_markdown(replace(trace, summary=None))


# --- inspector ------------------------------------------------------------------------------

def test_inspector_rejected_position_has_residual(trace):
    step = trace.steps[1]  # " robot" accepted, " who" rejected -> " named"
    fig = inspector_figure(step)
    bars = by_role(fig, "distribution")
    assert [b.name.split()[0] for b in bars] == ["p_target", "q_draft", "residual"]
    assert list(bars[0].x) == ["␣named", "␣who", "#1444", "#326"]  # ids not in pieces: "#id"
    assert list(bars[0].y) == step.checks[1].top_p
    assert list(bars[2].y) == [0.55, None, 0.29, 0.16]
    assert by_role(fig, "r")[0].y[0] == pytest.approx(0.58)
    assert by_role(fig, "threshold")[0].y[0] == pytest.approx(0.21 / 0.62, rel=1e-4)
    assert "rejected" in fig.layout.title.text and "correction" in fig.layout.title.text
    assert list(by_role(fig, "threshold")[0].x) == ["drafted token"] == list(by_role(fig, "r")[0].x)


def panel_notes(fig: go.Figure) -> list:
    """Annotations other than the subplot titles (which plotly puts at paper y = 1)."""
    return [a for a in fig.layout.annotations if not (a.yref == "paper" and a.y == 1)]


def test_inspector_nothing_overlaps_the_subplot_titles(trace):
    for step in trace.steps:
        for position in range(len(step.checks)):
            fig = inspector_figure(step, position)
            titles = [a.text for a in fig.layout.annotations if a.yref == "paper" and a.y == 1]
            assert titles == ["next-token probabilities", "accepted if<br>r < min(1, p/q)"]
            top = fig.layout.yaxis.range[1]
            drafted = next(a for a in panel_notes(fig) if a.text == "drafted")
            assert drafted.y < top  # the arrow's point and its label stay inside the panel
            assert fig.layout.yaxis2.range[1] <= 1.1  # no room above the bar for a note


def test_inspector_greedy_note_inside_its_panel(trace):
    step = trace.steps[0]
    fig = inspector_figure(replace(step, checks=[replace(c, r=None) for c in step.checks]))
    notes = [a for a in panel_notes(fig) if "top<br>choice" in a.text]
    assert len(notes) == 1 and 0 < notes[0].y < 1  # inside the panel, below its title
    x0, x1 = fig.layout.xaxis2.domain
    assert notes[0].xref == "paper" and x0 < notes[0].x < x1 and not notes[0].showarrow
    assert not by_role(fig, "threshold") and not by_role(fig, "r")


def test_inspector_accepted_position_and_token_text(trace):
    fig = inspector_figure(trace.steps[1], 0, token_text={9379: " robot", 2576: "<girl>"})
    bars = by_role(fig, "distribution")
    assert len(bars) == 2  # no residual for an accepted position
    assert "&lt;girl&gt;" in bars[0].x and "<girl>" not in bars[0].x
    assert "accepted" in fig.layout.title.text
    with pytest.raises(IndexError):
        inspector_figure(trace.steps[1], 2)


def test_inspector_greedy_and_no_checks(trace):
    step = trace.steps[0]
    greedy = replace(step, checks=[replace(c, r=None) for c in step.checks])
    fig = inspector_figure(greedy)
    assert not by_role(fig, "r")
    assert any("greedy" in (a.text or "") for a in fig.layout.annotations)
    empty = inspector_figure(trace.baseline.steps[0])
    assert len(empty.data) == 0 and "no drafted tokens" in empty.layout.annotations[0].text
    unknown = StepEvent(0, 1, [5], [0.5], [Check(5, 0.5, 0.4, 0.8, 0.9, False)], 0, [6], [], [])
    assert list(by_role(inspector_figure(unknown), "distribution")[0].x) == ["#5"]


# --- the import boundary --------------------------------------------------------------------

def test_visualizations_import_neither_torch_nor_gradio():
    code = ("import sys, visualizations, visualizations.tokens;"
            "bad = [m for m in ('torch', 'gradio', 'transformers') if m in sys.modules];"
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_figures_have_titles_and_large_fonts(trace):
    figs = [step_timeline(trace), roofline_figure(trace.forwards(), CEILINGS),
            knee_figure(knee_rows("fast", 1.0)), inspector_figure(trace.steps[2])]
    for fig in figs:
        assert fig.layout.title.text and fig.layout.font.size >= 16
        assert fig.layout.template.layout.paper_bgcolor in ("white", "#fff", "#ffffff")
        fig.to_json()  # serialisable for gr.Plot
    assert re.search(r"Roofline — AMD EPYC", figs[1].layout.title.text)


# --------------------------------------------------------------------------- a real saved trace
# tests/data/trace_embedded.json was written by the CLI on the embedded pair:
#   python -m app generate --prompt "It is a truth universally acknowledged, that" --gamma 4
#       --temperature 0.7 --seed 3 --max-new-tokens 48 --baseline --json tests/data/trace_embedded.json

REAL = Path(__file__).parent / "data" / "trace_embedded.json"


def test_every_figure_builds_from_a_real_saved_trace():
    real = Trace.from_json(REAL.read_text())
    costed = [f for f in real.forwards() if f.flops > 0 and f.bytes > 0 and f.seconds > 0]
    assert costed and all(f.bound in ("memory", "compute", "overhead") for f in costed)
    points = by_role(roofline_figure(real.forwards(), CEILINGS), "forward")
    assert sum(len(t.x) for t in points) == len(costed)  # the roofline's own passes only
    assert len(step_timeline(real).data[0].x) == len(real.steps)
    html = token_stream_html(all_pieces(real), finished=True)
    assert html.count('class="tok ') == len(all_pieces(real)) and 'id="stream-end"' in html
    rejected = next(s for s in real.steps if any(not c.accepted for c in s.checks))
    assert isinstance(inspector_figure(rejected), go.Figure)
    speed = real.summary.tokens_per_s / real.baseline.tokens_per_s
    assert f"{speed:.2f}" in stats_markdown(real)


def test_roofline_note_sits_above_the_plot_in_room_made_for_it(trace):
    """app.cpu_regime's note goes between the title and the plot area (y = 1, anchored at its
    bottom), and the top margin grows by its lines: it never covers a roof or a ridge label."""
    long = "knee hidden: a pass of 8 tokens costs 4.46x one token. " * 3
    plain = roofline_figure(trace.forwards(), CEILINGS)
    noted = roofline_figure(trace.forwards(), dict(CEILINGS, note=long))
    note = next(a for a in noted.layout.annotations if "knee hidden" in a.text)
    assert note.yref == "paper" and note.y == 1 and note.yanchor == "bottom"
    lines = note.text.count("<br>") + 1
    assert lines >= 2 and noted.layout.margin.t - plain.layout.margin.t >= 18 * lines
    assert noted.layout.height - plain.layout.height == noted.layout.margin.t - plain.layout.margin.t
