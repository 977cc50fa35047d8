"""research.typed_prompts: the second training pool shares nothing with the realistic evaluation set
or the first pool, covers every kind, and is varied (few prompts share an opening)."""
from collections import Counter

from research import diverse_prompts, typed_prompts
from research.eval_set import load as load_eval
from research.diverse_prompts import texts as pool_texts
from research.eval_set import overlap_check, words


def test_every_kind_has_its_own_prompts():
    pool = typed_prompts.prompts()
    kinds = Counter(p["kind"] for p in pool)
    assert set(kinds) == set(diverse_prompts.KINDS) and min(kinds.values()) >= 100
    ids = [p["id"] for p in pool]
    assert len(set(ids)) == len(ids) and all(i.startswith("typed-") for i in ids)
    assert all(bool(p["follow_up"]) == (p["kind"] == "multiturn") for p in pool)
    assert typed_prompts.prompts() == pool and typed_prompts.prompts(seed=1) != pool
    texts = pool_texts(pool)
    assert all(t.strip() == t and t for t in texts) and len(set(texts)) == len(texts)


def test_disjoint_from_the_evaluation_set_and_the_first_pool():
    """The first pool's rule (research.eval_set.overlap_check) holds here too, and no prompt of the
    first pool is repeated."""
    overlaps = overlap_check(load_eval())
    texts = pool_texts(typed_prompts.prompts())
    assert not [t for t in texts if overlaps(t)]
    first = {" ".join(words(p["messages"][0]["content"])) for p in diverse_prompts.prompts()}
    assert not [t for t in texts if " ".join(words(t)) in first]


def test_prompts_are_varied():
    """Each prompt is its own form: at least 4 in 5 prompts of a kind open with their own first
    three words (the first pool crosses a dozen forms with subjects, so most of its openings repeat)."""
    def distinct_openings(pool):
        by_kind = {}
        for p in pool:
            by_kind.setdefault(p["kind"], []).append(tuple(words(p["messages"][0]["content"])[:3]))
        return {k: len(set(v)) / len(v) for k, v in by_kind.items()}
    assert min(distinct_openings(typed_prompts.prompts()).values()) >= 0.8
    assert min(distinct_openings(diverse_prompts.prompts()).values()) < 0.8   # the check can tell pools apart
