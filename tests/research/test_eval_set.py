"""The realistic evaluation set (research/eval_prompts.json, issue 42): its shape, its
disjointness from every training prompt, and alpha per category with bootstrap intervals."""
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from research.eval_set import EVAL_PROMPTS, alpha_by_category, first_per_category, load, shingles, words

from research import prompts as training

# Allowed 8-word runs shared with a training prompt, per evaluation prompt: none. An 8-word run
# is a whole clause, so sharing one means following a template; stock openers a student types
# are shorter ("what is the difference between" is 5 words, the longest run the set shares).
SHINGLE_ALLOWANCE = 0


def load_set(path=EVAL_PROMPTS) -> dict:
    """The whole JSON document, read without research.eval_set's checks."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def training_prompts() -> list[str]:
    """Every prompt the prompts module generates for teacher data, every wide round included,
    and the held-out prompts (evaluation's and checkpoint choice's) for good measure."""
    wide = [p for r in range(len(training.WIDE_LISTS)) for p in training.wide_prompts(r)]
    return training.train_prompts() + training.more_prompts() + wide + training.heldout_prompts()


def normalised(text: str) -> str:
    return " ".join(text.lower().split())


def texts(prompt: dict) -> str:
    """All of a prompt's message text (assistant turns of a multi-turn prompt too: stricter)."""
    return "\n".join(m["content"] for m in prompt["messages"])


def test_size_categories_and_ids():
    doc = load_set()
    assert doc["version"] == 1 and doc["description"]
    prompts = doc["prompts"]
    assert len(prompts) >= 120
    counts = Counter(p["category"] for p in prompts)
    assert len(counts) >= 8 and min(counts.values()) >= 15, counts
    for needed in ("coding", "maths", "languages", "advice", "creative", "factual", "summarise", "multiturn"):
        assert needed in counts
    ids = [p["id"] for p in prompts]
    assert len(set(ids)) == len(ids)
    assert load() == prompts


def test_messages_are_well_formed():
    for p in load():
        msgs = p["messages"]
        assert msgs and all(set(m) == {"role", "content"} for m in msgs), p["id"]
        assert [m["role"] for m in msgs] == [("user", "assistant")[i % 2] for i in range(len(msgs))], p["id"]
        assert msgs[-1]["role"] == "user", p["id"]
        assert all(isinstance(m["content"], str) and m["content"].strip() for m in msgs), p["id"]
    multi = [p for p in load() if p["category"] == "multiturn"]
    assert all(len(p["messages"]) >= 3 for p in multi)
    singles = [p for p in load() if p["category"] != "multiturn"]
    assert all(len(p["messages"]) == 1 for p in singles)


def test_summaries_include_their_passage():
    """Each summarising prompt carries a passage of 3-6 sentences after its request."""
    for p in load():
        if p["category"] != "summarise":
            continue
        passage = p["messages"][0]["content"].split("\n\n", 1)[1]
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", passage.strip()) if s]
        assert 3 <= len(sentences) <= 6, (p["id"], len(sentences))


def test_disjoint_from_training_prompts():
    """No evaluation prompt equals or contains a training prompt (case-insensitive, whitespace
    normalised; also as a run of whole words, punctuation ignored), and none shares more than
    SHINGLE_ALLOWANCE 8-word shingles with them."""
    train = sorted(set(training_prompts()))
    assert len(train) > 10_000                      # every round is there
    as_text = [normalised(t) for t in train]
    as_words = [" " + " ".join(words(t)) + " " for t in train]
    train_shingles = set().union(*(shingles(t) for t in train))
    worst = 0
    for p in load():
        text = texts(p)
        n, w = normalised(text), " " + " ".join(words(text)) + " "
        assert not [t for t in as_text if t in n], p["id"]
        assert not [t for t in as_words if t in w], p["id"]
        worst = max(worst, len(shingles(text) & train_shingles))
    assert worst <= SHINGLE_ALLOWANCE


def test_first_per_category():
    few = first_per_category(load(), 2)
    assert Counter(p["category"] for p in few) == {c: 2 for c in {p["category"] for p in load()}}


# alpha_by_category on hand-made rows

ROWS = [
    {"category": "a", "alphas": [0.5, 0.5, 0.5]},
    {"category": "a", "alphas": [0.5]},
    {"category": "a", "alpha": 0.5, "positions": 4},
    {"category": "b", "alphas": [0.2, 0.4]},
    {"category": "b", "alphas": [0.9, 0.7, 0.8, 0.6]},
    {"category": "b", "alphas": [0.1]},
    {"category": "c", "alpha": 0.3, "positions": 10},
    {"category": "c", "alpha": 0.6, "positions": 2},
]


def test_constant_category_has_zero_width_interval():
    table = alpha_by_category(ROWS)
    assert table["a"]["alpha"] == 0.5
    assert table["a"]["ci95"] == [0.5, 0.5]
    assert (table["a"]["prompts"], table["a"]["tokens"]) == (3, 8)


