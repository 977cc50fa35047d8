"""Evaluate a pair for speculative decoding; print and write JSON.

    python -m research.evaluate --corpus ../shared/corpus/austen.txt ../shared/corpus/tinyshakespeare.txt
    python -m research.evaluate --pair smollm2   # the flagship, on held-out chat prompts

Reports (all measured here, on this machine):
  - held-out loss and perplexity of each model (the last 5% of every corpus file);
  - acceptance alpha = mean over positions of sum_x min(p_target(x), q_draft(x)) (Leviathan et
    al. 2023, Def. 3.1), on held-out text and on the target's own samples, at T = 1 and T = 0.7;
    greedy agreement (argmax q == argmax p);
  - mean tokens per target pass at gamma 2, 4, 6 (sampling at T = 1) against the i.i.d.
    prediction (1 - alpha^(gamma+1)) / (1 - alpha) with alpha from the target's own samples;
  - tokens/s of plain target decoding and of speculative decoding at each gamma (greedy and
    T = 0.7), each gamma's speed-up paired with plain decoding of the same prompt seconds
    earlier (speeds()), and the cost ratio c = t_draft / t_target of single-token forwards.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch

from app.engine import DecodeSettings, autoregressive_generate, speculative_generate
from app.models import forward, load_pair, new_cache
from app.speculative import logits_to_probs
from app.assets import TINY_DIR
from research.bootstrap import BOOTSTRAP_DRAWS
from research.train import SEQ_LEN, encode_split

GAMMAS = (2, 4, 6)


def expected_tokens_per_pass(alpha: float, gamma: int) -> float:
    """Leviathan et al. 2023, Eq. (1): E = (1 - alpha^(gamma+1)) / (1 - alpha)."""
    return gamma + 1.0 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def _picks(replies: int, draws: int, seed: int) -> torch.Tensor:
    """[draws, replies] reply indices drawn with replacement: one bootstrap resample per row."""
    return torch.randint(0, replies, (draws, replies), generator=torch.Generator().manual_seed(seed))


def _resampled_means(per_reply: list[torch.Tensor], pick: torch.Tensor) -> torch.Tensor:
    """The mean over all positions of each resample: pick [draws, r] -> [draws]."""
    sums = torch.tensor([float(v.sum()) for v in per_reply], dtype=torch.float64)      # [r]
    counts = torch.tensor([len(v) for v in per_reply], dtype=torch.float64)            # [r]
    return sums[pick].sum(1) / counts[pick].sum(1).clamp_min(1)                       # [draws]


def _percentiles(values: torch.Tensor, level: float) -> tuple[float, float]:
    qs = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    low, high = torch.quantile(values, qs)
    return round(low.item(), 4), round(high.item(), 4)


def bootstrap_ci(per_reply: list[torch.Tensor], level: float = 0.95, draws: int = BOOTSTRAP_DRAWS,
                 seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap interval for the mean over all positions of per-position values
    (per_reply: one [n_i] tensor per reply), resampling whole replies with replacement: the
    positions of one reply are not independent (a draft that loses the thread loses it for the
    rest of the reply), so the reply is the unit (Efron & Tibshirani 1993, ch. 13). Draws:
    research.bootstrap. Returns (low, high)."""
    return _percentiles(_resampled_means(per_reply, _picks(len(per_reply), draws, seed)), level)


