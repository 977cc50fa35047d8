"""A feature-level draft (EAGLE: Li et al. 2024, arXiv 2401.15077): a one-layer head that
drafts from the target's own hidden states instead of from the tokens alone.

An independent draft has to re-derive from the tokens what the target has already computed.
This head reads it: at position j its input is the embedding of token x_j plus a projection of
F_{j-1}, the target's final-normed hidden state at position j - 1 (the vector the target's
output layer turned into p_target( . | x_<j)). One decoder layer predicts F_j, and the target's
output rows of the kept tokens (app/draft_vocab.py) turn the prediction into q_draft( . | x_<=j).
The first drafted token sees true features; later ones (the target has not run on them yet)
see the head's own predictions, so acceptance falls with depth faster than for a token draft.

On disk: a LlamaForCausalLM directory that `from_pretrained` loads (one decoder layer, tied
embeddings, a partial vocabulary, `"feature_draft": true` in config.json) plus FEATURE_FILE, the
projection of F ([hidden, hidden] "weight"). The head's hidden size is the target's.

Exactness is untouched: speculative sampling accepts any q_draft (Leviathan et al. 2023,
Theorem 1); the head only changes how often a draft is accepted.
"""
from __future__ import annotations

from pathlib import Path

import torch

from app import fastpath
from app.draft_vocab import DraftVocab
from app.drafters import NoDrafter, Proposal
from app.kvcache import cache_len, crop_cache, new_cache
from app.timing import timed_call
from app.trace import ForwardTiming

FEATURE_FILE = "feature_proj.safetensors"


def is_feature_draft(model: torch.nn.Module | None) -> bool:
    return model is not None and bool(getattr(model.config, "feature_draft", False))


def attach_projection(model: torch.nn.Module, directory: str | Path) -> torch.nn.Module:
    """Load FEATURE_FILE from the model's directory as model.feature_proj (its device, dtype)."""
    from safetensors.torch import load_file
    path = Path(directory) / FEATURE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{directory} declares a feature draft but has no {FEATURE_FILE}")
    weight = load_file(str(path))["weight"]                                # [hidden, hidden]
    proj = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        proj.weight.copy_(weight)
    param = next(model.parameters())
    model.feature_proj = proj.to(param.device, param.dtype)
    return model


def save_head(model: torch.nn.Module, tokenizer, directory: str | Path) -> None:
    """Write a feature draft as load_model reads it: the Llama part by save_pretrained (fp16),
    model.feature_proj beside it in FEATURE_FILE, and the tokenizer."""
    from safetensors.torch import save_file
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    proj = model.feature_proj
    del model.feature_proj  # from_pretrained would not load it from model.safetensors
    try:
        model.half().save_pretrained(out)
    finally:
        model.feature_proj = proj.half()
    save_file({"weight": proj.weight.detach().half().contiguous()}, str(out / FEATURE_FILE))
    tokenizer.save_pretrained(out)


def one_back(f: torch.Tensor) -> torch.Tensor:
    """Features [batch, L, hidden] -> the feature one position earlier at each position, zeros
    at position 0 (what the head reads there): [batch, L, hidden]."""
    return torch.cat([torch.zeros_like(f[:, :1]), f[:, :-1]], 1)


def _projected(model, f_prev: torch.Tensor) -> torch.Tensor:
    """[batch, q, hidden] target features -> [batch, q, head hidden], the head's feature input."""
    return model.feature_proj(f_prev.to(model.feature_proj.weight.dtype))


def head_inputs(model, rows: torch.Tensor, f_prev: torch.Tensor) -> torch.Tensor:
    """Draft rows [batch, q] and the target's features one position earlier [batch, q, hidden]
    -> the decoder layer's input [batch, q, hidden]: embedding + projected feature."""
    return model.get_input_embeddings()(rows) + _projected(model, f_prev)


