"""The pure algorithm: hand-built distributions where the outcome is certain, and exactness
checked statistically (the emitted token follows p_target), with a negative control."""
import math

import pytest
import torch

from app.speculative import logits_to_probs, residual, verify

V = 6


def onehot(i, v=V):
    row = torch.zeros(v)
    row[i] = 1.0
    return row


def test_all_accepted_gives_bonus():
    # q(x) = p(x) at every drafted position -> ratio 1 -> accepted whatever r is
    p = torch.stack([onehot(2), onehot(4), onehot(1), onehot(5)])  # [gamma + 1, V]
    q = p[:3].clone()
    v = verify(torch.tensor([2, 4, 1]), q, p, torch.Generator().manual_seed(0))
    assert v.n_accepted == 3 and v.is_bonus and v.next_token == 5
    assert v.accepted == [True, True, True] and v.ratio == [1.0, 1.0, 1.0]


def test_first_position_rejected_resamples_from_residual():
    # p(x=0) = 0 at position 0 -> ratio 0 -> certain rejection; residual = norm(max(0, p - q))
    p = torch.tensor([[0.0, 0.5, 0.5, 0, 0, 0], [1.0, 0, 0, 0, 0, 0]])
    q = torch.tensor([[0.6, 0.4, 0.0, 0, 0, 0]])
    v = verify(torch.tensor([0]), q, p, torch.Generator().manual_seed(0))
    assert v.n_accepted == 0 and not v.is_bonus and v.accepted == [False]
    assert v.ratio == [0.0]
    # residual: max(0, [0, .1, .5, 0...]) / .6 -> token 1 w.p. 1/6, token 2 w.p. 5/6
    assert torch.allclose(v.residual, torch.tensor([0, 1 / 6, 5 / 6, 0, 0, 0]))
    assert v.next_token in (1, 2)


def test_middle_position_rejected_stops_there():
    p = torch.stack([onehot(3), onehot(1), onehot(0), onehot(5)])
    q = torch.stack([onehot(3), onehot(2), onehot(0)])  # position 1 drafts 2, p(2) = 0
    v = verify(torch.tensor([3, 2, 0]), q, p, torch.Generator().manual_seed(0))
    assert v.n_accepted == 1 and v.accepted == [True, False] and len(v.r) == 2
    assert v.next_token == 1  # the residual is p itself here: one-hot at 1


def test_greedy_accepts_iff_argmax_and_draws_nothing():
    p = torch.tensor([[0.1, 0.6, 0.3, 0, 0, 0], [0.2, 0.2, 0.6, 0, 0, 0], [0, 0, 0, 0, 1.0, 0]])
    q = torch.tensor([[0.0, 0.9, 0.1, 0, 0, 0], [0.9, 0.0, 0.1, 0, 0, 0]])
    v = verify(torch.tensor([1, 0]), q, p, None, greedy=True)
    assert v.accepted == [True, False] and v.r == [None, None]
    assert v.n_accepted == 1 and v.next_token == 2  # correction = argmax p at position 1
    v = verify(torch.tensor([1, 2]), q, p, None, greedy=True)
    assert v.n_accepted == 2 and v.next_token == 4  # bonus = argmax p at position 2


def test_logits_to_probs_filters():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0])
    assert torch.equal(logits_to_probs(logits, 0.0), onehot(0, 5))
    k2 = logits_to_probs(logits, 1.0, top_k=2)
    assert (k2[2:] == 0).all() and math.isclose(float(k2.sum()), 1.0, rel_tol=1e-6)
    full = torch.softmax(logits, -1)  # [.636, .234, .086, .032, .012]
    p80 = logits_to_probs(logits, 1.0, top_p=0.8)
    assert (p80[:2] > 0).all() and (p80[2:] == 0).all()  # .636 < .8 <= .636 + .234
    assert torch.allclose(logits_to_probs(logits, 1.0, top_p=1.0), full)
    assert (logits_to_probs(logits, 1.0, top_p=1e-6)[1:] == 0).all()  # keeps the top token
    hot = logits_to_probs(logits, 0.5)
    assert hot[0] > full[0]  # lower temperature sharpens


def test_same_seed_same_draws():
    p = torch.softmax(torch.randn(4, V, generator=torch.Generator().manual_seed(1)), -1)
    q = torch.softmax(torch.randn(3, V, generator=torch.Generator().manual_seed(2)), -1)
    d = torch.tensor([0, 1, 2])
    a = [verify(d, q, p, g) for g in [torch.Generator().manual_seed(7)] for _ in range(20)]
    b = [verify(d, q, p, g) for g in [torch.Generator().manual_seed(7)] for _ in range(20)]
    assert [(x.n_accepted, x.next_token, x.r) for x in a] == [(x.n_accepted, x.next_token, x.r) for x in b]


def first_token_distribution(p_row, q_row, n, seed, broken=None):
    """Empirical distribution of the first emitted token over n speculative steps, gamma = 1."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(V)
    p = torch.stack([p_row, p_row])  # [2, V]; the bonus row is irrelevant to the first token
    for _ in range(n):
        x = torch.multinomial(q_row, 1, generator=gen)
        if broken == "greedy-draft":  # transformers #32867: draft greedy, target sampling
            x = q_row.argmax().view(1)
        v = verify(x, q_row[None], p, gen)
        if broken == "no-residual" and v.n_accepted == 0:  # resample from p, not the residual
            v.next_token = int(torch.multinomial(p_row, 1, generator=gen))
        counts[int(x) if v.n_accepted else v.next_token] += 1
    return counts / n


LOGITS_P = torch.tensor([2.0, 1.5, 0.2, -0.5, 0.8, -1.0])
LOGITS_Q = torch.tensor([0.5, 2.2, 1.0, 0.3, -1.0, 0.0])
N = 20_000
TV_BOUND = 0.02  # expected TV of 20,000 exact draws over 6 tokens is ~0.006


def tv(a, b):
    return 0.5 * float((a - b).abs().sum())


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_emitted_token_follows_target_distribution(temperature):
    p_row = logits_to_probs(LOGITS_P, temperature)
    q_row = logits_to_probs(LOGITS_Q, temperature)
    assert tv(p_row, q_row) > 0.2  # the draft really is different
    empirical = first_token_distribution(p_row, q_row, N, seed=int(temperature * 10))
    assert tv(empirical, p_row) < TV_BOUND


@pytest.mark.parametrize("broken", ["greedy-draft", "no-residual"])
def test_negative_control_broken_variants_are_caught(broken):
    p_row, q_row = logits_to_probs(LOGITS_P, 1.0), logits_to_probs(LOGITS_Q, 1.0)
    empirical = first_token_distribution(p_row, q_row, N, seed=3, broken=broken)
    assert tv(empirical, p_row) > 5 * TV_BOUND


def test_top_p_exact_when_both_models_use_the_same_transform():
    p_row = logits_to_probs(LOGITS_P, 0.8, top_p=0.9, top_k=4)
    q_row = logits_to_probs(LOGITS_Q, 0.8, top_p=0.9, top_k=4)
    empirical = first_token_distribution(p_row, q_row, N, seed=11)
    assert tv(empirical, p_row) < TV_BOUND


def test_residual_falls_back_to_p_when_p_equals_q():
    p = torch.tensor([0.2, 0.8, 0, 0, 0, 0])
    assert torch.equal(residual(p, p.clone()), p)
