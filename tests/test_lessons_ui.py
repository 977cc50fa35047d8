"""The lesson tabs without a browser: the layout, LaTeX delimiters, handlers called directly,
and bad input turned into gr.Error."""
import pytest

from app.lessons.common import PROMPTS

gr = pytest.importorskip("gradio")

from app.lessons import LESSONS  # noqa: E402
from app.lessons.verdict import Verdict  # noqa: E402
from app.ui.lessons import (LATEX, build_lesson_tabs, lead, memory_wall_kwargs, parse_ints,  # noqa: E402
                            parse_prompts, run_lesson)

HEADS = ("**Held on this device:**", "**Did not hold here:**", "**Inconclusive:**")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def demo(tiny_pair):
    with gr.Blocks() as blocks:
        with gr.Tabs():
            build_lesson_tabs(lambda: tiny_pair)
    return blocks


def handlers(demo, kind: str) -> list:
    """Event functions of the lesson UI: kind "walk" (walkthrough) or "tab"."""
    return [f for f in demo.fns.values() if f.fn is not None and f"_{kind}" in f.fn.__qualname__]


def test_one_tab_per_lesson_after_the_walkthrough(demo):
    tabs = [b.label for b in demo.blocks.values() if isinstance(b, gr.Tab)]
    assert tabs == ["Walkthrough"] + [lesson.tab_label for lesson in LESSONS.values()]
    assert len(handlers(demo, "walk")) == len(LESSONS) and len(handlers(demo, "tab")) == len(LESSONS)


def test_repeat_sliders_cannot_ask_for_fewer_repeats_than_a_verdict_needs(demo):
    from app.lessons.common import MIN_REPEATS
    sliders = [b for b in demo.blocks.values() if isinstance(b, gr.Slider)
               and ("repeats" in b.label or "rounds" in b.label)]
    assert len(sliders) == 4                     # knee, batch x depth, policies, theory
    assert all(b.minimum == MIN_REPEATS and b.value >= MIN_REPEATS for b in sliders)


def test_formulas_render_inline_and_display_latex(demo):
    formulas = [b for b in demo.blocks.values() if isinstance(b, gr.Markdown) and "$$" in (b.value or "")]
    assert len(formulas) >= 2 * 6  # walkthrough + tab header of every lesson with a formula
    assert all(b.latex_delimiters == LATEX for b in formulas)
    assert {"left": "$", "right": "$", "display": False} in LATEX


def test_walkthrough_memory_wall_shows_the_anchor(demo):
    walk = handlers(demo, "walk")[list(LESSONS).index("memory_wall")]
    markdown, plot = walk.fn()
    assert "140 GB per token" in markdown and "70 ms" in markdown and "What the claim predicts" in markdown
    assert plot.visible is True


def test_tab_handler_runs_with_the_default_controls(demo):
    tab = handlers(demo, "tab")[list(LESSONS).index("memory_wall")]
    figure, markdown, data = tab.fn({c: c.value for c in tab.inputs})
    from app.lessons.memory_wall import LLAMA3_70B_KV
    # the weights and the KV cache the tab reads by default: 1,024 cached tokens of Llama-3-70B's
    # shape and the new one (memory_wall counts context + q positions)
    assert data["bytes_per_token"] == pytest.approx(140e9 + (1024 + 1) * LLAMA3_70B_KV) and "```" in markdown
    assert figure.data and "KV cache not counted" not in markdown


def test_tab_handler_runs_a_lesson_on_the_pair(demo):
    tab = handlers(demo, "tab")[list(LESSONS).index("flops")]
    values = {c: c.value for c in tab.inputs}
    values.update({c: 8 for c in tab.inputs if c.label == "new tokens"})
    figure, markdown, data = tab.fn(values)
    assert data["lesson"] == "flops" and data["new_tokens"] == 8


def test_bad_input_becomes_gr_error(demo, tiny_pair):
    with pytest.raises(gr.Error, match="gammas"):
        run_lesson("theory", lambda: tiny_pair, {"gammas": (0,)})
    tab = handlers(demo, "tab")[list(LESSONS).index("knee")]
    values = {c: ("1,x" if isinstance(c, gr.Textbox) else c.value) for c in tab.inputs}
    with pytest.raises(gr.Error, match="comma-separated"):
        tab.fn(values)

    def no_pair():
        raise ValueError("no model pair is loaded yet")
    with pytest.raises(gr.Error, match="no model pair"):
        run_lesson("flops", no_pair, {})


SMALLEST = {"theory": {"gammas": (1, 2), "max_new_tokens": 8, "rounds": 3},
            "policies": {"gamma": 1, "gamma_max": 2, "max_new_tokens": 8, "rounds": 3,
                         "prompts": None},
            "lossless": {"n": 200}}


@pytest.mark.parametrize("name", list(SMALLEST))
def test_each_result_opens_with_its_verdict_in_plain_words(name, embedded_pair):
    shown = run_lesson(name, lambda: embedded_pair, SMALLEST[name])
    verdict = shown.data["verdict"]
    assert {"claim", "held", "evidence"} <= set(verdict)
    head = HEADS[{True: 0, False: 1, None: 2}[verdict["held"]]]
    assert shown.markdown.startswith(f"{head} {verdict['claim']} — {verdict['evidence']}")
    assert shown.headline.startswith(head)


def test_tab_with_empty_prompts_runs_the_pairs_own(embedded_pair):
    with gr.Blocks() as blocks:
        build_lesson_tabs(lambda: embedded_pair)
    tab = [f for f in blocks.fns.values() if f.fn is not None and "_tab" in f.fn.__qualname__][
        list(LESSONS).index("theory")]
    values = {c: c.value for c in tab.inputs}
    values.update({c: v for c in tab.inputs for label, v in (("γ values", "1"), ("new tokens per prompt", 4),
                                                           ("rounds", 1)) if (c.label or "").startswith(label)})
    assert any(c.value == "" for c in tab.inputs if isinstance(c, gr.Textbox))  # the pair's own prompts
    figure, markdown, data = tab.fn(values)
    assert markdown.startswith(HEADS) and data["settings"]["prompts"] == [PROMPTS[0]]


def test_lead_puts_a_verdict_first_once():
    verdict = Verdict("five tokens cost about one", False, "t(5)/t(1) = 3.16×, because …")
    plain = type("R", (), {"verdict": verdict, "headline": lambda self: "t(5)/t(1) = 3.16×"})()
    assert lead(plain) == f"{verdict.text()}\n\nt(5)/t(1) = 3.16×"
    first = type("R", (), {"verdict": verdict, "headline": lambda self: verdict.text() + " more"})()
    assert lead(first) == verdict.text() + " more"
    assert lead(plain).startswith("**Did not hold here:** five tokens cost about one — t(5)/t(1)")


def test_parsers():
    assert parse_ints(" 1, 2,4 ", "q") == (1, 2, 4)
    with pytest.raises(ValueError, match="q: expected"):
        parse_ints("1;2", "q")
    assert parse_prompts("a\n\n b \n") == ("a", " b ")
    with pytest.raises(ValueError, match="prompt"):
        parse_prompts(" \n ")
    assert parse_prompts(" \n ", empty_ok=True) is None
    assert memory_wall_kwargs(70, "fp16", 1, 1, "H100 SXM", 0, 0)["device"] == "H100 SXM"
    with pytest.raises(ValueError, match="bandwidth"):
        memory_wall_kwargs(70, "fp16", 1, 1, "custom bandwidth", 0, 0)
