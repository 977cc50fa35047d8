"""How much of the target's probability the draft's kept vocabulary holds, per category of the
realistic set (issue 42): the draft proposes only the tokens of its config's draft_vocab_ids
(app/draft_vocab.py), so at a position where the target puts mass m on those tokens,
sum_x min(p, q) <= m whatever the draft learned. A low m caps alpha before the draft's own error.

For each prompt of a research.eval_full run, the target's reply is sampled again exactly as the
run sampled it (research.evaluate.own_samples, the same seed, temperature and length; the decoded
text is checked against the run's "reply"), and at every reply position
  mass   = sum over kept tokens of p_target at T (the run's temperature, and at T = 1),
  argmax = whether the target's most likely token is a kept one.

    nice -n 19 python -m research.vocab_coverage --run research/runs/eval_full_shipped.jsonl --out F.jsonl
    python -m research.vocab_coverage --summary F.jsonl
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def kept_ids(draft_dir: Path) -> torch.Tensor:
    """The draft's kept token ids [k] (its config's draft_vocab_ids)."""
    return torch.tensor(json.loads((Path(draft_dir) / "config.json").read_text())["draft_vocab_ids"])


def coverage(logits: torch.Tensor, kept: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [n, vocab] -> (mass of the kept tokens under softmax(logits / T) [n], argmax kept [n])."""
    p = torch.softmax(logits.double() / temperature, dim=-1)
    inside = torch.zeros(logits.shape[-1], dtype=torch.bool)
    inside[kept] = True
    return p[:, inside].sum(-1), inside[logits.argmax(-1)]


def measure_row(pair, prompt: dict, row: dict, index: int, kept: torch.Tensor) -> dict:
    """One prompt's coverage on the run's own reply (resampled with the run's seed, checked)."""
    from research.eval_set import chat_ids
    from research.evaluate import _logits, own_samples
    ids = chat_ids(pair.tokenizer, prompt["messages"])
    x = own_samples(pair, [ids], row["temperature"], row["tokens"], index)[0]       # [1, P + reply]
    if pair.tokenizer.decode(x[0, len(ids):].tolist()) != row["reply"]:
        raise ValueError(f"{prompt['id']}: the resampled reply differs from the run's")
    logits = _logits(pair.target, x)[len(ids) - 1:-1]                                # [reply, vocab]
    mass_t, argmax = coverage(logits, kept, row["temperature"])
    mass_1, _ = coverage(logits, kept, 1.0)
    return {"id": prompt["id"], "category": prompt["category"], "positions": len(mass_t),
            f"mass_T={row['temperature']}": round(mass_t.mean().item(), 5), "mass_T=1.0": round(mass_1.mean().item(), 5),
            "argmax_kept": round(argmax.double().mean().item(), 5)}


def summarise(rows: list[dict]) -> dict:
    """Position-weighted means of every "mass_*" and "argmax_kept" per category and overall."""
    keys = [k for k in rows[0] if k.startswith("mass_") or k == "argmax_kept"]
    out: dict[str, dict] = {}
    for r in rows:
        for name in (r["category"], "overall"):
            acc = out.setdefault(name, {"positions": 0, **{k: 0.0 for k in keys}})
            acc["positions"] += r["positions"]
            for k in keys:
                acc[k] += r[k] * r["positions"]
    for acc in out.values():
        for k in keys:
            acc[k] = round(acc[k] / acc["positions"], 4)
    return dict(sorted(out.items(), key=lambda kv: kv[0] == "overall"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="a research.eval_full JSON-lines run")
    ap.add_argument("--out", type=Path, help="the JSON-lines file to append to (resumes it)")
    ap.add_argument("--summary", type=Path, help="print the per-category means of a coverage file")
    args = ap.parse_args(argv)
    if args.summary:
        rows = [json.loads(line) for line in args.summary.read_text().splitlines() if line.strip()]
        print(json.dumps(summarise(rows), indent=1))
        return
    if not (args.run and args.out):
        ap.error("give --run RUN.jsonl --out OUT.jsonl (or --summary OUT.jsonl)")
    from app.assets import SMOLLM2_DRAFT_DIR
    from research.eval_set import load
    from research.flagship import load as load_pair
    prompts = load()
    index = {p["id"]: i for i, p in enumerate(prompts)}
    runs = [json.loads(line) for line in args.run.read_text().splitlines() if line.strip()]
    done = {json.loads(line)["id"] for line in args.out.read_text().splitlines() if line.strip()} if args.out.exists() else set()
    pair, kept = load_pair("cpu"), kept_ids(SMOLLM2_DRAFT_DIR)
    by_id = {p["id"]: p for p in prompts}
    for row in runs:
        if row["id"] in done:
            continue
        out = measure_row(pair, by_id[row["id"]], row, index[row["id"]], kept)
        with args.out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(out) + "\n")
        print(out, flush=True)


if __name__ == "__main__":
    main()
