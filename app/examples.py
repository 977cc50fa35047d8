"""Words and prompts per model pair: what each pair is for and what it needs, in plain words
for the Live tab's pair menu, and the example prompts that suit it.

An instruction-tuned target (SmolLM2-Instruct, Qwen2.5-Instruct, the flagship) answers a chat
question; the embedded pair (trained on Austen and Shakespeare, demo_models/README.md) and
GPT-2 continue prose, so they get prose openings; a shape-only pair has random weights, so
any prompt gives meaningless text (it is there for timing). Nothing here loads a model.
"""
from __future__ import annotations

from app.presets import PRESETS

CHAT_EXAMPLES = (
    "What is the capital of France, and what is it famous for?",
    "Explain in three sentences why the sky is blue.",
    "Give me three tips for learning to cook.",
    "What is the difference between a virus and a bacterium?",
)
PROSE_EXAMPLES = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune",
    "Mr. Darcy walked towards the window and said,",
    "ROMEO:\nBut soft, what light through yonder window breaks?",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "Emma Woodhouse, handsome, clever, and rich,",
)
ALL_EXAMPLES = frozenset(CHAT_EXAMPLES + PROSE_EXAMPLES)


def is_chat(preset: str) -> bool:
    """Whether the pair's target is instruction-tuned (answers a user turn)."""
    p = PRESETS[preset]
    return p.kind == "gguf" or (p.kind == "hub" and "instruct" in p.target.lower())


def examples_for(preset: str) -> tuple[str, ...]:
    """Chat questions for an instruction-tuned target, prose openings for the others."""
    return CHAT_EXAMPLES if is_chat(preset) else PROSE_EXAMPLES


def default_prompt(preset: str) -> str:
    return examples_for(preset)[0]


def purpose(preset: str) -> str:
    """A few words: what the pair is for."""
    p = PRESETS[preset]
    if p.kind == "shape":
        return "timing only (random weights, meaningless text)"
    if p.kind == "embedded":
        return "continues Austen / Shakespeare prose"
    return "answers questions" if is_chat(preset) else "continues English text"


def needs(preset: str) -> str:
    """A few words: what the pair needs before its first run."""
    p = PRESETS[preset]
    if p.kind == "embedded":
        return "nothing: it ships with the lab and loads in about a second"
    if p.kind == "gguf":
        if not p.installed:
            from app.presets import FLAGSHIP_HINT
            return "installing first: " + FLAGSHIP_HINT.split(": ", 1)[1]
        return "no download; its first load unpacks the 4-bit weights (~40 s, once per process)"
    gb = p.weights_gb()
    if p.kind == "hub":
        return f"a download of ~{gb:.1f} GB (bf16 weights), then as much memory"
    return f"no download, ~{gb:.1f} GB of memory for its random weights"


def choice_label(preset: str) -> str:
    """The pair menu's entry: the name, then what it is for."""
    return f"{preset} · {purpose(preset)}"


def pair_info(preset: str) -> str:
    """The line under the pair menu: what the chosen pair is for and what it needs."""
    text = purpose(preset)
    return f"{text[0].upper()}{text[1:]}; needs {needs(preset)}."
