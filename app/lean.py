"""A lean forward pass for Llama-family decoders that reuses a Hugging Face model's weights.

What: `LeanModel(hf_model)` runs the same arithmetic as transformers' `LlamaForCausalLM`
(also Qwen2, and Mistral whose sliding window never binds) with plain tensor calls: no
nn.Module dispatch, no mask factory, no cache objects, no output dataclasses. Its `LeanCache`
is preallocated (fixed addresses) and rolled back by moving one integer.

Why: on CPU a transformers forward of a small model is mostly framework overhead (about 2x on
the tiny draft). For models whose weights stream from memory, fp32 products of up to FEW_ROWS
rows may run as (W @ x.T).T (few_rows_product), which avoids a slow MKL path on some CPUs; which
row counts do is measured on the CPU at hand when the LeanModel is built (choose_form_rows).
Measurements: research/RESULTS.md, "Lean decoder measurements (from app/lean.py's docstring)".

Exactness: every step is the operation transformers runs (RMSNorm in float32 then cast back,
weight multiplied after the cast; RoPE tables from the model's own float32 inv_freq, cast to
the model dtype; the same scaled_dot_product_attention with the module's own scale), so the
logits equal HF's up to floating-point reassociation (different kernels/blocking), verified to
1e-4 against transformers in tests/test_lean.py.

Optionally (`LeanModel(model, int8=True)`, the app's "int8 draft weights", `--draft-int8`) every
weight matrix runs as int8 per output row (Int8Weight): a quarter of fp32's bytes, which is what
a single-token pass on a CPU pays for. That is a different model, not transformers' arithmetic;
it is offered for drafts only, where any q_draft keeps speculative sampling exact.

Not supported (`supports` is False): other model types, RoPE scaling (linear, dynamic, yarn,
llama3, ...) or partial rotary, a sliding window that can bind, activations other than SiLU.
All rows of a batch share one length (no padding masks).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# the products, here under their old names too (tests and the fast path patch and read them here)
from app.products import (FEW_ROWS, PADDED_ROWS, STREAMING_BYTES, Int8Weight, choose_form_rows,  # noqa: F401
                          few_rows_product, linear, plus_bias)

MODEL_TYPES = ("llama", "mistral", "qwen2")
HEAD_T_MIN_VOCAB = 16384  # vocabularies from this size may keep a transposed output matrix (_keep_head_t)


def rope_parameters(config) -> dict:
    """The RoPE settings: transformers 5.x `rope_parameters`, else the legacy `rope_scaling`
    (plus a top-level `rope_theta`)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    params = dict(params or {})
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    return params


def supports(config) -> bool:
    """Whether LeanModel reproduces this config's forward exactly."""
    if getattr(config, "model_type", None) not in MODEL_TYPES:
        return False
    if getattr(config, "hidden_act", "silu") != "silu":
        return False
    rope = rope_parameters(config)
    if any(isinstance(v, dict) for v in rope.values()):  # per-layer-type RoPE
        return False
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return False
    if float(rope.get("partial_rotary_factor", 1.0) or 1.0) != 1.0:
        return False
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return False
    window = getattr(config, "sliding_window", None)  # harmless only when it can never bind
    return window is None or window >= config.max_position_embeddings


