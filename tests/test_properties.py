"""Property tests on verify(): for random p, q, drafts and seeds the verdict is well formed."""
import torch
from hypothesis import given, settings, strategies as st

from app.speculative import logits_to_probs, verify


@st.composite
def cases(draw):
    vocab = draw(st.integers(2, 12))
    gamma = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    temperature = draw(st.sampled_from([0.0, 0.3, 1.0, 2.0]))
    top_p = draw(st.sampled_from([1.0, 0.9, 0.5]))
    gen = torch.Generator().manual_seed(seed)
    p_target = logits_to_probs(torch.randn(gamma + 1, vocab, generator=gen) * 3, temperature, top_p=top_p)
    q_draft = logits_to_probs(torch.randn(gamma, vocab, generator=gen) * 3, temperature, top_p=top_p)
    # drafts come from q (as the algorithm assumes), or anywhere (n-gram proposals are one-hot)
    if draw(st.booleans()):
        drafts = torch.stack([torch.multinomial(q_draft[i], 1, generator=gen)[0] for i in range(gamma)])
    else:
        drafts = torch.randint(0, vocab, (gamma,), generator=gen)
        q_draft = torch.nn.functional.one_hot(drafts, vocab).float()
    return drafts, q_draft, p_target, seed, temperature == 0


@settings(max_examples=150, deadline=None)
@given(cases())
def test_verdict_is_well_formed(case):
    drafts, q_draft, p_target, seed, greedy = case
    gamma, vocab = q_draft.shape
    v = verify(drafts, q_draft, p_target, torch.Generator().manual_seed(seed), greedy)
    assert 0 <= v.n_accepted <= gamma
    assert 0 <= v.next_token < vocab
    assert v.accepted == [True] * v.n_accepted + ([False] if v.n_accepted < gamma else [])
    assert v.is_bonus == (v.n_accepted == gamma)  # a bonus only when all were accepted
    emitted = drafts[:v.n_accepted].tolist() + [v.next_token]
    if not v.is_bonus:  # the emitted prefix never holds the rejected draft at its position
        # a rejection needs p(x) < q(x), so max(0, p - q) is 0 at x; greedy: x != argmax p
        assert emitted[v.n_accepted] != int(drafts[v.n_accepted])
        assert float(p_target[v.n_accepted, v.next_token]) > 0  # corrections come from p's support
    assert len(v.r) == len(v.ratio) == len(v.accepted)
    if greedy:
        assert all(r is None for r in v.r)


@settings(max_examples=50, deadline=None)
@given(cases())
def test_same_seed_same_verdict(case):
    drafts, q_draft, p_target, seed, greedy = case
    a = verify(drafts, q_draft, p_target, torch.Generator().manual_seed(seed), greedy)
    b = verify(drafts, q_draft, p_target, torch.Generator().manual_seed(seed), greedy)
    assert (a.n_accepted, a.next_token, a.r) == (b.n_accepted, b.next_token, b.r)
