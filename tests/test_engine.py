"""The engine on real (tiny, random) models: greedy exactness against target-only decoding and
transformers' generate, the KV-cache invariant, stopping rules, timings and the trace."""
import json

import pytest
import torch

from app.engine import DecodeSettings, autoregressive_generate, run, speculative_generate
from app.models import cache_len, new_cache, forward

PROMPTS = ["It is a truth", "ROMEO: But soft", "a single man in possession of"]


def ids_of(pair, text):
    return pair.tokenizer(text, add_special_tokens=False)["input_ids"]


def emitted(events):
    return [t for e in events for t in e.emitted_ids]


def hf_greedy(pair, ids, n):
    with torch.inference_mode():
        out = pair.target.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                   pad_token_id=pair.tokenizer.eos_token_id)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("gamma", [1, 3, 8])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_speculative_equals_target_only_and_transformers(tiny_pair, prompt, gamma):
    ids = ids_of(tiny_pair, prompt)
    s = DecodeSettings(gamma=gamma, max_new_tokens=24)
    spec = emitted(speculative_generate(tiny_pair, ids, s))
    plain = emitted(autoregressive_generate(tiny_pair, ids, s))
    assert spec == plain
    assert spec == hf_greedy(tiny_pair, ids, len(spec))


def test_random_pair_exercises_every_fate(tiny_pair, self_pair):
    s = DecodeSettings(gamma=4, max_new_tokens=40, temperature=1.0, seed=3)
    fates = {p.fate for e in speculative_generate(tiny_pair, ids_of(tiny_pair, PROMPTS[0]), s) for p in e.pieces}
    fates |= {p.fate for e in speculative_generate(self_pair, ids_of(self_pair, PROMPTS[0]), s) for p in e.pieces}
    assert {"accepted", "rejected", "correction", "bonus"} <= fates


def reference_keys(model, ids):
    cache = new_cache()
    forward(model, torch.tensor([ids]), cache)
    return cache.layers[0].keys


@pytest.mark.parametrize("pair_name,temperature", [("tiny_pair", 0.0), ("tiny_pair", 1.0), ("self_pair", 0.0)])
def test_kv_cache_holds_exactly_the_accepted_prefix(request, pair_name, temperature):
    pair = request.getfixturevalue(pair_name)
    seen = []

    def check(ids, cache, drafter):
        assert cache_len(cache) == len(ids) - 1
        assert torch.allclose(cache.layers[0].keys, reference_keys(pair.target, ids[:-1]), atol=1e-5)
        d = drafter.cache
        assert cache_len(d) in (len(ids) - 1, len(ids) - 2)  # -2 only after all drafts accepted
        assert torch.allclose(d.layers[0].keys, reference_keys(pair.draft, ids[:cache_len(d)]), atol=1e-5)
        seen.append(cache_len(d))

    s = DecodeSettings(gamma=3, max_new_tokens=30, temperature=temperature, seed=1)
    events = list(speculative_generate(pair, ids_of(pair, PROMPTS[1]), s, after_step=check))
    assert len(seen) == len(events) > 1


def test_self_draft_accepts_everything_and_draft_catches_up(self_pair):
    """draft == target: every step accepts gamma tokens plus a bonus; the draft's next pass feeds
    two tokens (its unseen last draft and the bonus)."""
    s = DecodeSettings(gamma=3, max_new_tokens=17)
    events = list(speculative_generate(self_pair, ids_of(self_pair, PROMPTS[0]), s))
    assert all(e.n_accepted == e.gamma for e in events)
    later_first_draft = [e.forwards[0] for e in events[1:] if e.gamma > 0]
    assert later_first_draft and all(f.phase == "draft" and f.tokens == 2 for f in later_first_draft)


@pytest.mark.parametrize("n", [1, 2, 5, 13])
def test_stops_at_max_new_tokens_without_overshoot(tiny_pair, self_pair, n):
    for pair in (tiny_pair, self_pair):
        out = emitted(speculative_generate(pair, ids_of(pair, PROMPTS[0]), DecodeSettings(gamma=8, max_new_tokens=n)))
        assert len(out) == n


