"""Instruction prompts for distilling the flagship draft and for evaluating it.

Prompts are task templates crossed with topics. Training and held-out prompts use disjoint topic
lists, so the draft is evaluated on questions about things it never saw the target answer.
Deterministic: the same lists every run.
"""
from __future__ import annotations

TASKS = [
    "What is {t}?",
    "Explain {t} to a ten-year-old.",
    "Write a short poem about {t}.",
    "Give me three interesting facts about {t}.",
    "Write a short story that involves {t}.",
    "What are the advantages and disadvantages of {t}?",
    "Describe {t} in two sentences.",
    "How would you teach someone about {t}?",
    "Write a haiku about {t}.",
    "Why do people care about {t}?",
    "Summarise the history of {t} briefly.",
    "List five words related to {t} and explain each.",
    "Write a friendly email to a colleague about {t}.",
    "What questions would a student ask about {t}?",
]

TRAIN_TOPICS = [
    "the ocean", "volcanoes", "photosynthesis", "the moon", "gravity", "rainbows", "honey bees",
    "the internet", "electricity", "democracy", "bread baking", "chess", "the piano", "recycling",
    "the Roman Empire", "dinosaurs", "clouds", "sleep", "friendship", "coffee", "mountains",
    "trains", "the human heart", "libraries", "solar panels", "penguins", "the alphabet",
    "money", "vaccines", "football", "gardening", "the Great Wall of China", "rivers",
    "computers", "music", "earthquakes", "mathematics", "birds", "deserts", "the weather",
]

HELDOUT_TOPICS = [
    "the sun", "forests", "bicycles", "the brain", "glaciers", "water", "robots",
    "the printing press", "butterflies", "tea",
]

SYSTEM_FREE_EXTRA = [  # prompts without a template, for variety
    "Hello! How are you today?",
    "Can you help me plan a picnic?",
    "Tell me a joke.",
    "What should I cook for dinner tonight?",
    "How do I stay focused while studying?",
    "Translate 'good morning' into French and Spanish.",
    "What is 12 times 7? Show your working.",
    "Suggest a name for a pet cat.",
]


def train_prompts() -> list[str]:
    return [task.format(t=topic) for topic in TRAIN_TOPICS for task in TASKS] + SYSTEM_FREE_EXTRA


def heldout_prompts() -> list[str]:
    return [task.format(t=topic) for topic in HELDOUT_TOPICS for task in TASKS]
