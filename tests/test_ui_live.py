"""The Live tab's layout helpers without a browser: the inspector's position slider follows the
run's γ, and the pair menu's words, examples and prompt follow the chosen pair."""
import re

import gradio as gr
import pytest

from app import examples
from app.presets import PRESETS
from app.ui import live

from tests.test_ui_handlers import GOOD, fake_ceilings, run_decode, with_  # noqa: F401 (fixture)


@pytest.mark.parametrize("gamma", [1, 3])
def test_position_slider_spans_the_runs_gamma(tiny_pair, fake_ceilings, gamma):  # noqa: F811
    last = run_decode(tiny_pair, with_(gamma=gamma))[-1]
    assert last.position["maximum"] == max(gamma, 2) and last.position["value"] == 1
    assert last.position["interactive"] is (gamma > 1)  # γ = 1: one position, nothing to choose


def test_examples_follow_the_pair():
    assert examples.default_prompt("embedded") in examples.PROSE_EXAMPLES
    chat = [name for name in PRESETS if examples.is_chat(name)]
    assert "smollm2-360m / 135m" in chat and "embedded" not in chat
    assert "gpt2-large / gpt2" not in chat  # GPT-2 continues text, it answers no questions
    for name in chat:
        assert examples.default_prompt(name).endswith("?") or examples.default_prompt(name).endswith(".")
        assert examples.examples_for(name) == examples.CHAT_EXAMPLES


def test_pair_words_say_what_each_pair_is_for_and_needs():
    for name in PRESETS:
        label, info = examples.choice_label(name), examples.pair_info(name)
        assert label.startswith(name) and "needs" in info and info[0].isupper()
        assert "app." not in info and "app." not in label  # plain words, no module names
    assert "download" in examples.pair_info("qwen2.5-1.5b / 0.5b")
    assert "random weights" in examples.choice_label("llama-3.1-8b / 3.2-1b (shape-only)")


def test_changing_the_pair_keeps_the_users_prompt():
    info, dataset, prompt, tokens = live.pair_changed("smollm2-360m / 135m", examples.PROSE_EXAMPLES[1], 96)
    assert prompt == examples.CHAT_EXAMPLES[0]  # an example follows the pair...
    assert [s[0] for s in dataset.raw_samples] == list(examples.CHAT_EXAMPLES)
    assert "answers questions" in info["info"].lower()
    assert live.pair_changed("embedded", "Tell me about owls", 96)[2] == gr.skip()  # ...the user's text stays
    assert live.pair_changed("embedded", "  ", 96)[2] == examples.default_prompt("embedded")


def test_help_texts_name_no_modules():
    from app.ui import words
    texts = [v for k, v in vars(words).items() if isinstance(v, str) and not k.startswith("__")]
    texts += list(words.FAST_PATH_INFO.values()) + [label for label, _ in words.PROMPT_MODES + words.DRAFTER_CHOICES]
    for text in texts:
        assert not re.search(r"\bapp\.\w|Int8Weight|\biff\b|argmax", text), f"jargon in help text {text!r}"
