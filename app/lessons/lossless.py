"""Lesson 5 - speculative sampling is lossless (and two ways to break it).

Claim (Leviathan et al. 2023, Thm 3.5; Chen et al. 2023): draft x ~ q, accept with probability
min(1, p(x) / q(x)), after the first rejection sample from norm(max(0, p - q)) - the emitted
tokens are distributed exactly as the target p alone would sample them.

Experiment: N samples of the next k tokens after one prompt, from speculative sampling and from
the target alone (temperature > 0), overlaid as histograms over the most frequent outcomes, with
the total-variation distance TV = 1/2 sum_x |f_spec(x) - f_target(x)| and its noise floor: the
TV between two halves of the pooled samples under random relabelling (a permutation test, B
splits): what TV looks like when both samples come from one distribution. For k = 1 the exact
target distribution p(. | prompt) is known and shown too.

Two broken variants (the "break it" switch):
  * greedy_draft - the draft proposes argmax q but q(x) is still used as its probability in the
                   ratio: a greedy draft beside a sampling target (transformers issue #32867)
  * no_residual  - after a rejection resample from p instead of norm(max(0, p - q)): mass the
                   draft already covered is counted twice, P(x) = min(p, q)(x) + (1 - alpha) p(x)

Sampler: N independent samples (one seeded generator; every sample draws its own numbers from
it, so a run is reproducible and samples differ), up to CHUNK sequences as one batch. Both
models read the prompt once; their caches are repeated per sample. One speculative step drafts
gamma tokens per sample (gamma >= k), the target verifies all of them in one pass, and `verify`
(app.speculative, the product's Algorithm 1) - or a broken variant - decides each sample. A
sample that got fewer than k tokens (an early rejection) finishes with plain target sampling,
which is exact, so any difference from p comes from the speculative step.

Power: the noise floor (95th percentile of the relabelled TVs) is the smallest TV this N tells
from chance; it shrinks as 1/sqrt(N). A broken variant whose exact TV (known for k = 1) is
under the floor cannot be seen at this N: the verdict says so, with the N that would (the
floor at 2/3 of that TV), instead of calling the sampler lossless.
"""
from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np
import torch

from app.feature_draft import head_forward, is_feature_draft, one_back
from app.kvcache import forward, new_cache
from app.lessons.common import (Progress, check_float, check_int, encode, need_draft, pair_label,
                                part, prompts_for, require)
from app.lessons.verdict import Verdict
from app.speculative import logits_to_probs, residual, sample, verify

VARIANTS = ("exact", "greedy_draft", "no_residual")
VARIANT_LABELS = {"target": "target alone", "exact": "speculative (exact)",
                  "greedy_draft": "broken: greedy draft, sampling target",
                  "no_residual": "broken: no residual (resample from p)"}
DEFAULT_PROMPT = "It is a truth universally acknowledged, that a single man in possession of a good fortune"
QUICK = {"n": 2000, "k": 1}  # N = 400 cannot see the no-residual bug on the embedded pair
CHUNK = 256  # samples per batch, fewer for large vocabularies (CHUNK_FLOATS of q_draft at most)
CHUNK_FLOATS = 1 << 25
TOP_OUTCOMES = 12
EDGE_P = 0.01  # the exact arm above the floor with p >= EDGE_P: 1 run in 20 lands there by chance
CLAIM = ("speculative sampling draws from the target's distribution (TV within the noise floor), "
         "and each broken variant moves it (TV above the floor)")
LABELS = {"tv, noise_*, p_value, tv_to_exact, freqs": "measured (sampled on this device)",
          "predicted_tv, exact_p": "calculated from the two models' distributions (k = 1)"}


def verify_no_residual(draft_ids, q_draft, p_target, generator=None, greedy=False):
    """BROKEN on purpose: Algorithm 1, but after a rejection the token comes from p, not from
    norm(max(0, p - q))."""
    verdict = verify(draft_ids, q_draft, p_target, generator, greedy)
    if not verdict.is_bonus:
        verdict.next_token = sample(p_target[verdict.n_accepted], generator, greedy)
    return verdict