class LeanCache:
    """Preallocated keys and values; positions [0, length) are valid, later ones are stale."""

    def __init__(self, layers: int, batch: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        shape = (layers, batch, kv_heads, max_len, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)    # [layers, batch, kv_heads,
        self.values = torch.zeros(shape, dtype=dtype, device=device)  #  max_len, head_dim] each
        self.length = 0
        self.model: LeanModel | None = None  # the LeanModel that fills it (set by new_cache)

    @property
    def max_len(self) -> int:
        return self.keys.shape[3]

    @property
    def batch(self) -> int:
        return self.keys.shape[1]

    def get_seq_length(self) -> int:
        """The valid length (same name as transformers' caches, so app.kvcache.cache_len works)."""
        return self.length

    def crop(self, keep: int) -> None:
        """Keep the first `keep` positions; a negative `keep` drops -keep positions (the
        convention of transformers' DynamicCache.crop). Only `length` moves."""
        keep = self.length + keep if keep < 0 else keep
        if not 0 <= keep <= self.length:
            raise ValueError(f"cannot crop a cache of length {self.length} to {keep}")
        self.length = keep


@dataclass(slots=True)
class _Layer:
    """References to one decoder layer's weights (bias None where the HF Linear has none)."""
    norm1: torch.Tensor   # [hidden]
    q: torch.Tensor       # [heads * head_dim, hidden]
    q_bias: torch.Tensor | None
    k: torch.Tensor       # [kv_heads * head_dim, hidden]
    k_bias: torch.Tensor | None
    v: torch.Tensor       # [kv_heads * head_dim, hidden]
    v_bias: torch.Tensor | None
    o: torch.Tensor       # [hidden, heads * head_dim]
    o_bias: torch.Tensor | None
    norm2: torch.Tensor   # [hidden]
    gate: torch.Tensor    # [intermediate, hidden]
    gate_bias: torch.Tensor | None
    up: torch.Tensor      # [intermediate, hidden]
    up_bias: torch.Tensor | None
    down: torch.Tensor    # [hidden, intermediate]
    down_bias: torch.Tensor | None
    qkv: Int8Weight | None = None      # int8 only: q, k, v as one [(heads + 2 kv_heads) * head_dim, hidden]
    gate_up: Int8Weight | None = None  # int8 only: gate and up as one [2 * intermediate, hidden]

    def to_int8(self) -> None:
        """Every weight matrix as an Int8Weight, q/k/v and gate/up each stacked into one
        (per-row scales: stacking rows quantises them exactly as apart; one product instead of
        three or two, the same numbers)."""
        self.qkv = Int8Weight.of(torch.cat((self.q, self.k, self.v)))
        self.gate_up = Int8Weight.of(torch.cat((self.gate, self.up)))
        self.o, self.down = Int8Weight.of(self.o), Int8Weight.of(self.down)

    @classmethod
    def of(cls, hf_layer) -> _Layer:
        a, m = hf_layer.self_attn, hf_layer.mlp
        return cls(hf_layer.input_layernorm.weight, a.q_proj.weight, a.q_proj.bias, a.k_proj.weight,
                   a.k_proj.bias, a.v_proj.weight, a.v_proj.bias, a.o_proj.weight, a.o_proj.bias,
                   hf_layer.post_attention_layernorm.weight, m.gate_proj.weight, m.gate_proj.bias,
                   m.up_proj.weight, m.up_proj.bias, m.down_proj.weight, m.down_proj.bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., hidden] -> same shape; LlamaRMSNorm: float32 statistics, cast back, then weight."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [batch, heads, q, head_dim], cos/sin [q, head_dim] -> x rotated (HF apply_rotary_pos_emb)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def default_inv_freq(config, head_dim: int, device) -> torch.Tensor:
    """[head_dim/2] float32: 1 / theta^(2i/head_dim), as compute_default_rope_parameters."""
    theta = float(rope_parameters(config)["rope_theta"])
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=device) / head_dim))


def rope_tables(inv_freq: torch.Tensor, positions: int, scaling: float, dtype: torch.dtype):
    """inv_freq [head_dim/2] -> cos, sin [positions, head_dim] in `dtype`, computed as
    LlamaRotaryEmbedding.forward does (float32 products, cos/sin, scaling, then the cast)."""
    inv_freq = inv_freq.to(torch.float32)
    pos = torch.arange(positions, device=inv_freq.device).float()
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


