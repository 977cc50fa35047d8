"""The flagship teacher's sampled replies as token ids, kept in the repository
(demo_models/smollm2_replies/, one .npz per reply shard of demo_models/distill_smollm2).

Sampling the replies is the slow part of the draft's data: 115 reply tokens/s from the target
on the 2-core dev CPU at batch 24, 136 minutes for the whole set (measured 2026-12-01). What
training learns from, the teacher's top-K log-probabilities at every reply position, is not
kept: the T = 0.7 shard's cache file is 12.3 MB against its record's 74 kB.
distill_smollm2.teacher_topk recomputes it from the ids with one batched forward, 481 tokens/s
on the same CPU (prompt tokens included; 349 reply positions/s), so a fresh machine rebuilds the
teacher cache from this record in about a third of the time, and gets the same replies.

File format: `ids` uint16 [sum of L] (every example's prompt + reply ids, concatenated; the
vocabulary has 49,152 < 2^16 ids), `lengths` int32 [n] and `first` int32 [n] (the position whose
output predicts the first reply token), `seconds` float64 [] (how long sampling them took,
NaN where unknown: model cards quote it).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from app.assets import DEMO_MODELS_DIR

RECORD_DIR = DEMO_MODELS_DIR / "smollm2_replies"


def record_path(shard_file: str, record_dir: Path = RECORD_DIR) -> Path:
    """The record of a cache shard: replies_T0.7.pt -> <record_dir>/replies_T0.7.npz."""
    return Path(record_dir) / (Path(shard_file).stem + ".npz")


def save_record(examples: list[dict], path: Path, seconds: float | None = None) -> None:
    """Examples ({"ids": [L] ints, "first": int, ...}) -> one compressed .npz of their ids, with
    the seconds sampling them took where known."""
    ids = [np.asarray(e["ids"], dtype=np.int64) for e in examples]
    if any(len(a) and (a.min() < 0 or a.max() >= 2 ** 16) for a in ids):
        raise ValueError("token ids must fit in uint16 (0 .. 65535)")
    flat = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, ids=flat.astype(np.uint16),
                        lengths=np.array([len(a) for a in ids], dtype=np.int32),
                        first=np.array([int(e["first"]) for e in examples], dtype=np.int32),
                        seconds=np.float64(np.nan if seconds is None else seconds))


def load_record(path: Path) -> list[dict]:
    """The examples of one record, in their saved order: [{"ids": LongTensor [L], "first": int}]."""
    with np.load(path) as z:
        flat, lengths, first = z["ids"].astype(np.int64), z["lengths"], z["first"]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lengths) else []
    return [{"ids": torch.from_numpy(flat[s:s + n].copy()), "first": int(f)}
            for s, n, f in zip(starts, lengths, first)]


def recorded_seconds(path: Path) -> float | None:
    """How long sampling a record's replies took, or None where it was not recorded."""
    with np.load(path) as z:
        s = float(z["seconds"]) if "seconds" in z.files else float("nan")
    return None if np.isnan(s) else s