def predicted_first_token(p_target, q_draft, variant: str):
    """The exact distribution of the FIRST emitted token under each variant (k = 1): [V].

    exact:        p                                               (Leviathan Thm 3.5)
    greedy_draft: a delta_x* + (1 - a) norm(max(0, p - q)),  x* = argmax q, a = min(1, p(x*) / q(x*))
    no_residual:  min(p, q) + (1 - alpha) p,  alpha = sum min(p, q)
    """
    if variant == "exact":
        return p_target.clone()
    if variant == "no_residual":
        overlap = torch.minimum(p_target, q_draft)
        return overlap + (1 - overlap.sum()) * p_target
    x = int(q_draft.argmax())
    accept = min(1.0, float(p_target[x] / q_draft[x]))
    out = (1 - accept) * residual(p_target, q_draft)
    out[x] += accept
    return out


def _repeat(cache, n: int):
    """A copy of a batch-1 cache repeated to batch n (transformers DynamicCache API)."""
    cache = copy.deepcopy(cache)
    cache.batch_repeat_interleave(n)
    return cache


class Sampler:
    """Both models after reading the prompt once; samples continuations in batches."""

    @torch.inference_mode()
    def __init__(self, pair, prompt_ids: list[int], temperature: float, generator):
        self.pair, self.vocab, self.gen = pair, pair.vocab, generator
        self.transform = lambda logits: logits_to_probs(logits[..., :self.vocab], temperature)
        x = torch.tensor([prompt_ids], device=pair.device)  # [1, L]
        self.t_cache, self.d_cache = new_cache(), new_cache()
        self.features = is_feature_draft(pair.draft)  # app.feature_draft: it reads the target's F
        if self.features:
            logits, f = forward(pair.target, x, self.t_cache, hidden=True)              # f: [1, L, hidden]
            q_logits, self.f_first = head_forward(pair.draft, x, one_back(f), self.d_cache)  # f_first: [1, L, hidden]
            self.f_first = self.f_first[:, -1:]                                         # [1, 1, hidden]
        else:
            logits, q_logits = forward(pair.target, x, self.t_cache), forward(pair.draft, x, self.d_cache)
        self.p_first = self.transform(logits[0, -1]).cpu()  # [V]
        self.q_first = self.transform(q_logits[0, -1]).cpu()  # [V]

    def _draw(self, probs):  # [M, V] -> [M]
        return torch.multinomial(probs, 1, generator=self.gen)[:, 0]

    @torch.inference_mode()
    def target(self, seqs: list[list[int]], k: int) -> list[list[int]]:
        """Extend equal-length continuations (possibly empty) to k tokens by sampling from p."""
        j, m = len(seqs[0]), len(seqs)
        out = torch.tensor(seqs, dtype=torch.long).reshape(m, j)  # [M, j]
        if j < k:
            probs = self.p_first.expand(m, -1)
            cache = _repeat(self.t_cache, m) if j or k > 1 else None
            if j:
                probs = self.transform(forward(self.pair.target, out.to(self.pair.device), cache)[:, -1]).cpu()
            while out.shape[1] < k:
                nxt = self._draw(probs)
                out = torch.cat([out, nxt[:, None]], 1)  # [M, j + 1]
                if out.shape[1] < k:
                    logits = forward(self.pair.target, nxt[:, None].to(self.pair.device), cache)
                    probs = self.transform(logits[:, -1]).cpu()
        return out.tolist()

    @torch.inference_mode()
    def _draft(self, m: int, gamma: int, greedy_draft: bool):
        """gamma drafted tokens per sample [M, gamma] and q_draft [M, gamma, V]."""
        cache, q_cur, ids, rows = _repeat(self.d_cache, m), self.q_first.expand(m, -1), [], []
        f_cur = self.f_first.expand(m, -1, -1) if self.features else None  # [M, 1, hidden]
        for i in range(gamma):
            x = q_cur.argmax(-1) if greedy_draft else self._draw(q_cur)  # [M]
            ids.append(x), rows.append(q_cur)
            if i < gamma - 1:
                x = x[:, None].to(self.pair.device)  # [M, 1]
                if self.features:  # later drafts see the head's own predicted features
                    logits, f_cur = head_forward(self.pair.draft, x, f_cur, cache)
                else:
                    logits = forward(self.pair.draft, x, cache)
                q_cur = self.transform(logits[:, -1]).cpu()
        return torch.stack(ids, 1), torch.stack(rows, 1)

    @torch.inference_mode()
    def speculative(self, m: int, k: int, gamma: int, variant: str) -> list[list[int]]:
        """m samples of k tokens: one speculative step, then plain target sampling if short."""
        draft_ids, q_draft = self._draft(m, gamma, variant == "greedy_draft")
        logits = forward(self.pair.target, draft_ids.to(self.pair.device), _repeat(self.t_cache, m))
        p_target = torch.cat([self.p_first.expand(m, 1, -1), self.transform(logits).cpu()], 1)  # [M, g+1, V]
        check = verify_no_residual if variant == "no_residual" else verify
        outs = []
        for s in range(m):
            v = check(draft_ids[s], q_draft[s], p_target[s], self.gen)
            outs.append((draft_ids[s, :v.n_accepted].tolist() + [v.next_token])[:k])
        by_len: dict[int, list[int]] = {}
        for s, seq in enumerate(outs):
            by_len.setdefault(len(seq), []).append(s)
        for length, members in by_len.items():
            if length < k:
                for s, seq in zip(members, self.target([outs[s] for s in members], k)):
                    outs[s] = seq
        return outs


