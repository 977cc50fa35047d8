"""The fast path (app.fastpath): fixed-address KV caches (app.lean's LeanCache on a CPU, else a
transformers StaticCache), rolled back by their position counter, give the same tokens as the
dynamic caches; on a machine without CUDA nothing is compiled and the app says so. (CUDA-graph
replay itself needs a GPU: benchmarks/gpu_knee.py measures it there.)"""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import StaticCache

from app import fastpath, lean
from app.engine import DecodeSettings, autoregressive_generate, speculative_generate
from app.knee import time_passes
from app.models import cache_len, fill_cache, forward, new_cache

PROMPT = "It is a truth universally acknowledged, that"


def tokens(pair, settings, plain=False):
    ids = pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    gen = autoregressive_generate if plain else speculative_generate
    return [t for e in gen(pair, ids, settings) for t in e.emitted_ids]


@pytest.fixture(params=["lean", "static"])
def fast_kind(request, monkeypatch):
    """Run a test on both fast-path caches: app.lean's (the CPU default for Llama models) and
    transformers' StaticCache (what CUDA and unsupported architectures get)."""
    if request.param == "static":
        monkeypatch.setattr(lean, "supports", lambda config: False)
    return request.param


@pytest.mark.parametrize("temperature,drafter", [(0.0, "model"), (1.0, "model"), (0.7, "ngram")])
def test_fast_path_emits_the_same_tokens_as_the_eager_path(tiny_pair, fast_kind, temperature, drafter):
    eager = DecodeSettings(gamma=4, temperature=temperature, seed=5, max_new_tokens=40, drafter=drafter)
    fast = DecodeSettings(**{**eager.__dict__, "fast": True})
    assert tokens(tiny_pair, fast) == tokens(tiny_pair, eager)
    if temperature == 0:
        assert tokens(tiny_pair, fast) == tokens(tiny_pair, eager, plain=True)


def test_fast_caches_hold_exactly_the_accepted_prefix(tiny_pair, fast_kind):
    seen = []
    kind = lean.LeanCache if fast_kind == "lean" else StaticCache

    def check(ids, cache, drafter):
        assert isinstance(cache, kind) and isinstance(drafter.cache, kind)
        assert cache_len(cache) == len(ids) - 1
        reference = new_cache()
        forward(tiny_pair.target, torch.tensor([ids[:-1]]), reference)
        n = len(ids) - 1  # the fixed tensors are max_len long; only the first n positions count
        keys = cache.keys[0] if fast_kind == "lean" else cache.layers[0].keys  # [batch, kv_heads, max_len, hd]
        assert torch.allclose(keys[:, :, :n], reference.layers[0].keys, atol=1e-5)
        assert cache_len(drafter.cache) in (len(ids) - 1, len(ids) - 2)
        seen.append(n)

    ids = tiny_pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    settings = DecodeSettings(gamma=3, temperature=1.0, seed=2, max_new_tokens=30, fast=True)
    events = list(speculative_generate(tiny_pair, ids, settings, after_step=check))
    assert len(seen) == len(events) > 3
    assert any(e.n_accepted < e.gamma for e in events)  # rollbacks happened


@pytest.mark.parametrize("kind", ["eager", "lean", "lean int8", "static"])
def test_fill_cache_leaves_the_cache_as_a_forward_does(tiny_pair, kind, monkeypatch):
    """A prefill without logits (app.models.fill_cache) writes the same keys and values as a
    forward, so the next pass's logits are the same; on every kind of cache, and through a
    partial-vocabulary draft's input mapping (tests/test_draft_vocab.py runs the engine on one)."""
    if kind == "static":
        monkeypatch.setattr(lean, "supports", lambda config: False)
    model, int8 = (tiny_pair.draft, True) if kind == "lean int8" else (tiny_pair.target, False)
    ids = torch.tensor([tiny_pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])  # [1, n]
    make = (lambda: new_cache()) if kind == "eager" else (lambda: new_cache(model, 64, int8=int8))
    filled, forwarded = make(), make()
    with FlopCounterMode(display=False) as without:
        assert fill_cache(model, ids[:, :-1], filled) is None
    with FlopCounterMode(display=False) as with_logits:
        forward(model, ids[:, :-1], forwarded)
    assert cache_len(filled) == cache_len(forwarded) == ids.shape[1] - 1
    if not int8:  # torch counts fp32 products (not the int8 kernel): the difference is the head's
        head = 2 * (ids.shape[1] - 1) * model.config.hidden_size * model.config.vocab_size
        assert with_logits.get_total_flops() - without.get_total_flops() == head
    torch.testing.assert_close(forward(model, ids[:, -1:], filled), forward(model, ids[:, -1:], forwarded),
                               atol=0, rtol=0)


def test_prefills_compute_no_logits(tiny_pair, fast_kind):
    """The engine's prefills (target and draft) run without the output layer, and say so in
    their timings; every later pass computes logits."""
    calls = []
    hooks = [m.get_output_embeddings().register_forward_hook(lambda *a, name=name: calls.append(name))
             for name, m in (("target", tiny_pair.target), ("draft", tiny_pair.draft))]
    try:
        events = list(speculative_generate(tiny_pair, tiny_pair.tokenizer(PROMPT)["input_ids"],
                                           DecodeSettings(gamma=3, max_new_tokens=12, fast=fast_kind == "static")))
    finally:
        for hook in hooks:
            hook.remove()
    forwards = [f for e in events for f in e.forwards]
    assert [f.logits for f in forwards if f.phase == "prefill"] == [False, False]
    assert all(f.logits for f in forwards if f.phase != "prefill")
    if fast_kind == "static":  # eager modules run (the lean decoder does not call them)
        assert len(calls) == len(forwards) - 2


