"""The flagship teacher's sampled replies as token ids, kept in the repository
(demo_models/smollm2_replies/, one .npz per reply shard of demo_models/distill_smollm2).

Sampling the replies is the slow part of the draft's data: 115 reply tokens/s from the target
on the 2-core dev CPU at batch 24, 136 minutes for the whole set (measured 2026-12-01). What
training learns from, the teacher's top-K log-probabilities at every reply position, is not
kept: the T = 0.7 shard's cache file is 12.3 MB against its record's 64 kB.
distill_smollm2.teacher_topk recomputes it from the ids with one batched forward, 481 tokens/s
on the same CPU (prompt tokens included; 349 reply positions/s), so a fresh machine rebuilds the
teacher cache from this record in about a third of the time, and gets the same replies.

File format: `ids` uint16 [sum of L] (every example's prompt + reply ids, concatenated; the
vocabulary has 49,152 < 2^16 ids), `lengths` int32 [n] and `first` int32 [n] (the position whose
output predicts the first reply token), `seconds` float64 [] (how long sampling them took,
NaN where unknown: model cards quote it). The arrays are `.npy` members of a zip that np.load
reads; written with LZMA (write_npz), which keeps the records a fifth smaller than
np.savez_compressed's deflate, so the tracked tree stays within one GPU call's 64 MiB
(tests/test_demo_models.py). `python -m research.teacher_record --repack` rewrites the committed
records in this form, their arrays unchanged.
"""
from __future__ import annotations

import argparse
import zipfile
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
    write_npz(path, ids=flat.astype(np.uint16), lengths=np.array([len(a) for a in ids], dtype=np.int32),
              first=np.array([int(e["first"]) for e in examples], dtype=np.int32),
              seconds=np.float64(np.nan if seconds is None else seconds))


def write_npz(path: Path, **arrays: np.ndarray) -> None:
    """np.savez's layout (one NAME.npy member per array, what np.load reads), LZMA-compressed."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_LZMA) as z:
        for name, array in arrays.items():
            with z.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def repack(path: Path) -> tuple[int, int]:
    """Rewrite one record with write_npz, its arrays unchanged (checked); (bytes before, after)."""
    before = Path(path).stat().st_size
    with np.load(path) as z:
        arrays = {name: z[name] for name in z.files}
    write_npz(path, **arrays)
    with np.load(path) as z:
        if set(z.files) != set(arrays) or any(not np.array_equal(z[n], a, equal_nan=True) for n, a in arrays.items()):
            raise RuntimeError(f"{path}: repacked arrays differ")
    return before, Path(path).stat().st_size


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repack", action="store_true", help=f"rewrite every record in {RECORD_DIR} with LZMA")
    if ap.parse_args().repack:
        sizes = [repack(p) for p in sorted(RECORD_DIR.glob("*.npz"))]
        print(f"{len(sizes)} records: {sum(b for b, _ in sizes):,} -> {sum(a for _, a in sizes):,} bytes")


if __name__ == "__main__":
    main()
