"""A second pool of training prompts for the flagship draft (issue 42): requests written one
by one, the way people type them (terse or long, lower-case, typos, pasted passages and code, many
languages), one JSON file a kind in research/typed_prompts/. The first pool
(research.diverse_prompts) crosses ~430 task forms with a few subjects each; the draft's alpha rose
on that pool's own held-out prompts three times as fast as on the realistic evaluation set
(research/RESULTS.md, "A fourth fine-tune"), so this pool trades repetition for variety: every
prompt is its own form and subject.

A second pool, research/typed_prompts2/ ("typed2", 720 prompts), was written later by four other
writers to the same brief, also without reading the evaluation set or the first typed pool; a
third, research/typed_prompts3/ ("typed3"), by four more, weighted toward the kinds where the
draft's alpha was lowest (other languages, summaries, second turns, explanations); a fourth,
research/typed_prompts4/ ("typed4"), by eight more, one or two kinds each, asked for task forms
and subjects the earlier writers were unlikely to have chosen, a quarter of it in other languages
(re-sampling the first three pools' prompts had stopped helping: research/RESULTS.md, "A twelfth
fine-tune").

Each file is a list of {"text": the first user turn, "follow_up": a second user turn or absent}.
None of them may overlap the evaluation set (research.eval_set.overlap_check), which is tested;
the prompts were written without reading it.

    prompts(pool="typed") -> [{"id": "<pool>-<kind>-<n>", "kind", "messages": [{"role": "user", "content"}], "follow_up"}]
    python -m research.typed_prompts --check [--pool typed2]   # counts per kind, and any prompt that overlaps
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from research.diverse_prompts import KINDS, texts

TYPED_DIR = Path(__file__).resolve().parent / "typed_prompts"
# pool name -> its directory: "typed2" was written later, by other hands, so that it can be sampled
# (research.diverse_data --pool typed2) without answering the first typed pool again
POOL_DIRS = {"typed": TYPED_DIR, "typed2": TYPED_DIR.with_name("typed_prompts2"),
             "typed3": TYPED_DIR.with_name("typed_prompts3"), "typed4": TYPED_DIR.with_name("typed_prompts4")}


def load_kind(kind: str, pool: str = "typed") -> list[dict]:
    """One kind's file of a pool, as written: [{"text", "follow_up"?}]."""
    return json.loads((POOL_DIRS[pool] / f"{kind}.json").read_text(encoding="utf-8"))


def prompts(seed: int = 0, pool: str = "typed") -> list[dict]:
    """Every prompt of a typed pool, shuffled with `seed`, in research.diverse_prompts' format
    (a "multiturn" prompt's follow-up goes after the teacher's own first reply)."""
    out = [{"id": f"{pool}-{kind}-{i}", "kind": kind, "follow_up": row.get("follow_up"),
            "messages": [{"role": "user", "content": row["text"]}]}
           for kind in KINDS if (POOL_DIRS[pool] / f"{kind}.json").is_file()  # the tests require every kind
           for i, row in enumerate(load_kind(kind, pool))]
    random.Random(seed).shuffle(out)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="count prompts per kind; list any that overlap")
    ap.add_argument("--pool", choices=list(POOL_DIRS), default="typed")
    args = ap.parse_args(argv)
    from collections import Counter

    from research.eval_set import load as load_eval
    from research.eval_set import overlap_check
    pool = prompts(pool=args.pool)
    print(dict(Counter(p["kind"] for p in pool)), "total", len(pool))
    if args.check:
        overlaps = overlap_check(load_eval())
        bad = [t for t in texts(pool) if overlaps(t)]
        dup = [t for t, n in Counter(texts(pool)).items() if n > 1]
        print(f"{len(bad)} overlap the evaluation set; {len(dup)} repeated")
        for t in bad + dup:
            print("  ", repr(t[:100]))


if __name__ == "__main__":
    main()
