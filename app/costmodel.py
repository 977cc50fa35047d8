"""What one forward pass must compute and move, from a Hugging Face config alone.

`forward_cost(config, batch, q, kv_len, dtype_bytes)` prices a forward of `batch` sequences of
`q` new tokens each over a KV cache already holding `kv_len` tokens per sequence:

    flops = linear FLOPs + attention FLOPs
      linear:    2 * m * n * k for every weight matrix (Kaplan et al. 2020, "2N FLOPs per token";
                 nanoGPT `estimate_mfu`), lm_head included, over all batch*q positions
      attention: 2 * 2 * batch * heads * q * (kv_len + q) * head_dim  (scores Q K^T, then P V;
                 the full (q, kv_len + q) block, as SDPA computes it without causal skipping)
    bytes = weights + KV read + KV write + activations  (LLM-Viewer's split, Yuan et al. 2024)
      weights:   every parameter read once; of the embedding table only the looked-up rows,
                 but the lm_head matrix in full (tied or not: two kernels read it)
      kv read:   batch * kv_len * layers * 2 (K and V) * kv_heads * head_dim
      kv write:  batch * q      * layers * 2 (K and V) * kv_heads * head_dim
      activations: see `_activation_elems`

Norm, activation-function, softmax and rotary FLOPs are left out: they are O(hidden) per
token against O(hidden^2) for the matmuls. Families: Llama, Qwen2, Mistral, Gemma 1/2/3 (gated
MLP, 3 matrices) and GPT-2, GPT-NeoX (2 matrices); other configs with the standard field names
are priced as Llama-like.
"""
from __future__ import annotations

from dataclasses import dataclass

# Families whose MLP is up -> act -> down (2 matrices) rather than gated (gate, up, down).
UNGATED = ("gpt2", "gpt_neox", "gptj", "opt", "gpt_bigcode", "phi")
# Families with LayerNorm (weight + bias) rather than RMSNorm (weight only), and linear biases.
LAYERNORM = ("gpt2", "gpt_neox", "gptj", "opt", "gpt_bigcode", "phi")
TIED_DEFAULT = {"llama": False, "qwen2": False, "mistral": False, "gpt_neox": False}


@dataclass(frozen=True)
class Dims:
    """The shape of a decoder-only transformer, read from its config."""
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    gated: bool
    positions: int  # learned position-embedding rows (GPT-2), 0 for rotary models
    qkv_bias: bool  # Qwen2: biases on q, k, v only
    linear_bias: bool  # GPT-2 / NeoX: biases on every linear layer
    feature: bool = False  # a feature draft (app/feature_draft.py): + a [hidden, hidden] projection


