"""The flagship pair and alpha over the target's own replies: the measuring primitives that the
flagship's evaluation (research.evaluate_smollm2), the realistic set (research.eval_set), the
paired draft comparison (research.compare_drafts) and the lab's other scripts share.

    pair = load(draft=DIR)                                   # SmolLM2-135M-Instruct + a draft
    alphas, agree = reply_alphas(pair, samples, prompt_lens, T)  # per reply, per reply position

alpha at a position = sum_x min(p_target, q_draft) at temperature T (Leviathan et al. 2023,
Def. 3.1), the draft teacher-forced on the target's sampled reply.
"""
from __future__ import annotations

import torch

from app.speculative import logits_to_probs
from research.evaluate import _logits, bootstrap_ci


def load(device: str = "cpu", draft=None):
    """The flagship target with `draft` (a directory; default demo_models/smollm2_draft)."""
    from app.gguf import load_gguf_pair
    from app.assets import SMOLLM2_DRAFT_DIR
    return load_gguf_pair(device, "float32", progress=print, draft=draft or SMOLLM2_DRAFT_DIR)


@torch.inference_mode()
def draft_logits(pair, x: torch.Tensor, int8: bool = False) -> torch.Tensor:
    """The draft's logits [n, vocab] at every position of x [1, n], each given the true prefix.
    A feature draft (app.feature_draft) also gets the target's true features one position back:
    its first drafted token, as in a speculative step (later ones see its own predictions)."""
    from app.feature_draft import head_forward, is_feature_draft, one_back
    from app.models import forward, new_cache
    if not is_feature_draft(pair.draft):
        return _logits(pair.draft, x, int8)
    x = x.to(pair.device)
    f = forward(pair.target, x, new_cache(), hidden=True)[1]                  # [1, n, hidden]
    cache = new_cache(pair.draft, x.shape[1], int8=True) if int8 else new_cache()
    return head_forward(pair.draft, x, one_back(f), cache)[0][0]


def reply_alphas(pair, samples: list[torch.Tensor], prompt_lens: list[int], temperature: float,
                 int8: bool = False) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per reply, over its reply positions only (the draft never learned to predict the
    prompt): sum_x min(p_target, q_draft) and whether both argmaxes agree, from the logits at
    positions P - 1 .. L - 2 of each [1, L] sample -> ([L - P] floats, [L - P] bools) per reply.
    int8: the draft as it runs with int8 weights."""
    alphas, agree = [], []
    for x, n in zip(samples, prompt_lens):
        lt, ld = _logits(pair.target, x)[n - 1:-1], draft_logits(pair, x, int8)[n - 1:-1]  # [L - n, vocab]
        p, q = logits_to_probs(lt, temperature), logits_to_probs(ld, temperature)
        alphas.append(torch.minimum(p, q).sum(-1))
        agree.append(lt.argmax(-1) == ld.argmax(-1))
    return alphas, agree


def reply_alpha(pair, samples: list[torch.Tensor], prompt_lens: list[int], temperature: float,
                int8: bool = False) -> dict:
    """alpha and greedy agreement over the reply positions (reply_alphas), with alpha's 95%
    interval by a bootstrap over the replies (research.evaluate.bootstrap_ci)."""
    alphas, agree = reply_alphas(pair, samples, prompt_lens, temperature, int8)
    return {"alpha": round(torch.cat(alphas).mean().item(), 4), "alpha_ci95": list(bootstrap_ci(alphas)),
            "replies": len(alphas), "greedy_agreement": round(torch.cat(agree).float().mean().item(), 4),
            "positions": int(sum(len(a) for a in alphas))}
