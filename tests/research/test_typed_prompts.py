"""research.typed_prompts: each typed training pool shares nothing with the realistic evaluation
set, the first pool or the other typed pool, covers every kind, and is varied (few prompts share
an opening)."""
from collections import Counter

import pytest

from research import diverse_prompts, typed_prompts
from research.diverse_data import POOLS
from research.eval_set import load as load_eval
from research.diverse_prompts import texts as pool_texts
from research.eval_set import overlap_check, words

TYPED_POOLS = list(typed_prompts.POOL_DIRS)
MIN_PER_KIND = {"typed": 100, "typed2": 60, "typed3": 50, "typed4": 60}


def test_every_typed_pool_can_be_sampled():
    assert set(TYPED_POOLS) <= set(POOLS) and set(MIN_PER_KIND) == set(TYPED_POOLS)


@pytest.mark.parametrize("pool", TYPED_POOLS)
def test_every_kind_has_its_own_prompts(pool):
    prompts = typed_prompts.prompts(pool=pool)
    kinds = Counter(p["kind"] for p in prompts)
    assert set(kinds) == set(diverse_prompts.KINDS) and min(kinds.values()) >= MIN_PER_KIND[pool]
    ids = [p["id"] for p in prompts]
    assert len(set(ids)) == len(ids) and all(i.startswith(f"{pool}-") for i in ids)
    assert all(bool(p["follow_up"]) == (p["kind"] == "multiturn") for p in prompts)
    assert typed_prompts.prompts(pool=pool) == prompts and typed_prompts.prompts(seed=1, pool=pool) != prompts
    texts = pool_texts(prompts)
    assert all(t.strip() == t and t for t in texts) and len(set(texts)) == len(texts)


@pytest.mark.parametrize("pool", TYPED_POOLS)
def test_disjoint_from_the_evaluation_set_and_the_other_pools(pool):
    """The first pool's rule (research.eval_set.overlap_check) holds here too, and no prompt of
    another pool is repeated."""
    overlaps = overlap_check(load_eval())
    texts = pool_texts(typed_prompts.prompts(pool=pool))
    assert not [t for t in texts if overlaps(t)]
    others = [p for other in TYPED_POOLS if other != pool for p in typed_prompts.prompts(pool=other)]
    seen = {" ".join(words(t)) for t in pool_texts(diverse_prompts.prompts() + others)}
    assert not [t for t in texts if " ".join(words(t)) in seen]


def distinct_openings(prompts: list[dict]) -> dict[str, float]:
    """Per kind, the share of distinct first three words among its prompts."""
    by_kind = {}
    for p in prompts:
        by_kind.setdefault(p["kind"], []).append(tuple(words(p["messages"][0]["content"])[:3]))
    return {k: len(set(v)) / len(v) for k, v in by_kind.items()}


@pytest.mark.parametrize("pool", TYPED_POOLS)
def test_prompts_are_varied(pool):
    """Each prompt is its own form: at least 4 in 5 prompts of a kind open with their own first
    three words (the first pool crosses a dozen forms with subjects, so most of its openings repeat)."""
    assert min(distinct_openings(typed_prompts.prompts(pool=pool)).values()) >= 0.8


def test_the_variety_check_tells_pools_apart():
    assert min(distinct_openings(diverse_prompts.prompts()).values()) < 0.8