def test_a_run_builds_its_fast_path_runners_before_its_clock_starts(tiny_pair, monkeypatch):
    """engine.run builds the lean runners (the draft's int8 weights quantised) before it reads
    the clock, so a first run is not charged for them while the baseline after it is not."""
    import time

    import app.engine as engine
    for runners in fastpath._lean.values():  # as if this process had never run these models
        for model in (tiny_pair.target, tiny_pair.draft):
            runners.pop(model, None)
    built = []

    class Clock:
        def perf_counter(self):
            built.append((tiny_pair.target in fastpath._lean[False], tiny_pair.draft in fastpath._lean[True]))
            return time.perf_counter()
    monkeypatch.setattr(engine, "time", Clock())
    ids = tiny_pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    settings = DecodeSettings(gamma=2, max_new_tokens=6, fast=True, draft_int8=True)
    list(engine.run(tiny_pair, ids, PROMPT, settings, baseline=True))
    assert built and all(b == (True, True) for b in built)


def test_without_cuda_nothing_is_compiled_and_the_note_says_so(tiny_pair):
    fastpath.enable(tiny_pair.target, "cpu")
    assert tiny_pair.target not in fastpath._compiled
    assert "lean decoder" in fastpath.describe("cpu") and "no CUDA graphs" in fastpath.describe("cpu")
    assert "static KV cache only" in fastpath.describe("mps")
    if not torch.cuda.is_available():
        assert not fastpath.graphs_available("cuda")


def test_knee_times_the_fast_path(tiny_pair, fast_kind):
    eager = time_passes(tiny_pair.target, device="cpu", batch=1, qs=[1, 4], kv_len=16, repeats=2)
    fast = time_passes(tiny_pair.target, device="cpu", batch=1, qs=[1, 4], kv_len=16, repeats=2, fast=True)
    assert len(fast) == len(eager) == 2 and all(t > 0 for t in fast + eager)


def test_cli_knee_prints_eager_and_fast_side_by_side(tiny_dirs, capsys):
    from app.cli import main
    assert main(["knee", "--model", str(tiny_dirs[0]), "--qs", "1,2", "--repeats", "1", "--fast",
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "fast path   lean decoder" in out and "eager/fast" in out


def test_lessons_take_the_path_the_live_tab_would(tiny_pair, monkeypatch):
    """The lessons decode and time on the fast path where it replays CUDA graphs (simulated:
    use_by_default -> True) or where the target's one-token pass measures faster on it
    (app.runner.pass_times, simulated both ways, as the Live tab's "auto" decides); else eagerly."""
    from app import engine, knee, runner
    from app.lessons import common, policies
    seen, timed = [], []
    real = engine.speculative_generate
    monkeypatch.setattr(engine, "speculative_generate",
                        lambda pair, ids, s, **kw: seen.append(s.fast) or real(pair, ids, s, **kw))
    real_time = knee.time_passes  # measure_costs times every pass through it
    monkeypatch.setattr(knee, "time_passes", lambda *a, **kw: timed.append(kw["fast"]) or real_time(*a, **kw))
    ids = tiny_pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]

    def run_with(fast_seconds: float) -> None:
        monkeypatch.setattr(runner, "pass_times",
                            lambda model, device, paths: [fast_seconds if fast else 1.0 for fast, _ in paths])
        common.decode(tiny_pair, ids, DecodeSettings(max_new_tokens=4))
        policies.measure_costs(tiny_pair, 1, 8, repeats=1, fast=runner.fast_by_default(tiny_pair))
    run_with(2.0)  # the fast path measured slower: eager
    assert seen == [False] and set(timed) == {False}
    run_with(0.5)  # measured faster: the lessons take it
    assert seen == [False, True] and timed[-1] is True
    monkeypatch.setattr(fastpath, "use_by_default", lambda device: True)
    run_with(2.0)  # CUDA graphs: always
    assert seen == [False, True, True] and timed[-1] is True


def test_a_compiler_failure_falls_back_to_the_eager_pass(tiny_pair, monkeypatch):
    """Where torch.compile breaks (a CUDA-only path, simulated here), the pass runs eagerly on
    the same static cache, the decode continues with the same tokens, and stderr says why."""
    monkeypatch.setattr(lean, "supports", lambda config: False)  # a StaticCache, as on CUDA

    def broken(**kw):
        raise RuntimeError("inductor exploded\nlong trace")
    monkeypatch.setitem(fastpath._compiled, tiny_pair.target, broken)
    eager = DecodeSettings(gamma=3, max_new_tokens=12)
    fast = DecodeSettings(gamma=3, max_new_tokens=12, fast=True)
    assert tokens(tiny_pair, fast) == tokens(tiny_pair, eager)
    assert fastpath.failed[-1] == "RuntimeError: inductor exploded"
    assert tiny_pair.target not in fastpath._compiled