def tv_distance(a: Counter, b: Counter) -> float:
    """1/2 sum_x |f_a(x) - f_b(x)| between two empirical distributions (outcome counts)."""
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a[x] / na - b[x] / nb) for x in set(a) | set(b))


def permutation_tvs(a: list, b: list, splits: int, seed: int) -> np.ndarray:
    """TV between random relabellings of the pooled samples (same sizes as a and b)."""
    index = {x: i for i, x in enumerate(set(a) | set(b))}
    pooled = np.array([index[x] for x in a + b])
    rng, n, bins = np.random.default_rng(seed), len(a), len(index)
    out = np.empty(splits)
    for i in range(splits):
        perm = rng.permutation(pooled)
        fa = np.bincount(perm[:n], minlength=bins) / n
        fb = np.bincount(perm[n:], minlength=bins) / (len(pooled) - n)
        out[i] = 0.5 * np.abs(fa - fb).sum()
    return out


@dataclass
class ArmResult:
    """One sampled arm against the target-only sample."""
    variant: str
    label: str
    tv: float
    noise_mean: float
    noise_q95: float
    p_value: float
    tv_to_exact: float | None  # k = 1: TV of the sample to the exact p(. | prompt)
    predicted_tv: float | None  # k = 1: TV of this variant's exact output distribution to p
    freqs: list[float]  # over LosslessResult.outcomes, then "other"

    @property
    def consistent(self) -> bool:
        return self.tv <= self.noise_q95 + 1e-9


@dataclass
class LosslessResult:
    model: str
    settings: dict
    verdict: Verdict
    detectable_tv: float  # the exact arm's noise floor: smaller distortions go unseen at this N
    outcomes: list[list[int]]
    outcome_texts: list[str]
    target_freqs: list[float]
    exact_p: list[float] | None  # k = 1 only
    target_tv_to_exact: float | None
    arms: list[ArmResult]

    def headline(self) -> str:
        parts = [f"{a.label}: TV **{a.tv:.3f}** ({'within' if a.consistent else 'above'} the noise floor "
                 f"{a.noise_q95:.3f})" for a in self.arms]
        return f"{self.verdict.text()}\n\nMeasured: " + "; ".join(parts) + "."

    def summary(self) -> list[str]:
        s = self.settings
        lines = [f"N = {s['n']} samples of k = {s['k']} tokens, T = {s['temperature']}, γ = {s['gamma']}, "
                 f"noise floor: TV of {s['splits']} random relabellings (95th percentile)"]
        lines += [f"  {a.label:40s} TV {a.tv:.3f}  noise {a.noise_q95:.3f}  p = {a.p_value:.3f}"
                  + (f"  TV to exact p {a.tv_to_exact:.3f} (predicted {a.predicted_tv:.3f} + noise)"
                     if a.tv_to_exact is not None else "")
                  for a in self.arms]
        lines += [f"{k}: {v}" for k, v in LABELS.items()]
        return lines + [self.headline().replace("**", "")]

    def to_dict(self) -> dict:
        return {"lesson": "lossless", **asdict(self), "verdict": self.verdict.to_dict(), "labels": dict(LABELS)}