def paired_bootstrap_diff(a: list[torch.Tensor], b: list[torch.Tensor], level: float = 0.95,
                          draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> dict:
    """b's mean minus a's, over all positions, where a[i] and b[i] ([n_i] each) are the same
    reply's per-position values under two drafts; its percentile bootstrap interval resamples
    the same replies for both (Efron & Tibshirani 1993, ch. 13), so what every draft finds easy
    or hard in a reply cancels and the interval is narrower than either mean's own. Returns
    {"diff", "ci": (low, high) at `level`, "share_b_le_a": the share of resamples in which b <= a}."""
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        raise ValueError("paired values need the same replies with the same positions on both sides")
    pick = _picks(len(a), draws, seed)
    diffs = _resampled_means(b, pick) - _resampled_means(a, pick)                     # [draws]
    diff = (torch.cat(b).double().mean() - torch.cat(a).double().mean()).item()
    return {"diff": round(diff, 4), "ci": _percentiles(diffs, level),
            "share_b_le_a": round((diffs <= 0).double().mean().item(), 4)}


@torch.inference_mode()
def _logits(model, x: torch.Tensor, int8: bool = False) -> torch.Tensor:
    """x: [1, n] -> [n, vocab] (app.models: any draft); int8: the model with int8 weights
    (app.lean.Int8Weight, on the fast path's cache). x moves to the model's device."""
    x = x.to(next(model.parameters()).device)
    return forward(model, x, new_cache(model, x.shape[1], int8=True) if int8 else new_cache())[0]


def windows(ids: torch.Tensor, n: int) -> list[torch.Tensor]:
    """Up to n non-overlapping [1, SEQ_LEN] windows of a flat id tensor."""
    count = min(n, len(ids) // SEQ_LEN)
    return [ids[i * SEQ_LEN:(i + 1) * SEQ_LEN][None] for i in range(count)]


def loss_and_alpha(pair, seqs: list[torch.Tensor], temperatures=(1.0, 0.7)) -> dict:
    """Teacher-forced over seqs: each model's next-token loss, alpha per temperature, and
    greedy agreement."""
    nll = {"target": [], "draft": []}
    alpha = {t: [] for t in temperatures}
    agree = []
    for x in seqs:
        lt, ld = _logits(pair.target, x), _logits(pair.draft, x)  # [n, vocab] each
        for name, lg in (("target", lt), ("draft", ld)):
            nll[name].append(torch.nn.functional.cross_entropy(lg[:-1], x[0, 1:]).item())
        for t in temperatures:
            p, q = logits_to_probs(lt, t), logits_to_probs(ld, t)
            alpha[t].append(torch.minimum(p, q).sum(-1).mean().item())
        agree.append((lt.argmax(-1) == ld.argmax(-1)).float().mean().item())
    mean = statistics.fmean
    return {"loss": {k: round(mean(v), 4) for k, v in nll.items()},
            "perplexity": {k: round(math.exp(mean(v)), 2) for k, v in nll.items()},
            "alpha": {f"T={t}": round(mean(v), 4) for t, v in alpha.items()},
            "greedy_agreement": round(mean(agree), 4)}


def own_samples(pair, prompts: list[list[int]], temperature: float, n_tokens: int, seed: int) -> list[torch.Tensor]:
    """The target's own continuations (plain sampling), prompt included: [1, len] each."""
    out = []
    for i, ids in enumerate(prompts):
        s = DecodeSettings(temperature=temperature, max_new_tokens=n_tokens, seed=seed + i)
        gen = [t for e in autoregressive_generate(pair, ids, s) for t in e.emitted_ids]
        out.append(torch.tensor([ids + gen]))
    return out


def cost_ratio(pair, repeats: int = 20, fast: bool = False, int8: bool = False, time_draft=None) -> dict:
    """Median single-token forward time of each model over a 64-token cache (fast: on the
    fast path, app.fastpath; int8: the draft with int8 weights). time_draft(repeats, kv_len)
    -> seconds times the draft's pass instead (a feature draft: evaluate_smollm2.time_head)."""
    from app.knee import time_forward
    one = lambda model, int8: time_forward(model, device=pair.device, batch=1, q=1, kv_len=64,  # noqa: E731
                                            repeats=repeats, fast=fast, int8=int8)
    times = {"target": one(pair.target, False),
             "draft": time_draft(repeats, 64) if time_draft else one(pair.draft, int8)}
    return {"t_target_ms": round(times["target"] * 1e3, 3), "t_draft_ms": round(times["draft"] * 1e3, 3),
            "c": round(times["draft"] / times["target"], 3)}


def speeds(pair, prompts, temperature: float, n_tokens: int, rounds: int, gammas=GAMMAS,
           fast: bool = False, int8: bool = False) -> dict:
    """Plain decoding and speculative decoding at each gamma on every prompt, the configurations
    back to back per prompt (a few seconds apart), for `rounds` rounds. Per configuration:
    tokens/s (all prompts' tokens / their seconds, median over rounds), tokens per pass, the
    drafts accepted, and `speedup`: the median over (round, prompt) of its tokens/s divided by
    plain decoding's on the same prompt in the same round, with the lowest and highest of those
    ratios (`speedup_range`). Pairing each run with the plain run next to it keeps a shared
    machine's drift (minutes) out of the ratio. When greedy: whether each gamma's outputs equal
    plain decoding's token for token."""
    configs = [("plain", 0)] + [(f"gamma={g}", g) for g in gammas]
    runs = {k: [] for k, _ in configs}  # key -> [(round, tokens, seconds, passes, drafted, accepted)]
    outputs: dict[str, list] = {k: [] for k, _ in configs}
    for r in range(rounds):
        for i, ids in enumerate(prompts):
            for key, gamma in configs:
                s = DecodeSettings(gamma=max(gamma, 1), temperature=temperature,
                                   max_new_tokens=n_tokens, seed=1000 * r + i, fast=fast, draft_int8=int8)
                gen = speculative_generate if gamma else autoregressive_generate
                start = time.perf_counter()
                events = list(gen(pair, ids, s))
                seconds = time.perf_counter() - start
                runs[key].append((r, sum(len(e.emitted_ids) for e in events), seconds, len(events),
                                  sum(len(e.draft_ids) for e in events), sum(e.n_accepted for e in events)))
                if r == 0:
                    outputs[key].append([t for e in events for t in e.emitted_ids])
    out = {key: _speed_row(rows, runs["plain"]) for key, rows in runs.items()}
    if temperature == 0:
        for key, _ in configs[1:]:
            out[key]["identical_to_plain"] = outputs[key] == outputs["plain"]
    return out


def speedup_of(row: dict, plain: dict) -> float:
    """A speeds() entry's speed-up over plain decoding: its paired "speedup", or for a table
    written before speeds() paired its runs, the ratio of the two tokens/s."""
    return row.get("speedup", row["tokens_per_s"] / plain["tokens_per_s"])


def _speed_row(rows: list[tuple], plain: list[tuple]) -> dict:
    """One configuration's runs (round, tokens, seconds, passes, drafted, accepted), each paired
    with plain decoding's run of the same round and prompt -> its speeds() entry."""
    rounds = sorted({row[0] for row in rows})
    rate = [sum(x[1] for x in rows if x[0] == r) / sum(x[2] for x in rows if x[0] == r) for r in rounds]
    ratios = [(a[1] / a[2]) / (b[1] / b[2]) for a, b in zip(rows, plain)]
    row = {"tokens_per_s": round(statistics.median(rate), 1),
           "tokens_per_pass": round(sum(x[1] for x in rows) / sum(x[3] for x in rows), 3),
           "speedup": round(statistics.median(ratios), 3),
           "speedup_range": [round(min(ratios), 3), round(max(ratios), 3)]}
    drafted = sum(x[4] for x in rows)
    if drafted:  # drafts accepted / drafts verified, in the runs themselves
        row["acceptance"] = round(sum(x[5] for x in rows) / drafted, 3)
    return row


def evaluate(pair, heldout: torch.Tensor, *, windows_n=24, samples_n=8, sample_tokens=96,
             speed_prompts=4, speed_tokens=64, rounds=3, seed=0) -> dict:
    starts = [heldout[i * 997:i * 997 + 24].tolist() for i in range(max(samples_n, speed_prompts))]
    result = {"heldout": loss_and_alpha(pair, windows(heldout, windows_n))}
    for t in (1.0, 0.7):
        own = own_samples(pair, starts[:samples_n], t, sample_tokens, seed)
        result[f"own_samples_T={t}"] = loss_and_alpha(pair, own, temperatures=(t,))["alpha"][f"T={t}"]
    alpha = result["own_samples_T=1.0"]
    result["cost"] = cost_ratio(pair)
    result["speed_greedy"] = speeds(pair, starts[:speed_prompts], 0.0, speed_tokens, rounds)
    result["speed_T=1.0"] = speeds(pair, starts[:speed_prompts], 1.0, speed_tokens, rounds)
    result["speed_T=0.7"] = speeds(pair, starts[:speed_prompts], 0.7, speed_tokens, rounds)
    result["tokens_per_pass_T=1.0"] = {
        f"gamma={g}": {"measured": result["speed_T=1.0"][f"gamma={g}"]["tokens_per_pass"],
                       "predicted": round(expected_tokens_per_pass(alpha, g), 3)} for g in GAMMAS}
    return result


def code_version(root: Path | None = None) -> str | None:
    """Which code an evaluation measured: the checkout's commit (short hash), + "+changes" when
    its Python files differ from it; None outside a git checkout. (The evaluations write JSON
    into the tracked draft directory, so only *.py files count as changes.)"""
    import subprocess
    root = root or Path(__file__).resolve().parents[1]
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        changed = subprocess.run(git + ["diff", "--name-only", "HEAD", "--", "*.py"], capture_output=True,
                                 text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+changes" if changed else "")


def _gammas(text: str) -> tuple[int, ...]:
    """"1,2,4" -> (1, 2, 4): depths from 1 to app.validation.MAX_GAMMA (argparse type)."""
    from app.validation import MAX_GAMMA
    try:
        gammas = tuple(int(g) for g in text.split(","))
    except ValueError:
        gammas = ()
    if not gammas or min(gammas) < 1 or max(gammas) > MAX_GAMMA:
        raise argparse.ArgumentTypeError(f"{text!r}: give depths from 1 to {MAX_GAMMA}, e.g. 1,2,4")
    return gammas


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", choices=["embedded", "smollm2"], default="embedded")
    ap.add_argument("--corpus", nargs="+", default=["../shared/corpus/austen.txt", "../shared/corpus/tinyshakespeare.txt"])
    ap.add_argument("--models", type=Path, default=TINY_DIR)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=None, help="default: MODELS/eval.json")
    ap.add_argument("--quick", action="store_true", help="fewer windows and samples (tests)")
    ap.add_argument("--fast", action="store_true", help="--pair smollm2: time on the fast path (app.fastpath)")
    ap.add_argument("--draft-int8", action="store_true",
                    help="--pair smollm2 with --fast: the draft with int8 weights (app.lean.Int8Weight)")
    ap.add_argument("--draft", type=Path, default=None,
                    help="--pair smollm2: the draft's directory (default demo_models/smollm2_draft)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="--pair smollm2: rounds of the speed runs (default 3; 1 with --quick)")
    ap.add_argument("--gammas", type=_gammas, default=None,
                    help="--pair smollm2: depths of the speed runs, e.g. 1,2,4 (default 1,2,3,4,6)")
    ap.add_argument("--realistic", type=int, default=0, metavar="N",
                    help="--pair smollm2: also alpha per category on the realistic set's first N prompts of each")
    args = ap.parse_args(argv)
    if args.pair == "smollm2":
        from research import evaluate_smollm2
        if args.draft_int8 and not args.fast:
            ap.error("--draft-int8 runs on the fast path: add --fast")
        if args.realistic < 0:
            ap.error("--realistic N: N must be >= 0 (prompts per category)")
        return evaluate_smollm2.main(args.out, args.quick, args.fast, args.draft_int8, args.device, args.draft,
                                     args.rounds, args.gammas, args.realistic)
    pair = load_pair(str(args.models / "target"), str(args.models / "draft"), device=args.device)
    texts = [Path(p).read_text(encoding="utf-8") for p in args.corpus]
    _, heldout = encode_split(pair.tokenizer, texts)
    kw = dict(windows_n=6, samples_n=3, sample_tokens=64, speed_prompts=2, speed_tokens=32, rounds=1) if args.quick else {}
    t0 = time.time()
    result = {"device": pair.device, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "commit": code_version(),
              "target_params": pair.info["target_params"], "draft_params": pair.info["draft_params"],
              **evaluate(pair, heldout, **kw)}
    result["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(result, indent=1))
    out = args.out or args.models / "eval.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