def test_token_weighted_estimates_and_counts():
    table = alpha_by_category(ROWS)
    assert table["b"]["alpha"] == pytest.approx((0.2 + 0.4 + 0.9 + 0.7 + 0.8 + 0.6 + 0.1) / 7, abs=1e-6)
    assert table["c"]["alpha"] == pytest.approx((0.3 * 10 + 0.6 * 2) / 12, abs=1e-6)
    total = 0.5 * 8 + (0.2 + 0.4 + 0.9 + 0.7 + 0.8 + 0.6 + 0.1) + 0.3 * 10 + 0.6 * 2
    assert table["overall"]["alpha"] == pytest.approx(total / 27, abs=1e-6)     # not the mean of categories
    assert (table["overall"]["prompts"], table["overall"]["tokens"]) == (8, 27)
    assert list(table) == ["a", "b", "c", "overall"]


def test_intervals_contain_the_estimate_and_are_reproducible():
    table = alpha_by_category(ROWS, n_boot=500, seed=3)
    for name, row in table.items():
        low, high = row["ci95"]
        assert low <= row["alpha"] <= high, name
    assert table["b"]["ci95"][1] - table["b"]["ci95"][0] > 0.05   # the prompts disagree: a wide interval
    assert alpha_by_category(ROWS, n_boot=500, seed=3) == table
    assert alpha_by_category(ROWS, n_boot=500, seed=4)["overall"]["ci95"] != table["overall"]["ci95"]


def test_the_default_resamples_pin_the_interval_ends():
    """An interval's end is a Monte-Carlo estimate: its standard error at the 2.5th percentile is
    about 2.67 sigma / sqrt(n_boot) (sigma: the bootstrap distribution's spread), 0.019 sigma at
    the default 20,000 and 0.06 sigma at 2,000. Across 60 seeds (their spread's own error about
    9%) the lower ends must spread by less than 0.035 sigma: the default's 0.019 passes by far,
    2,000 resamples could not."""
    import statistics
    values = [0.32, 0.60, 0.55, 0.53, 0.43, 0.40, 0.68, 0.67, 0.44, 0.30, 0.47, 0.48, 0.39, 0.46, 0.47, 0.21, 0.37]
    rows = [{"category": "lang", "alpha": v, "positions": 48} for v in values]    # 17 prompts, as a category of the set
    tables = [alpha_by_category(rows, seed=s)["lang"]["ci95"] for s in range(60)]
    sigma = (tables[0][1] - tables[0][0]) / 3.92
    assert statistics.stdev(low for low, _ in tables) < 0.035 * sigma


def test_overall_interval_is_narrower_than_the_noisiest_category():
    """The stratified overall interval pools every category's prompts."""
    rows = [{"category": c, "alphas": [v]} for c in "xyz" for v in (0.2, 0.8, 0.5, 0.3, 0.7)]
    table = alpha_by_category(rows, n_boot=2000, seed=0)
    width = lambda r: r["ci95"][1] - r["ci95"][0]  # noqa: E731
    assert width(table["overall"]) < min(width(table[c]) for c in "xyz")


def test_empty_category_and_reserved_name():
    table = alpha_by_category([{"category": "e", "alphas": []}, {"category": "f", "alphas": [0.4]}])
    assert table["e"] == {"alpha": None, "ci95": [None, None], "prompts": 1, "tokens": 0}
    assert table["overall"]["alpha"] == 0.4
    with pytest.raises(ValueError):
        alpha_by_category([{"category": "overall", "alphas": [0.5]}])


# measure on the tiny pairs (conftest), through a stand-in chat template

TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"


def test_measure_rows_on_tiny_pairs(tiny_pair, self_pair, monkeypatch):
    """A draft that is the target scores alpha 1 on every reply position; a different draft
    scores below 1 on the same target's replies; the rows feed alpha_by_category."""
    from research.eval_set import chat_ids, measure
    prompts = [p for p in load() if p["id"] in ("code-01", "chat-02", "lang-06")]
    for pair in (tiny_pair, self_pair):
        monkeypatch.setattr(pair.tokenizer, "chat_template", TEMPLATE, raising=False)
    ids = chat_ids(tiny_pair.tokenizer, prompts[2]["messages"])                # chat-02: three turns
    assert tiny_pair.tokenizer.decode(ids) == ("<user>What's the capital of Australia?<assistant>The capital of "
                                               "Australia is Canberra.<user>really? i thought it was sydney. "
                                               "why isn't it sydney<assistant>")
    rows = measure(tiny_pair, prompts, max_new_tokens=8)
    assert [r["id"] for r in rows] == ["code-01", "lang-06", "chat-02"]
    assert all(0 < r["positions"] <= 8 and len(r["alphas"]) == r["positions"] for r in rows)
    assert all(0 <= r["alpha"] < 1 and r["reply"] for r in rows)
    same = measure(self_pair, prompts, max_new_tokens=8)
    assert all(v == pytest.approx(1.0, abs=1e-4) for r in same for v in r["alphas"])
    assert measure(tiny_pair, prompts, max_new_tokens=8) == rows            # seeded
    table = alpha_by_category(rows)
    assert set(table) == {"coding", "languages", "multiturn", "overall"} and table["overall"]["prompts"] == 3