@torch.inference_mode()
def head_forward(model, input_ids: torch.Tensor, f_prev: torch.Tensor, cache):
    """input_ids [batch, q] (target ids) after the cached positions, f_prev [batch, q, hidden]
    -> (target-vocabulary logits [batch, q, V], predicted features [batch, q, hidden]), run as the
    cache's path runs (app.fastpath.runner: app.lean for a LeanCache, transformers otherwise)."""
    vocab = DraftVocab.of(model)
    rows = vocab.draft_input(input_ids)
    logits, h = fastpath.runner(cache).hidden(model, rows, cache, extra=_projected(model, f_prev))
    return vocab.target_logits(logits), h


class FeatureDrafter:
    """Drafts with a feature head. The engine hands it the target's features after every target
    pass (observe); it keeps one row per position the target's cache holds. Its own cache holds
    only positions it fed with true features: after a propose() it is cut back to those."""
    name = "model"

    def __init__(self, model, device: str, path: fastpath.Path = fastpath.EAGER):
        """path: app.fastpath.Path, as for app.drafters.ModelDrafter."""
        self.model, self.device, self.path = model, device, path
        hidden = model.config.hidden_size
        self.features = torch.zeros(0, hidden, device=device)   # [positions the target saw, hidden]
        self.cache, self.true_len = new_cache(), 0

    def start(self, ids: list[int]) -> list[ForwardTiming]:
        """Nothing to run yet: the head needs the target's prefill features (observe)."""
        self.cache = self.path.new_cache(self.model)
        self.features, self.true_len = self.features[:0], 0
        return []

    def observe(self, hidden: torch.Tensor) -> None:
        """hidden [q, hidden]: the target's features at the q positions its last pass fed."""
        self.features = torch.cat([self.features, hidden.to(self.features.dtype)])

    def _timed(self, ids: list[int], f_prev: torch.Tensor, phase: str):
        x = torch.tensor([ids], device=self.device)                        # [1, q]
        (logits, h), timing = timed_call(lambda: head_forward(self.model, x, f_prev[None], self.cache),
                                         self.device, model_name="draft", phase=phase, batch=1,
                                         tokens=len(ids), kv_len=cache_len(self.cache))
        timing.weights = "int8" if self.path.int8 else ""
        return logits[0, -1:], h[:, -1:], timing                            # [1, V], [1, 1, hidden]

    def _f_prev(self, start: int, end: int) -> torch.Tensor:
        """The true features one position before each of positions start .. end - 1: [q, hidden]
        (zeros before position 0)."""
        rows = self.features[max(start - 1, 0):end - 1]
        return torch.cat([self.features.new_zeros(1, rows.shape[-1]), rows]) if start == 0 else rows

    def propose(self, ids, gamma, transform, display, sampler, keep_drafting=None):
        tokens, q_rows, shown, forwards = [], [], [], []
        n, done = len(ids), cache_len(self.cache)
        if gamma > 0 and done == 0 and n > 1:  # the prompt, once (like ModelDrafter.start)
            forwards.append(self._timed(ids[:n - 1], self._f_prev(0, n - 1), "prefill")[2])
            done = n - 1
        pending, f_prev = ids[done:], self._f_prev(done, n)
        for _ in range(gamma):
            last, f_hat, timing = self._timed(pending, f_prev, "draft")
            q_rows.append(transform(last)[0]), shown.append(display(last)[0])
            tokens.append(sampler(q_rows[-1]))
            forwards.append(timing)
            pending, f_prev = tokens[-1:], f_hat[0]
            if keep_drafting is not None and not keep_drafting(shown[-1]):
                break
        self.true_len = n if tokens else done
        if not tokens:
            return NoDrafter().propose(ids, 0, transform, display, sampler)
        return Proposal(torch.tensor(tokens), torch.stack(q_rows).cpu(), torch.stack(shown).cpu(), forwards)

    def rollback(self, n_valid: int) -> None:
        """Keep the target's features of the first n_valid positions, and in the head's cache
        only positions fed with true features."""
        self.features = self.features[:n_valid]
        crop_cache(self.cache, min(n_valid, self.true_len, cache_len(self.cache)))
