"""A second pool of training prompts for the flagship draft (issue 42): requests written one
by one, the way people type them (terse or long, lower-case, typos, pasted passages and code, many
languages), one JSON file a kind in research/typed_prompts/. The first pool
(research.diverse_prompts) crosses ~430 task forms with a few subjects each; the draft's alpha rose
on that pool's own held-out prompts three times as fast as on the realistic evaluation set
(research/RESULTS.md, "A fourth fine-tune"), so this pool trades repetition for variety: every
prompt is its own form and subject.

Each file is a list of {"text": the first user turn, "follow_up": a second user turn or absent}.
None of them may overlap the evaluation set (research.eval_set.overlap_check), which is tested;
the prompts were written without reading it.

    prompts() -> [{"id": "typed-<kind>-<n>", "kind", "messages": [{"role": "user", "content"}], "follow_up"}]
    python -m research.typed_prompts --check      # counts per kind, and any prompt that overlaps
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from research.diverse_prompts import KINDS, texts

TYPED_DIR = Path(__file__).resolve().parent / "typed_prompts"


def load_kind(kind: str) -> list[dict]:
    """One kind's file, as written: [{"text", "follow_up"?}]."""
    return json.loads((TYPED_DIR / f"{kind}.json").read_text(encoding="utf-8"))


def prompts(seed: int = 0) -> list[dict]:
    """Every prompt of the typed pool, shuffled with `seed`, in research.diverse_prompts' format
    (a "multiturn" prompt's follow-up goes after the teacher's own first reply)."""
    out = [{"id": f"typed-{kind}-{i}", "kind": kind, "follow_up": row.get("follow_up"),
            "messages": [{"role": "user", "content": row["text"]}]}
           for kind in KINDS for i, row in enumerate(load_kind(kind))]
    random.Random(seed).shuffle(out)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="count prompts per kind; list any that overlap")
    args = ap.parse_args(argv)
    from collections import Counter

    from research.eval_set import load as load_eval
    from research.eval_set import overlap_check
    pool = prompts()
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
