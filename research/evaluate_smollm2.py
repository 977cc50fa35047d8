"""Evaluate the flagship pair: SmolLM2-135M-Instruct (Q4 GGUF, dequantised) + its distilled draft.

    python -m research.evaluate --pair smollm2 [--quick]
    MKL_CBWR=AVX512 python -m research.evaluate --pair smollm2          # -> eval_mkl_avx512.json
    MKL_CBWR=AVX512 python -m research.evaluate --pair smollm2 --fast   # -> eval_mkl_avx512_fast.json
    python -m research.evaluate --pair smollm2 --device cuda --rounds 1 --gammas 1,2,4  # sized for a GPU call
    python -m research.evaluate --pair smollm2 --realistic 2     # + alpha per category on the realistic set

The JSON is rewritten after every stage ("stages_done"; "complete": false until the end), so a
run stopped by a time limit keeps what it measured.

Held-out chat prompts only (research.prompts.HELDOUT_TOPICS: topics the draft never saw the
target answer), each through the chat template exactly as the app sends it. Reports, measured
on this machine:
  - alpha = mean over positions of sum_x min(p_target, q_draft) on the target's own sampled
    replies at T = 0.7 and T = 1 (Leviathan et al. 2023, Def. 3.1), and greedy agreement;
  - c = t_draft / t_target of single-token forwards (median of 20);
  - tokens/s of plain decoding and of speculative decoding for gamma in GAMMAS, greedy and at
    T = 0.7, in the same run, 3 rounds with every configuration run back to back per prompt;
    greedy outputs compared token for token;
  - the best gamma by its paired speed-up (median over rounds and prompts of its tokens/s over
    plain decoding's on the same prompt seconds earlier; research.evaluate.speeds) and that
    speed-up's range; tokens per pass against (1 - a^(g+1)) / (1 - a);
  - the CPU regime (app.cpu_regime): is the knee visible, and MKL_CBWR in effect;
  - with --realistic N: alpha at T = 0.7 per category of the realistic evaluation set (its first
    N prompts of every category, research/eval_prompts.json; research.eval_set.measure) with
    bootstrap intervals and issue 42's goals judged from them (research.eval_report.summary).
    The whole set, resumable and with speed-ups per prompt, is research.eval_full's job.
"""
from __future__ import annotations

import os
import time

import torch

from research.evaluate import cost_ratio, expected_tokens_per_pass, own_samples, speeds
from research.flagship import load, reply_alpha
from research.prompts import heldout_prompts, heldout_tasks

GAMMAS = (1, 2, 3, 4, 6)