def test_stops_at_eos(self_pair):
    """Make the EOS id the greedy continuation: decoding must stop right after emitting it."""
    ids = ids_of(self_pair, PROMPTS[2])
    free = emitted(autoregressive_generate(self_pair, ids, DecodeSettings(max_new_tokens=12)))
    eos = free[5]
    first = free.index(eos)
    old = self_pair.tokenizer.eos_token_id
    try:
        self_pair.tokenizer.eos_token_id = eos
        events = list(speculative_generate(self_pair, ids, DecodeSettings(gamma=4, max_new_tokens=12)))
        plain = list(autoregressive_generate(self_pair, ids, DecodeSettings(max_new_tokens=12)))
    finally:
        self_pair.tokenizer.eos_token_id = old
    assert emitted(events) == free[:first + 1]
    # the EOS is a special id: its piece says so (the stream shows it as words), no other does
    for run in (events, plain):
        pieces = [p for e in run for p in e.pieces if p.fate != "rejected"]
        assert [p.special for p in pieces] == [False] * first + [True]


def test_every_forward_is_timed(tiny_pair):
    s = DecodeSettings(gamma=3, max_new_tokens=20)
    ids = ids_of(tiny_pair, PROMPTS[0])
    events = list(speculative_generate(tiny_pair, ids, s))
    forwards = [f for e in events for f in e.forwards]
    assert [f.phase for f in forwards[:2]] == ["prefill", "prefill"]
    assert forwards[0].tokens == forwards[1].tokens == len(ids) - 1
    for e in events:
        verify = [f for f in e.forwards if f.model == "target" and f.phase != "prefill"]
        drafts = [f for f in e.forwards if f.phase == "draft"]
        assert len(verify) == 1 and verify[0].tokens == e.gamma + 1 and len(drafts) == e.gamma
    assert all(f.seconds > 0 and f.batch == 1 for f in forwards)
    kv = [f.kv_len for f in forwards if f.model == "target" and f.phase == "verify"]
    assert kv == sorted(kv) and kv[0] == len(ids) - 1


def test_ngram_drafter_is_exact_and_proposes_from_context(tiny_pair):
    text = "the cat sat on the mat. the cat sat on the mat. the cat sat on"
    ids = ids_of(tiny_pair, text)
    s = DecodeSettings(gamma=4, max_new_tokens=20, drafter="ngram")
    events = list(speculative_generate(tiny_pair, ids, s))
    assert emitted(events) == emitted(autoregressive_generate(tiny_pair, ids, s))
    assert events[0].gamma > 0 and not any(f.model == "draft" for e in events for f in e.forwards)


def test_seeded_sampling_is_reproducible(tiny_pair):
    s = DecodeSettings(gamma=3, max_new_tokens=25, temperature=0.9, top_p=0.95, seed=42)
    ids = ids_of(tiny_pair, PROMPTS[0])
    a, b = emitted(speculative_generate(tiny_pair, ids, s)), emitted(speculative_generate(tiny_pair, ids, s))
    assert a == b
    s.seed = 43
    assert emitted(speculative_generate(tiny_pair, ids, s)) != a


def test_trace_json_has_the_documented_fields_and_round_trips(tiny_pair):
    from app.trace import Trace
    ids = ids_of(tiny_pair, PROMPTS[0])
    *_, trace = run(tiny_pair, ids, PROMPTS[0], DecodeSettings(gamma=3, max_new_tokens=16), baseline=True)
    d = json.loads(trace.to_json())
    assert {"prompt", "settings", "output_ids", "output_text", "steps", "summary", "baseline"} <= d.keys()
    assert {"draft_ids", "n_accepted", "emitted_ids", "forwards"} <= d["steps"][0].keys()
    assert {"model", "batch", "tokens", "kv_len", "seconds"} <= d["steps"][0]["forwards"][0].keys()
    assert {"acceptance_rate", "tokens_per_pass", "tokens_per_s"} <= d["summary"].keys()
    assert {"output_ids", "tokens_per_s"} <= d["baseline"].keys()
    assert d["baseline"]["identical"] is True and d["baseline"]["output_ids"] == d["output_ids"]
    assert Trace.from_json(trace.to_json()) == trace
    s = trace.summary
    assert s.new_tokens == 16 == len(trace.output_ids)
    assert s.tokens_per_pass == pytest.approx(16 / s.target_passes)