class LeanModel:
    """The forward pass of a HF Llama-family *ForCausalLM, over its own weight tensors."""

    def __init__(self, hf_model, int8: bool = False):
        """int8: run every weight matrix (layers and head, not the embedding lookup) as an
        Int8Weight: a different, cheaper model, no longer transformers' arithmetic (for a draft,
        whose q need not match anything: speculative sampling is exact for any q_draft)."""
        config = hf_model.config
        if not supports(config):
            raise ValueError(f"{getattr(config, 'model_type', '?')}: config not supported by app.lean")
        base, attn = hf_model.model, hf_model.model.layers[0].self_attn
        self.config = config
        self.embed = base.embed_tokens.weight                      # [vocab, hidden]
        self.layers = [_Layer.of(layer) for layer in base.layers[: config.num_hidden_layers]]
        self.norm = base.norm.weight                               # [hidden]
        self.lm_head, self.lm_head_bias = hf_model.lm_head.weight, hf_model.lm_head.bias  # [vocab, hidden]
        self.lm_head_t = None  # a transposed copy for one-row passes, where measured faster (below)
        self.int8 = int8
        streamed = sum(t.numel() * t.element_size() for t in hf_model.parameters())
        if int8:
            self.lm_head = Int8Weight.of(self.lm_head)
            for w in self.layers:
                w.to_int8()
        # row counts whose plain fp32 products run in few_rows_product's form (measured)
        plain = [] if int8 else self._plain_matrices()
        self.form_rows = (choose_form_rows(plain) if plain and streamed > STREAMING_BYTES
                          and self.embed.device.type == "cpu" and self.embed.dtype == torch.float32
                          else frozenset())
        self.eps = base.norm.variance_epsilon
        self.head_dim, self.scaling = attn.head_dim, attn.scaling
        self.kv_heads = config.num_key_value_heads
        self.groups = config.num_attention_heads // config.num_key_value_heads
        self.dtype, self.device = self.embed.dtype, self.embed.device
        rotary = base.rotary_emb  # its inv_freq buffer is what HF multiplies (model.to() rounds it)
        inv_freq = getattr(rotary, "inv_freq", None)
        if inv_freq is None:
            inv_freq = default_inv_freq(config, self.head_dim, self.device)
        with torch.no_grad():  # cos, sin: [max_positions, head_dim]
            self.cos, self.sin = rope_tables(inv_freq, config.max_position_embeddings,
                                             getattr(rotary, "attention_scaling", 1.0), self.dtype)
        if not int8 and self.device.type == "cpu" and self.lm_head.shape[0] >= HEAD_T_MIN_VOCAB:
            self.lm_head_t = self._keep_head_t()

    @torch.inference_mode()
    def _keep_head_t(self, rounds: int = 2, passes: int = 5) -> torch.Tensor | None:
        """The output matrix transposed, [hidden, vocab], if whole one-token passes over a growing
        cache (as in decoding) run faster reading it than reading the shared [vocab, hidden]
        weight; else None. Measured: `rounds` interleaved blocks of `passes` passes each way,
        after one untimed block each, medians. Not a fixed win: which way is faster differs from
        CPU to CPU (research/RESULTS.md). Cost: 2 x (rounds + 1) x (passes + 1) passes."""
        head_t = self.lm_head.detach().T.contiguous()
        gen = torch.Generator().manual_seed(0)
        times: dict[bool, list[float]] = {True: [], False: []}
        for block in range(rounds + 1):
            for use in (True, False):
                self.lm_head_t = head_t if use else None
                cache = self.new_cache(1, passes + 1)
                ids = torch.randint(0, self.lm_head.shape[0], (1, passes + 1), generator=gen).to(self.device)
                self(ids[:, :1], cache)
                for i in range(1, passes + 1):
                    start = time.perf_counter()
                    self(ids[:, i:i + 1], cache)
                    if block:  # the first block of each is a warm-up
                        times[use].append(time.perf_counter() - start)
        self.lm_head_t = None
        return head_t if statistics.median(times[True]) < statistics.median(times[False]) else None

    @property
    def max_positions(self) -> int:
        return self.cos.shape[0]

    def new_cache(self, batch: int = 1, max_len: int | None = None) -> LeanCache:
        """An empty cache for `batch` rows of up to `max_len` positions (default: all)."""
        max_len = self.max_positions if max_len is None else max_len
        if not 0 < max_len <= self.max_positions:
            raise ValueError(f"max_len must be in 1..{self.max_positions}")
        with torch.inference_mode():
            cache = LeanCache(len(self.layers), batch, self.kv_heads, max_len, self.head_dim,
                              self.dtype, self.device)
        cache.model = self
        return cache

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, cache: LeanCache, extra: torch.Tensor | None = None,
                hidden: bool = False, logits: bool = True):
        """input_ids [batch, q] at positions cache.length .. +q-1 -> logits [batch, q, vocab];
        writes their keys/values into `cache` and advances cache.length by q.
        extra [batch, q, hidden] is added to the token embeddings (a feature draft's input,
        app/feature_draft.py); hidden=True returns (logits, final-normed hidden [batch, q, hidden]);
        logits=False fills the cache only and returns None (app.kvcache.fill_cache)."""
        start, q = cache.length, input_ids.shape[1]
        if start + q > cache.max_len or input_ids.shape[0] != cache.batch:
            raise ValueError(f"input {tuple(input_ids.shape)} at position {start} does not fit a cache "
                             f"of batch {cache.batch}, {cache.max_len} positions")
        x = F.embedding(input_ids, self.embed)                      # [batch, q, hidden]
        if extra is not None:
            x = x + extra.to(x.dtype)
        cos, sin = self.cos[start:start + q], self.sin[start:start + q]
        mask = self._mask(start, q)
        for i, w in enumerate(self.layers):
            x = x + self._attention(w, rms_norm(x, w.norm1, self.eps), cache, i, cos, sin, mask)
            x = x + self._mlp(w, rms_norm(x, w.norm2, self.eps))
        cache.length = start + q
        if not logits:
            return None
        h = rms_norm(x, self.norm, self.eps)                        # [batch, q, hidden]
        return (self._logits(h), h) if hidden else self._logits(h)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [batch, q, hidden] -> logits [batch, q, vocab]; one-row passes (decode, drafts) use
        the transposed copy where _keep_head_t kept one, wider ones (verify, prefill) the shared
        weight (through linear: the few-row form for the row counts in form_rows)."""
        if self.lm_head_t is None or h.shape[0] * h.shape[1] > 1:
            return self._linear(h, self.lm_head, self.lm_head_bias)
        logits = h @ self.lm_head_t
        return plus_bias(logits, self.lm_head_bias)

    __call__ = forward

    def _mask(self, start: int, q: int) -> torch.Tensor | None:
        """[q, start+q] bool, True where new token i may see position j (j <= start+i); None
        when no mask is needed (one token sees everything; no past: is_causal does it)."""
        if q == 1 or start == 0:
            return None
        new = torch.arange(start, start + q, device=self.device)
        return torch.arange(start + q, device=self.device) <= new[:, None]

    def _attention(self, w: _Layer, h: torch.Tensor, cache: LeanCache, i: int,
                   cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """h [batch, q, hidden] (normed) -> attention output [batch, q, hidden]."""
        b, q, _ = h.shape
        shape = (b, q, -1, self.head_dim)
        qs, ks, vs = (t.view(shape).transpose(1, 2) for t in self._qkv(w, h))
        # qs [batch, heads, q, head_dim]; ks, vs [batch, kv_heads, q, head_dim]
        qs, ks = rope(qs, cos, sin), rope(ks, cos, sin)
        start, end = cache.length, cache.length + q
        cache.keys[i, :, :, start:end] = ks
        cache.values[i, :, :, start:end] = vs
        out = self._sdpa(qs, cache.keys[i, :, :, :end], cache.values[i, :, :, :end], mask)
        return self._linear(out.transpose(1, 2).reshape(b, q, -1), w.o, w.o_bias)

    def _qkv(self, w: _Layer, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """h [batch, q, hidden] -> q [batch, q, heads * head_dim], k and v [batch, q, kv_heads * head_dim]."""
        if w.qkv is None:
            return self._linear(h, w.q, w.q_bias), self._linear(h, w.k, w.k_bias), self._linear(h, w.v, w.v_bias)
        kv = self.kv_heads * self.head_dim
        parts = self._linear(h, w.qkv).split((kv * self.groups, kv, kv), dim=-1)
        return tuple(plus_bias(t, bias) for t, bias in zip(parts, (w.q_bias, w.k_bias, w.v_bias)))

    def _linear(self, x: torch.Tensor, w, bias: torch.Tensor | None = None) -> torch.Tensor:
        return linear(x, w, bias, form_rows=self.form_rows)

    def _plain_matrices(self) -> list[torch.Tensor]:
        """The fp32 model's weight matrices, layers' and head's (each [out, in])."""
        names = ("q", "k", "v", "o", "gate", "up", "down")
        mats = [getattr(w, n) for w in self.layers for n in names] + [self.lm_head]
        return [m.detach() for m in mats]

    def _mlp(self, w: _Layer, h: torch.Tensor) -> torch.Tensor:
        """h [batch, q, hidden] (normed) -> down(silu(gate(h)) * up(h)) [batch, q, hidden]."""
        if w.gate_up is None:
            gate, up = self._linear(h, w.gate, w.gate_bias), self._linear(h, w.up, w.up_bias)
        else:  # int8: one product, [batch, q, 2 * intermediate] -> two halves
            gate, up = self._linear(h, w.gate_up).chunk(2, dim=-1)
            gate, up = plus_bias(gate, w.gate_bias), plus_bias(up, w.up_bias)
        return self._linear(F.silu(gate) * up, w.down, w.down_bias)

    def _sdpa(self, qs: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
              mask: torch.Tensor | None) -> torch.Tensor:
        """qs [batch, heads, q, head_dim], keys/values [batch, kv_heads, kv, head_dim] ->
        [batch, heads, q, head_dim]. One query: GQA heads packed as rows of their kv head."""
        b, heads, q, d = qs.shape
        if q == 1:
            packed = qs.reshape(b, self.kv_heads, self.groups, d)    # [batch, kv_heads, groups, head_dim]
            out = F.scaled_dot_product_attention(packed, keys, values, scale=self.scaling)
            return out.reshape(b, heads, 1, d)
        gqa = self.groups > 1
        if mask is None:  # no past: plain causal attention over the q new positions
            return F.scaled_dot_product_attention(qs, keys, values, is_causal=True, scale=self.scaling,
                                                  enable_gqa=gqa)
        return F.scaled_dot_product_attention(qs, keys, values, attn_mask=mask, scale=self.scaling,
                                              enable_gqa=gqa)