def needed_n(n: int, floor: float, tv: float) -> int:
    """Samples per arm at which the noise floor (∝ 1/sqrt(N)) falls to 2/3 of a TV of `tv`."""
    return int(math.ceil(n * (1.5 * floor / tv) ** 2)) if tv > 0 else 0


def lossless_verdict(n: int, arms: list[ArmResult]) -> tuple[bool | None, str]:
    """Held when the exact arm is within its noise floor and each broken one above its own; not
    held when the exact arm is clearly above (p < EDGE_P) or a broken variant the test has the
    power to see (exact TV above 1.5 floors) stays within it; otherwise inconclusive (the exact
    arm at the edge, or a broken variant too small for this N)."""
    exact, broken = arms[0], arms[1:]
    power = (f"at N = {n:,} per arm the test sees a TV above ≈ {exact.noise_q95:.3f} (its noise floor); "
             "smaller distortions go unseen")
    if not exact.consistent:
        if exact.p_value < EDGE_P:
            return False, (f"the exact sampler's TV {exact.tv:.3f} is above the noise floor {exact.noise_q95:.3f} "
                           f"(p = {exact.p_value:.3f}): its output differs from the target's; {power}.")
        return None, (f"the exact sampler's TV {exact.tv:.3f} is just above the floor {exact.noise_q95:.3f} "
                      f"(p = {exact.p_value:.2f}: 1 run in 20 lands there by chance; re-run with another seed); {power}.")
    unseen = [a for a in broken if a.consistent]
    blind = [a for a in unseen if a.predicted_tv is None or a.predicted_tv <= 1.5 * a.noise_q95]
    head = f"exact: TV {exact.tv:.3f} within the floor {exact.noise_q95:.3f}"
    moved = "".join(f"; {a.variant}: TV {a.tv:.3f} above {a.noise_q95:.3f}" for a in broken if not a.consistent)
    if not unseen:
        return True, f"{head}{moved}; {power}."
    if len(blind) < len(unseen):
        missed = ", ".join(f"{a.variant} (TV {a.tv:.3f}, exact {a.predicted_tv:.3f})" for a in unseen if a not in blind)
        return False, f"{head}{moved}; but {missed} stayed within the floor though this N can see it; {power}."
    too_small = "; ".join(f"{a.variant}: TV {a.tv:.3f} within the floor {a.noise_q95:.3f}"
                          + (f" - its exact TV {a.predicted_tv:.3f} is not clear of the floor; N ≈ "
                             f"{needed_n(n, a.noise_q95, a.predicted_tv):,} would see it" if a.predicted_tv else
                             " - this N may be too small to see it") for a in blind)
    return None, f"{head}{moved}; {too_small}; {power}."