def chat_prompt_texts(n: int, tasks: bool = False) -> list[str]:
    """n held-out prompts spread over the held-out topics that training did not use to choose
    its checkpoint (distill_smollm2.HELDOUT_FOR_TRAINING): every len // n-th, the first n.
    tasks: the task template of each instead (prompts.heldout_tasks)."""
    from research.distill_smollm2 import HELDOUT_FOR_TRAINING
    prompts = (heldout_tasks() if tasks else heldout_prompts())[HELDOUT_FOR_TRAINING:]
    return prompts[::max(1, len(prompts) // n)][:n]


def chat_prompts(pair, n: int) -> list[list[int]]:
    """chat_prompt_texts(n) as chat-template token ids, as the app sends them."""
    from app.validation import prompt_ids
    return [prompt_ids(pair.tokenizer, p, pair.context, 256, chat=True) for p in chat_prompt_texts(n)]


@torch.inference_mode()
def time_head(pair, repeats: int = 20, kv_len: int = 64, fast: bool = False, int8: bool = False) -> float:
    """Median seconds of one single-token pass of a feature draft (projection of F included)
    over a kv_len-token cache, after one warm-up; as app.knee.time_forward times any model."""
    import statistics

    from app.feature_draft import head_forward
    from app.models import crop_cache, new_cache
    from app.timing import timed_call
    gen, head, hidden = torch.Generator().manual_seed(0), pair.draft, pair.draft.config.hidden_size
    cache = new_cache(head, kv_len + 1, int8=int8) if fast else new_cache()
    ids = torch.randint(0, pair.vocab, (1, kv_len + 1), generator=gen).to(pair.device)
    f = torch.randn(1, kv_len + 1, hidden, generator=gen).to(pair.device)     # [1, kv_len + 1, hidden]
    head_forward(head, ids[:, :kv_len], f[:, :kv_len], cache)
    times = []
    for _ in range(repeats + 1):
        times.append(timed_call(lambda: head_forward(head, ids[:, kv_len:], f[:, kv_len:], cache), pair.device,
                                model_name="draft", phase="knee", batch=1, tokens=1, kv_len=kv_len)[1].seconds)
        crop_cache(cache, kv_len)
    return statistics.median(times[1:])


def cost(pair, fast: bool = False, int8: bool = False) -> dict:
    """c = t_draft / t_target of single-token passes (research.evaluate.cost_ratio); a
    feature draft's pass is timed with its feature input (time_head)."""
    from app.feature_draft import is_feature_draft
    time_draft = None
    if is_feature_draft(pair.draft):
        time_draft = lambda repeats, kv_len: time_head(pair, repeats, kv_len, fast=fast, int8=int8)  # noqa: E731
    return cost_ratio(pair, fast=fast, int8=int8, time_draft=time_draft)


def best(speed: dict) -> dict:
    """The gamma with the highest paired speed-up over plain decoding (speeds()' "speedup"),
    its speed-up and that speed-up's range over the (round, prompt) pairs."""
    key = max((k for k in speed if k != "plain"), key=lambda k: speed[k]["speedup"])
    return {"gamma": int(key.split("=")[1]), "speedup": speed[key]["speedup"],
            "speedup_range": speed[key]["speedup_range"]}


def realistic(pair, per_category: int, tokens: int, int8: bool = False) -> dict:
    """alpha at T = 0.7 per category on the first per_category prompts of every category of the
    realistic set, its intervals and the goals judged from them (research.eval_report.summary),
    and each prompt's alpha ("per_prompt": id, category, positions, alpha)."""
    from research.eval_report import summary
    from research.eval_set import first_per_category, load, measure
    rows = measure(pair, first_per_category(load(), per_category), 0.7, tokens, int8=int8)
    return {"prompts_per_category": per_category, "tokens": tokens, **summary(rows),
            "per_prompt": [{k: r[k] for k in ("id", "category", "positions", "alpha")} for r in rows]}


def evaluate(pair, *, samples_n=8, sample_tokens=96, speed_prompts=3, speed_tokens=64, rounds=3,
             seed=0, fast=False, int8=False, gammas=GAMMAS, save=None, realistic_n=0) -> dict:
    """The measurements in the module docstring, stage by stage; after each stage save(result),
    if given, sees what is measured so far (main writes it to disk: a run stopped by a time
    limit, as on a borrowed GPU, keeps its finished stages)."""
    from app.cpu_regime import probe
    from app.hardware import device_info
    result = {"prompts": "held-out chat prompts (research/prompts.py: HELDOUT_TOPICS, past the first 48)"}
    t0 = time.time()

    def done(stage: str) -> None:
        result.setdefault("stages_done", []).append(stage)
        print(f"  evaluate: {stage} done at {time.time() - t0:.0f} s", flush=True)
        if save is not None:
            save(result)

    prompts = chat_prompts(pair, max(samples_n, speed_prompts))
    for t in (0.7, 1.0):
        own = own_samples(pair, prompts[:samples_n], t, sample_tokens, seed)
        result[f"own_samples_T={t}"] = reply_alpha(pair, own, [len(p) for p in prompts[:samples_n]], t, int8)
        done(f"alpha at T = {t}")
    result["cost"] = cost(pair, fast=fast, int8=int8)
    regime = probe(pair.target, pair.device, device_info(pair.device)["name"])
    result["regime"] = regime.to_dict()
    done("c and the regime probe")
    for name, temperature in (("greedy", 0.0), ("T=0.7", 0.7)):
        table = speeds(pair, prompts[:speed_prompts], temperature, speed_tokens, rounds, gammas, fast, int8)
        result[f"speed_{name}"] = table
        result[f"best_{name}"] = best(table)
        done(f"speeds, {name}")
    alpha = result["own_samples_T=0.7"]["alpha"]
    result["tokens_per_pass_T=0.7"] = {
        f"gamma={g}": {"measured": result["speed_T=0.7"][f"gamma={g}"]["tokens_per_pass"],
                       "predicted": round(expected_tokens_per_pass(alpha, g), 3)} for g in gammas}
    result["greedy_identical"] = all(v.get("identical_to_plain", True) for v in result["speed_greedy"].values())
    if realistic_n:
        result["realistic_T=0.7"] = realistic(pair, realistic_n, sample_tokens, int8)
        done("alpha per category on the realistic set")
    return result


def main(out: str | None, quick: bool, fast: bool = False, int8: bool = False, device: str = "cpu",
         draft=None, rounds: int | None = None, gammas: tuple[int, ...] | None = None, realistic_n: int = 0) -> dict:
    """device: "cpu" (the card's numbers) or "cuda" (written to eval_cuda*.json, for a GPU
    session: benchmarks/gpu_distill.sh runs it eagerly, sized with rounds and gammas; --fast
    there compiles a CUDA graph for every pass size, tens of seconds each: app.fastpath). draft: the
    draft's directory (default demo_models/smollm2_draft); the JSON goes there, rewritten after
    every stage ("complete": false until the last). rounds, gammas: the speed runs' rounds and
    depths (default 3 and GAMMAS; fewer to fit a time limit). realistic_n: also alpha per
    category on the first realistic_n prompts of every category of the realistic set."""
    import json
    from pathlib import Path

    from app.assets import SMOLLM2_DRAFT_DIR
    pair = load(device, draft)
    kw = {"samples_n": 2, "sample_tokens": 32, "speed_prompts": 1, "speed_tokens": 16, "rounds": 1} if quick else {}
    kw.update({k: v for k, v in (("rounds", rounds), ("gammas", gammas)) if v is not None}, realistic_n=realistic_n)
    suffix = "_mkl_" + os.environ["MKL_CBWR"].lower() if os.environ.get("MKL_CBWR") else ""
    suffix = f"_{pair.device}" if pair.device != "cpu" else suffix
    suffix += ("_fast" if fast else "") + ("_int8" if int8 else "")
    path = Path(out) if out else Path(draft or SMOLLM2_DRAFT_DIR) / f"eval{suffix}.json"
    t0 = time.time()
    from research.evaluate import code_version
    result = {"device": pair.device, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "commit": code_version(),  # which code measured it (the card's columns span commits)
              "cpu_isa": torch.backends.cpu.get_cpu_capability(),  # "AVX512", "AVX2", ...: speeds depend on it
              "mkl_cbwr": os.environ.get("MKL_CBWR"), "fast_path": fast, "draft_int8": int8, "target_params": pair.info["target_params"],
              "draft_params": pair.info["draft_params"], "target_weights": pair.info["weights"]}
    write = lambda r: path.write_text(json.dumps(r, indent=1) + "\n")  # noqa: E731
    result.update(evaluate(pair, fast=fast, int8=int8, save=lambda part: write({**result, **part, "complete": False}),
                           **kw))
    result["seconds"] = round(time.time() - t0, 1)
    result["complete"] = True
    print(json.dumps(result, indent=1))
    write(result)
    return result
