"""Figures and HTML built from a saved trace (tests/data/trace_small.json): no model runs."""
from dataclasses import replace
import re
import subprocess
import sys
from pathlib import Path

import plotly.graph_objects as go
import pytest

from app.trace import FATES, Check, Piece, StepEvent, Trace
from visualizations import (batch_figure, inspector_figure, knee_figure, legend_html,
                            prompt_html, roofline_figure, stats_markdown, step_timeline,
                            token_stream_html)
from visualizations.knee import floors_cross
from visualizations.tokens import STYLE

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


def test_timeline_of_the_baseline(trace):
    fig = step_timeline(trace.baseline.steps)
    decode = [b for b in by_role(fig, "phase") if b.meta["phase"] == "decode"][0]
    assert len(decode.x) == len(trace.baseline.steps) == 10
    assert "autoregressive" in fig.layout.title.text
    assert len(step_timeline([]).data) == 0


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


def test_batch_figure_and_empty():
    rows = [{"batch": b, "q": 4, "seconds": 5e-3 + b * 1e-4, "memory_floor_s": 3.85e-3,
             "compute_floor_s": 4 * b * 16e9 / 775e12, "bound": "memory"} for b in (1, 2, 4, 8)]
    fig = batch_figure(rows)
    assert list(by_role(fig, "measured")[0].x) == [1, 2, 4, 8]
    assert "batch" in fig.layout.xaxis.title.text
    assert len(knee_figure([]).data) == 0


# --- stats ----------------------------------------------------------------------------------

def test_stats_markdown_speedup_from_fixture(trace):
    md = stats_markdown(trace)
    expected = trace.summary.tokens_per_s / trace.baseline.tokens_per_s
    assert f"{expected:.2f}×" in md and f"{expected:.2f}" == "1.36"
    assert "50.0%" in md and "2.50" in md and "target 4 · draft 12" in md
    assert "138.7 tokens/s" in md and "101.9 tokens/s" in md
    assert "identical | yes" in md and "synchronis" in md
    assert md.startswith("| measure | value |")


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