def lossless(pair, *, prompt: str | None = None, n: int = 2000, k: int = 1, gamma: int = 3,
             temperature: float = 1.0, variants=VARIANTS, seed: int = 0, splits: int = 200,
             progress: Progress | None = None) -> LosslessResult:
    """Target-only samples against each variant's speculative samples (module docstring).
    prompt: default the pair's first (common.prompts_for: a chat question for an instruct target)."""
    need_draft(pair)
    prompt = prompts_for(pair)[0] if prompt is None else prompt
    n, k = check_int("N (samples)", n, 10, 100_000), check_int("k (tokens)", k, 1, 4)
    gamma = check_int("gamma", gamma, k, 16)
    require(not isinstance(temperature, (int, float)) or temperature > 0,
            "temperature must be above 0: greedy decoding is deterministic, there is no distribution to compare")
    temperature = check_float("temperature", temperature, 0.01, 10.0)
    splits, seed = check_int("splits", splits, 10, 10_000), check_int("seed", seed, 0, 2**31 - 1)
    variants = ["exact", *[v for v in variants if v != "exact"]]
    for v in variants:
        require(v in VARIANTS, f"unknown variant {v!r}: choose from {', '.join(VARIANTS)}")
    sampler = Sampler(pair, encode(pair, prompt, k + gamma), temperature, torch.Generator().manual_seed(seed))
    arms, samples = ["target", *variants], {}
    chunk = max(8, min(CHUNK, CHUNK_FLOATS // (pair.vocab * (gamma + 1))))
    for i, arm in enumerate(arms):
        stage, chunks = part(progress, i / len(arms), (i + 1) / len(arms)), []
        for start in range(0, n, chunk):
            stage(start / n, f"{VARIANT_LABELS[arm]}: {start}/{n} samples")
            m = min(chunk, n - start)
            chunks += sampler.target([[]] * m, k) if arm == "target" else sampler.speculative(m, k, gamma, arm)
        samples[arm] = [tuple(s) for s in chunks]
    part(progress, 0, 1)(1.0, "comparing distributions")
    return _compare(pair, sampler, samples, variants, {"prompt": prompt, "n": n, "k": k, "gamma": gamma,
                    "temperature": temperature, "seed": seed, "splits": splits})


def _tv_to(p_exact, counts: Counter, n: int) -> float:
    """TV between an empirical distribution of first tokens (k = 1) and the exact p: [V]."""
    freq = torch.zeros_like(p_exact)
    for (token,), count in counts.items():
        freq[token] = count / n
    return 0.5 * float((freq - p_exact).abs().sum())


def _arm(variant, samples, counts, sampler, settings, index) -> ArmResult:
    """One arm against the target-only sample: TV, permutation noise, and for k = 1 the TV to p."""
    n, first = settings["n"], settings["k"] == 1
    noise = permutation_tvs(samples["target"], samples[variant], settings["splits"], settings["seed"] + index)
    tv = tv_distance(counts["target"], counts[variant])
    p = sampler.p_first
    theory = predicted_first_token(p, sampler.q_first, variant) if first else None
    return ArmResult(variant=variant, label=VARIANT_LABELS[variant], tv=tv, noise_mean=float(noise.mean()),
                     noise_q95=float(np.quantile(noise, 0.95)),
                     p_value=float((1 + (noise >= tv - 1e-9).sum()) / (1 + len(noise))),
                     tv_to_exact=_tv_to(p, counts[variant], n) if first else None,
                     predicted_tv=0.5 * float((theory - p).abs().sum()) if first else None, freqs=[])


def _compare(pair, sampler, samples, variants, settings) -> LosslessResult:
    """Histograms over the TOP_OUTCOMES most frequent outcomes (+ "other") and every arm's TV."""
    n, first = settings["n"], settings["k"] == 1
    counts = {arm: Counter(s) for arm, s in samples.items()}
    top = [x for x, _ in (counts["target"] + counts["exact"]).most_common(TOP_OUTCOMES)]
    freqs = lambda c: [c[x] / n for x in top] + [1 - sum(c[x] for x in top) / n]
    arms = []
    for j, v in enumerate(variants):
        arms.append(_arm(v, samples, counts, sampler, settings, j))
        arms[-1].freqs = freqs(counts[v])
    exact = None
    if first:
        exact = [float(sampler.p_first[x[0]]) for x in top]
        exact.append(max(0.0, 1 - sum(exact)))
    held, evidence = lossless_verdict(n, arms)
    return LosslessResult(model=pair_label(pair), settings=settings,
                          verdict=Verdict(CLAIM, held, evidence),  # nothing timed: no load check
                          detectable_tv=arms[0].noise_q95, outcomes=[list(x) for x in top],
                          outcome_texts=[repr(pair.tokenizer.decode(list(x)))[1:-1] for x in top],
                          target_freqs=freqs(counts["target"]), exact_p=exact,
                          target_tv_to_exact=_tv_to(sampler.p_first, counts["target"], n) if first else None,
                          arms=arms)
