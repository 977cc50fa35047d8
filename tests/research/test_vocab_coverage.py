"""research.vocab_coverage: the share of the target's probability inside the draft's kept
vocabulary, on hand-made logits and on the embedded pair's own replies."""
import pytest
import torch

from research.vocab_coverage import coverage, summarise


def test_coverage_on_hand_made_logits():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2, 0.0 + 1e-12], [0.1, 0.1, 0.1, 0.7]]))   # [2, 4]
    mass, argmax = coverage(logits, torch.tensor([0, 1]), 1.0)
    assert mass.tolist() == pytest.approx([0.8, 0.2], abs=1e-6)   # float32 logits
    assert argmax.tolist() == [True, False]
    everything, _ = coverage(logits, torch.arange(4), 0.7)
    assert everything.tolist() == pytest.approx([1.0, 1.0], abs=1e-12)
    sharper, _ = coverage(logits, torch.tensor([0, 1]), 0.5)            # T < 1 moves mass to the argmax
    assert sharper[0] > mass[0] and sharper[1] < mass[1]


def test_summarise_weights_by_positions():
    rows = [{"category": "a", "positions": 10, "mass_T=0.7": 0.9, "mass_T=1.0": 0.8, "argmax_kept": 1.0},
            {"category": "a", "positions": 30, "mass_T=0.7": 0.5, "mass_T=1.0": 0.4, "argmax_kept": 0.5},
            {"category": "b", "positions": 20, "mass_T=0.7": 1.0, "mass_T=1.0": 1.0, "argmax_kept": 1.0}]
    s = summarise(rows)
    assert list(s) == ["a", "b", "overall"]
    assert s["a"] == {"positions": 40, "mass_T=0.7": 0.6, "mass_T=1.0": 0.5, "argmax_kept": 0.625}
    assert s["overall"]["mass_T=0.7"] == pytest.approx((9 + 15 + 20) / 60, abs=1e-4)


TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"


def test_measure_row_resamples_the_runs_reply(embedded_pair, monkeypatch):
    """On the embedded pair: the reply eval_set.measure sampled is sampled again and checked; with
    every token kept the mass is 1; a reply that differs is refused."""
    from research.eval_set import load, measure
    from research.vocab_coverage import measure_row
    monkeypatch.setattr(embedded_pair.tokenizer, "chat_template", TEMPLATE, raising=False)
    prompt = load()[3]
    row = {**measure(embedded_pair, [prompt], 0.7, 6, seed=3)[0], "temperature": 0.7, "tokens": 6}
    vocab = embedded_pair.target.config.vocab_size
    full = measure_row(embedded_pair, prompt, row, 3, torch.arange(vocab))
    assert full["positions"] == row["positions"] and full["mass_T=0.7"] == pytest.approx(1.0, abs=1e-6)
    half = measure_row(embedded_pair, prompt, row, 3, torch.arange(vocab // 2))
    assert 0 < half["mass_T=1.0"] < 1 and 0 <= half["argmax_kept"] <= 1
    with pytest.raises(ValueError, match="differs"):
        measure_row(embedded_pair, prompt, {**row, "reply": row["reply"] + "x"}, 3, torch.arange(vocab))
