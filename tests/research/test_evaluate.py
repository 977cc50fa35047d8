"""research.evaluate: a reduced run reproduces the embedded pair's model-card alpha, the
commit it records, and the bootstrap interval the flagship card quotes."""
import json

import pytest

from app.assets import TINY_DIR

CORPUS = TINY_DIR.parents[2] / "shared" / "corpus"

ALPHA_TOLERANCE = 0.03  # the quick run uses 6 held-out windows instead of 24


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared/corpus is not beside the checkout")
def test_reduced_evaluation_reproduces_the_model_card_alpha(tmp_path):
    from research import evaluate
    card = json.loads((TINY_DIR / "eval.json").read_text())
    quick = evaluate.main(["--corpus", str(CORPUS / "austen.txt"), str(CORPUS / "tinyshakespeare.txt"),
                           "--quick", "--out", str(tmp_path / "eval.json")])
    for t in ("T=1.0", "T=0.7"):
        assert abs(quick["heldout"]["alpha"][t] - card["heldout"]["alpha"][t]) < ALPHA_TOLERANCE
    assert quick["heldout"]["perplexity"]["target"] < 0.85 * quick["heldout"]["perplexity"]["draft"]
    assert quick["commit"] == evaluate.code_version()  # which code measured it


def test_code_version_names_the_commit_and_python_changes_only(tmp_path):
    import subprocess

    from research.evaluate import code_version
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True, text=True)  # noqa: E731
    assert code_version(tmp_path) is None  # not a checkout
    git("init", "-q")
    (tmp_path / "m.py").write_text("x = 1\n")
    (tmp_path / "eval.json").write_text("{}\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = git("rev-parse", "--short", "HEAD").stdout.strip()
    assert code_version(tmp_path) == head
    (tmp_path / "eval.json").write_text('{"new": 1}\n')  # an evaluation's own output: not a change
    assert code_version(tmp_path) == head
    (tmp_path / "m.py").write_text("x = 2\n")
    assert code_version(tmp_path) == head + "+changes"


def test_bootstrap_interval_resamples_replies_and_covers_the_true_alpha():
    """bootstrap_ci (the flagship card's interval for alpha): zero width when every reply has the
    same mean, position-weighted, and a 95% interval that covers the true acceptance rate in
    about 95% of simulated evaluations whose positions are correlated within a reply (each
    reply's rate drawn around 0.55, as a draft that loses the thread does) -- an interval over
    positions as if independent would cover far less often."""
    import torch
    from research.evaluate import bootstrap_ci
    assert bootstrap_ci([torch.full((n,), 0.5) for n in (3, 10, 40)]) == (0.5, 0.5)
    low, high = bootstrap_ci([torch.ones(90), torch.zeros(10)])  # resampled means: 0, 0.9 or 1
    assert (low, high) == (0.0, 1.0)
    gen, covered, naive = torch.Generator().manual_seed(1), 0, 0
    trials = 300
    for trial in range(trials):
        rates = (0.55 + 0.2 * torch.randn(8, generator=gen)).clamp(0.02, 0.98)       # [8] per reply
        replies = [torch.bernoulli(torch.full((96,), float(r)), generator=gen) for r in rates]
        low, high = bootstrap_ci(replies, draws=400, seed=trial)
        covered += low <= 0.55 <= high
        flat = torch.cat(replies)
        half = 1.96 * flat.std().item() / len(flat) ** 0.5
        naive += flat.mean().item() - half <= 0.55 <= flat.mean().item() + half
    assert 0.86 <= covered / trials <= 0.99, covered   # percentile bootstrap with 8 clusters runs a little narrow
    assert naive / trials < covered / trials - 0.2, (naive, covered)