def dims(config) -> Dims:
    """Read a Dims from a transformers config object or a plain dict (config.json)."""
    cfg = config if isinstance(config, dict) else config.to_dict()
    cfg = {**cfg.get("text_config", {}), **{k: v for k, v in cfg.items() if k != "text_config"}}
    get = lambda *keys, default=None: next((cfg[k] for k in keys if cfg.get(k) is not None), default)
    kind = str(get("model_type", default="llama"))
    hidden, heads = int(get("hidden_size", "n_embd", "d_model")), int(get("num_attention_heads", "n_head"))
    return Dims(
        model_type=kind, hidden=hidden, layers=int(get("num_hidden_layers", "n_layer")),
        heads=heads, kv_heads=int(get("num_key_value_heads", default=heads)),
        head_dim=int(get("head_dim", default=hidden // heads)),
        intermediate=int(get("intermediate_size", "n_inner", default=4 * hidden)),
        vocab=int(get("vocab_size")),
        tied=bool(get("tie_word_embeddings", default=TIED_DEFAULT.get(kind, True))),
        gated=kind not in UNGATED,
        positions=int(get("n_positions", default=0)) if kind == "gpt2" else 0,
        qkv_bias=kind == "qwen2" or bool(get("attention_bias", default=False)),
        linear_bias=kind in LAYERNORM, feature=bool(get("feature_draft", default=False)))


def _layer_matrices(d: Dims) -> list[tuple[int, int]]:
    """(in, out) of every weight matrix in one decoder layer."""
    q_out, kv_out = d.heads * d.head_dim, d.kv_heads * d.head_dim
    attn = [(d.hidden, q_out), (d.hidden, kv_out), (d.hidden, kv_out), (q_out, d.hidden)]
    mlp = [(d.hidden, d.intermediate)] * (2 if d.gated else 1) + [(d.intermediate, d.hidden)]
    return attn + mlp


def _layer_small_params(d: Dims) -> int:
    """Biases and norm weights of one layer (a fraction of a percent, but counted)."""
    mats = _layer_matrices(d)
    if d.linear_bias:
        return sum(out for _, out in mats) + 2 * 2 * d.hidden  # biases + 2 LayerNorms (w, b)
    bias = (d.heads + 2 * d.kv_heads) * d.head_dim if d.qkv_bias else 0
    norms = 4 if d.model_type.startswith(("gemma2", "gemma3")) else 2  # Gemma 2/3: 4 norms
    qk_norm = 2 * d.head_dim if d.model_type.startswith(("gemma3", "qwen3")) else 0
    return bias + norms * d.hidden + qk_norm


def param_count(config) -> int:
    """Parameters of the model, from the config alone: embeddings (+ lm_head unless tied)
    + layers * (weight matrices + biases + norms) + final norm (+ GPT-2 position table)."""
    return param_count_dims(dims(config))


def param_count_dims(d: Dims) -> int:
    per_layer = sum(i * o for i, o in _layer_matrices(d)) + _layer_small_params(d)
    embed = d.vocab * d.hidden * (1 if d.tied else 2) + d.positions * d.hidden
    final_norm = d.hidden * (2 if d.linear_bias else 1)
    return embed + d.layers * per_layer + final_norm + _feature_matrix(d)


def _feature_matrix(d: Dims) -> int:
    """A feature draft's projection of the target's hidden state: hidden x hidden, else 0."""
    return d.hidden * d.hidden if d.feature else 0


@dataclass(frozen=True)
class Cost:
    """FLOPs and bytes of one forward pass (see the module docstring for every formula)."""
    linear_flops: float
    attention_flops: float
    weights_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    activation_bytes: float

    @property
    def flops(self) -> float:
        return self.linear_flops + self.attention_flops

    @property
    def bytes(self) -> float:
        return self.weights_bytes + self.kv_read_bytes + self.kv_write_bytes + self.activation_bytes

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes

    def to_dict(self) -> dict:
        return {"flops": self.flops, "bytes": self.bytes, "intensity": self.intensity,
                "linear_flops": self.linear_flops, "attention_flops": self.attention_flops,
                "weights_bytes": self.weights_bytes, "kv_read_bytes": self.kv_read_bytes,
                "kv_write_bytes": self.kv_write_bytes, "activation_bytes": self.activation_bytes}


def forward_cost(config, batch: int, q: int, kv_len: int, dtype_bytes: int,
                 weight_bytes: float | None = None, logits: bool = True) -> Cost:
    """Cost of a forward of `batch` x `q` new tokens over `kv_len` cached tokens per sequence.

    dtype_bytes: bytes per weight / KV / activation element (2 for bf16/fp16, 4 for fp32).
    weight_bytes: bytes per weight element when the weights differ (1 for int8 weights; their
    per-row scales, one per `hidden` or more elements, are left out); default dtype_bytes.
    logits=False: a pass that only fills the KV cache (app.kvcache.fill_cache): no lm_head
    product, matrix read or logits written.
    """
    weight_bytes = dtype_bytes if weight_bytes is None else weight_bytes
    d = dims(config)
    tokens = batch * q  # positions every linear layer processes
    per_layer_mm = sum(i * o for i, o in _layer_matrices(d))  # (tokens, in) @ (in, out)
    head = d.hidden * d.vocab  # lm_head: (hidden, vocab)
    linear = 2 * tokens * (d.layers * per_layer_mm + (head if logits else 0) + _feature_matrix(d))
    attention = 2 * 2 * batch * d.heads * q * (kv_len + q) * d.head_dim * d.layers
    kv_row = d.layers * 2 * d.kv_heads * d.head_dim  # K and V elements per cached position
    return Cost(
        linear_flops=float(linear), attention_flops=float(attention),
        weights_bytes=float((_weights_read(d, batch, q) - (0 if logits else head)) * weight_bytes),
        kv_read_bytes=float(batch * kv_len * kv_row * dtype_bytes),
        kv_write_bytes=float(tokens * kv_row * dtype_bytes),
        activation_bytes=float(tokens * (_activation_elems(d) - (0 if logits else d.vocab)) * dtype_bytes))


def _weights_read(d: Dims, batch: int, q: int) -> int:
    """Parameter elements read by one pass: all layer + norm weights, the full lm_head, the
    looked-up embedding rows (at most the whole table) and, for GPT-2, q position rows."""
    non_embedding = param_count_dims(d) - d.vocab * d.hidden * (1 if d.tied else 2) - d.positions * d.hidden
    lookups = min(batch * q, d.vocab) * d.hidden + min(q, d.positions) * d.hidden
    return non_embedding + d.vocab * d.hidden + lookups


def _activation_elems(d: Dims) -> int:
    """Activation elements read + written per token, unfused eager ops (an estimate: fused
    kernels move less). Per layer, counting each op's input reads and output writes:
      hidden:   norm (r+w) x2, q/k/v input, o_proj output, mlp input, down output,
                residual add (2r+1w) x2                                      -> 14 * hidden
      q heads:  q written, read by attention; attention output written, read by o_proj -> 4
      kv heads: k and v written by their projections                          -> 2
      mlp:      gated: gate, up written, read by act*mul, product written, read by down -> 6
                ungated: up written, read by act, act written, read by down           -> 4
    plus, once: embedding output, final norm (r+w), lm_head input (4 * hidden) and the logits
    written (vocab)."""
    per_layer = (14 * d.hidden + 4 * d.heads * d.head_dim + 2 * d.kv_heads * d.head_dim
                 + (6 if d.gated else 4) * d.intermediate)
    return d.layers * per_layer + 4 * d.hidden + d.vocab
