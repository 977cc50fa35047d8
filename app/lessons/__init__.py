"""The lessons: one experiment per claim, each a function returning plain data.

    from app.lessons import LESSONS, get
    result = get("knee").function(pair, qs=(1, 2, 4, 8))      # a dataclass with to_dict()
    figure_name = get("knee").figure_name                     # its builder in visualizations.lessons

Every lesson function takes the ModelPair first (except memory_wall: pure arithmetic), validates
its inputs (LessonError, one line), accepts progress(fraction, message), and returns a dataclass
of plain values with a `verdict` (app.lessons.verdict.Verdict: claim, held, evidence, computed
from the run's own timings with their spread), to_dict() (the verdict under "verdict", each
timing as {min, median, max, n}, each number labelled measured / counted / calculated),
summary() (lines for a terminal) and headline() (Markdown that starts with the verdict).
No title or notice here states a conclusion: the verdict does, from the data. QUICK holds the
small sizes of the walkthrough; the dict's order is the walkthrough's (memory wall first).
Modules are imported on first use, so listing the lessons loads no model code. The figures are
drawn by the callers (app.ui.lessons.lesson_figure): this package computes, and imports no
visualizations.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from app.lessons.common import MIN_REPEATS, LessonError

__all__ = ["LESSONS", "MIN_REPEATS", "Lesson", "LessonError", "get"]


@dataclass(frozen=True)
class Lesson:
    """name: CLI/registry key; module/function: where the experiment lives; figure_name: the builder
    in visualizations.lessons; claim: 1-2 sentences; formula: LaTeX ($$...$$) or ""; notice:
    what to look at in the result; needs_pair: False for pure arithmetic."""
    name: str
    title: str
    claim: str
    module: str
    function_name: str
    figure_name: str
    formula: str = ""
    notice: str = ""
    needs_pair: bool = True
    tab: str = ""  # short tab label; the title when empty

    @property
    def tab_label(self) -> str:
        return self.tab or self.title

    @property
    def function(self):
        return getattr(importlib.import_module(f"app.lessons.{self.module}"), self.function_name)

    @property
    def quick_kwargs(self) -> dict:
        return dict(getattr(importlib.import_module(f"app.lessons.{self.module}"), "QUICK", {}))


MEMORY_WALL = Lesson(
    "memory_wall", "The memory wall",
    "Each decoding step reads every weight once (and the KV cache): a 70B-parameter model in fp16 moves "
    "140 GB per token, 70 ms at 2 TB/s, at about 1 FLOP per byte.",
    "memory_wall", "memory_wall", "memory_wall_figure",
    r"$$t_{\text{pass}} \ge \frac{P \cdot \text{bytes/param} + \text{KV}}{\text{bandwidth}}, \qquad "
    r"I = \frac{2Pbq}{P \cdot \text{bytes/param}} = \frac{2bq}{\text{bytes/param}}$$",
    "Compare the pass's intensity with each device's ridge (this device's measured, the A100's from its "
    "datasheet); every number is calculated from the inputs shown.",
    needs_pair=False, tab="Memory wall")

# The walkthrough's order (app.ui.lessons reads this dict's order for its steps and tabs).
LESSONS: dict[str, Lesson] = {lesson.name: lesson for lesson in [
    MEMORY_WALL,
    Lesson("knee", "Tokens per pass against time",
           "A forward pass over q new tokens costs about what one token costs while the pass is "
           "bound by reading the weights (or by fixed overhead), not by arithmetic.",
           "knee", "five_for_one", "knee_lesson_figure",
           r"$$\frac{t(q)}{t(1)} \approx 1 \quad \text{for } q \ll q_{\text{ridge}}$$",
           "Read t(q)/t(1) for q = 2…8 with its min–max bars against the line at 1 and the bend "
           "threshold; the verdict says which side this run fell on.",
           tab="Knee"),
    Lesson("batch_depth", "Batch size against depth",
           "Verifying γ + 1 tokens for each of b sequences is a pass of b(γ + 1) tokens; as the batch "
           "grows the extra positions stop being free, and speculation starts to lose.",
           "batch_depth", "batch_vs_depth", "batch_depth_figure",
           r"$$T(b,\gamma) = \gamma\, t_{\text{draft}}(b,1) + t_{\text{target}}(b,\gamma+1)$$",
           "Read each row from left to right: which γ cells are above 1×, and from which batch none is; "
           "compare batch 2 with batch 1. Cells marked ✗ broke the Leviathan bound and are not results.",
           tab="Batch × depth"),
    Lesson("policies", "Depth policies side by side",
           "How many tokens to draft can be chosen per step: fixed, a +2/−1 heuristic, a confidence stop, "
           "or the depth that maximises expected tokens per second on this device.",
           "policies", "compare_policies", "policies_figure",
           r"$$\gamma^* = \arg\max_\gamma \frac{(1-\alpha^{\gamma+1})/(1-\alpha)}"
           r"{\gamma\, t_{\text{draft}} + t_{\text{target}}(\gamma+1)}$$",
           "Compare each policy's tokens/s with plain decoding and with the best fixed γ, and its wasted "
           "drafts; check whether the texts are identical.",
           tab="Depth policies"),
    Lesson("theory", "Theory against measurement",
           "Leviathan et al. predict tokens per target pass and speedup from the acceptance rate α and the "
           "cost ratio c alone; measure both and compare.",
           "theory", "theory_vs_measurement", "theory_figure",
           r"$$E(\gamma) = \frac{1-\alpha^{\gamma+1}}{1-\alpha}, \qquad "
           r"S(\gamma) = \frac{1-\alpha^{\gamma+1}}{(1-\alpha)(\gamma c+1)}$$",
           "Compare the dots (measured) with the lines (predicted) at each γ, for tokens per pass and "
           "for speedup.",
           tab="Theory vs measurement"),
    Lesson("lossless", "Lossless: same distribution as the target",
           "Accepting a draft x with probability min(1, p(x)/q(x)) and resampling rejections from "
           "norm(max(0, p − q)) yields exactly the target's distribution; break either rule and it moves.",
           "lossless", "lossless", "lossless_figure",
           r"$$P(x) = \min\big(p(x), q(x)\big) + (1-\alpha)\,\frac{\max(0,\,p(x)-q(x))}{1-\alpha} = p(x)$$",
           "Compare each arm's distance from the target (TV) with its noise floor.",
           tab="Lossless"),
    Lesson("flops", "FLOPs against time",
           "Speculative decoding does more arithmetic than plain decoding - drafts and rejected verify "
           "positions are thrown away - yet can take less time, because decoding is not limited by arithmetic.",
           "flops", "flops_vs_time", "flops_figure",
           r"$$\frac{\text{FLOPs}}{\text{token}} \approx \frac{2(\gamma+1)P_{\text{target}} + 2\gamma P_{\text{draft}}}"
           r"{E(\gamma)} \;>\; 2P_{\text{target}}$$",
           "Compare the two panels: FLOPs (counted by the cost model) and time (measured, min–max bars), "
           "and the measured time of the wasted work.",
           tab="FLOPs vs time"),
]}


def get(name: str) -> Lesson:
    if name not in LESSONS:
        raise LessonError(f"unknown lesson {name!r}: choose one of {', '.join(LESSONS)}")
    return LESSONS[name]
