"""research.compare_drafts: two drafts scored on the same target replies, and the paired
bootstrap interval of their alpha difference (research.evaluate.paired_bootstrap_diff)."""
import dataclasses

import pytest
import torch

from research.evaluate import bootstrap_ci, paired_bootstrap_diff


def test_paired_difference_is_exact_for_identical_and_shifted_drafts():
    a = [torch.full((n,), 0.4) + 0.01 * torch.arange(n) / n for n in (5, 12, 30)]
    assert paired_bootstrap_diff(a, a) == {"diff": 0.0, "ci": (0.0, 0.0), "share_b_le_a": 1.0}
    shifted = paired_bootstrap_diff(a, [v + 0.05 for v in a])
    assert shifted["diff"] == pytest.approx(0.05, abs=1e-4) and shifted["share_b_le_a"] == 0.0
    assert shifted["ci"] == pytest.approx((0.05, 0.05), abs=1e-4)
    with pytest.raises(ValueError):
        paired_bootstrap_diff(a, a[:2])
    with pytest.raises(ValueError):
        paired_bootstrap_diff(a, [v[1:] for v in a])


def test_pairing_separates_a_small_gain_that_separate_intervals_cannot_and_covers_the_truth():
    """Replies differ in difficulty (each reply's rate drawn around 0.55) far more than draft b
    beats draft a (+0.02 on every reply, plus position noise). The two alphas' own intervals
    overlap; the paired interval of b - a excludes 0 and covers the true 0.02 in about 95% of
    simulated comparisons."""
    gen, covered, separated, overlapping = torch.Generator().manual_seed(3), 0, 0, 0
    trials = 200
    for trial in range(trials):
        rates = (0.55 + 0.15 * torch.randn(8, generator=gen)).clamp(0.1, 0.9)           # [8] per reply
        a = [r + 0.05 * torch.randn(96, generator=gen) for r in rates]                   # [96] per reply
        b = [v + 0.02 + 0.02 * torch.randn(96, generator=gen) for v in a]
        paired = paired_bootstrap_diff(a, b, draws=400, seed=trial)
        covered += paired["ci"][0] <= 0.02 <= paired["ci"][1]
        separated += paired["ci"][0] > 0
        overlapping += bootstrap_ci(b, draws=400, seed=trial)[0] <= bootstrap_ci(a, draws=400, seed=trial)[1]
    assert 0.86 <= covered / trials <= 0.99, covered
    assert separated / trials > 0.95 and overlapping / trials > 0.95, (separated, overlapping)


def test_compare_scores_both_drafts_on_the_same_replies(embedded_pair):
    """On the tiny pair: a draft against itself differs by exactly 0; the target used as its
    own draft has alpha 1 (p = q) and beats the trained draft by 1 - alpha."""
    from research.compare_drafts import compare
    prompts = [embedded_pair.tokenizer(t)["input_ids"] for t in ("It is a truth", "ROMEO:\n", "Emma")]
    same = compare(embedded_pair, embedded_pair, prompts, 0.7, 12)
    assert same["replies"] == 3 and same["positions"] == 36
    assert same["a"] == same["b"] and same["b_minus_a"]["diff"] == 0.0
    perfect = dataclasses.replace(embedded_pair, draft=embedded_pair.target)
    vs = compare(embedded_pair, perfect, prompts, 0.7, 12)
    assert vs["b"]["alpha"] == pytest.approx(1.0, abs=1e-4) and 0 < vs["a"]["alpha"] < 0.99
    assert vs["a"]["alpha"] == same["a"]["alpha"]               # the same replies (seeded) both times
    assert vs["b_minus_a"]["diff"] == pytest.approx(1 - vs["a"]["alpha"], abs=2e-4)
    assert vs["b_minus_a"]["ci"][0] > 0 and vs["b_minus_a"]["share_b_le_a"] == 0.0
    rows = vs["per_reply"]                                      # each reply's own alpha, both sides
    assert len(rows) == 3 and sum(r["positions"] for r in rows) == 36 and all(r["b"] == 1.0 for r in rows)
    assert sum(r["a"] * r["positions"] for r in rows) / 36 == pytest.approx(vs["a"]["alpha"], abs=1e-3)
    assert len({r["a"] for r in rows}) == 3                     # three different replies
    other = dataclasses.replace(embedded_pair, target=embedded_pair.draft)
    with pytest.raises(ValueError, match="same target"):
        compare(embedded_pair, other, prompts, 0.7, 4)


@pytest.mark.parametrize("argv, message", [
    ([], "same draft"), (["--b-int8", "--replies", "0"], "--replies"),
    (["--b-int8", "--replies", "93"], "--replies must be 1..92"),
    (["--b-int8", "--temperature", "0"], "--temperature"), (["--b", "/nonexistent"], "no model directory")])
def test_command_refuses_bad_arguments_before_loading_anything(argv, message, capsys, monkeypatch):
    from research import compare_drafts
    monkeypatch.setattr(compare_drafts, "load_sides", lambda *a: pytest.fail("loaded models"))
    with pytest.raises(SystemExit):
        compare_drafts.main(argv)
    assert message in capsys.readouterr().err


def test_model_card_paragraph_quotes_the_comparison_it_is_given():
    from research import card_smollm2
    run = {"replies": 92, "positions": 7702, "a": {"alpha": 0.5226, "alpha_ci95": [0.5079, 0.5364]},
           "b": {"alpha": 0.5224, "alpha_ci95": [0.508, 0.5362]},
           "b_minus_a": {"diff": -0.0002, "ci": [-0.0006, 0.0001], "share_b_le_a": 0.9}}
    text = card_smollm2._all_prompts({"commit": "abc1234", "T=0.7": run})
    assert "0.523 (0.508–0.536) at T = 0.7 (92 replies, 7,702 positions)" in text
    assert "-0.0002 (-0.0006 to +0.0001)" in text and "--replies 92 --temperature 0.7`, commit abc1234" in text
    assert card_smollm2._all_prompts(None) == ""


def test_by_task_weights_each_reply_by_its_positions_and_sorts_lowest_first():
    from research.compare_drafts import by_task
    rows = [{"task": "poem", "positions": 10, "a": 0.6, "b": 0.7}, {"task": "poem", "positions": 30, "a": 0.4, "b": 0.5},
            {"task": "email", "positions": 5, "a": 0.9, "b": 0.8}]
    assert by_task(rows) == {"poem": {"replies": 2, "positions": 40, "a": 0.45, "b": 0.55},
                             "email": {"replies": 1, "positions": 5, "a": 0.9, "b": 0.8}}
    assert list(by_task(rows[1:][::-1])) == ["poem", "email"]


def test_held_out_task_templates_line_up_with_the_prompts():
    from research.evaluate_smollm2 import chat_prompt_texts
    for n in (2, 24, 92):
        for text, task in zip(chat_prompt_texts(n), chat_prompt_texts(n, tasks=True)):
            head, _, tail = task.partition("{t}")
            assert text.startswith(head) and text.endswith(tail) and len(text) > len(task) - 3


def test_by_category_pairs_within_each_category():
    """Category x: b is a + 0.1 on every position; category y: b equals a. Each category's paired
    difference is exact, and each side's alpha matches research.eval_set.alpha_by_category."""
    from research.compare_drafts import by_category
    from research.eval_set import alpha_by_category
    a = [torch.tensor([0.2, 0.4, 0.6]), torch.tensor([0.5, 0.3]), torch.tensor([0.7]), torch.tensor([0.1, 0.9])]
    b = [a[0] + 0.1, a[1] + 0.1, a[2].clone(), a[3].clone()]
    cats = ["x", "x", "y", "y"]
    table = by_category(a, b, cats)
    assert list(table) == ["x", "y", "overall"]
    assert table["x"]["b_minus_a"]["diff"] == pytest.approx(0.1, abs=1e-4)
    assert table["x"]["b_minus_a"]["ci"] == pytest.approx((0.1, 0.1), abs=1e-4)
    assert table["y"]["b_minus_a"] == {"diff": 0.0, "ci": (0.0, 0.0), "share_b_le_a": 1.0}
    assert table["overall"]["b_minus_a"]["diff"] == pytest.approx(0.1 * 5 / 8, abs=1e-4)
    expected = alpha_by_category([{"category": c, "alphas": v.tolist()} for c, v in zip(cats, a)])
    assert {k: v["a"] for k, v in table.items()} == expected
    assert table["x"]["b"]["alpha"] == pytest.approx(table["x"]["a"]["alpha"] + 0.1, abs=1e-5)


def _set_comparison(a, b, cats, name_b):
    """What compare() and _main_set write for per-position values a, b (no models needed)."""
    from research.compare_drafts import by_category
    mean = lambda v: round(torch.cat(v).mean().item(), 4)  # noqa: E731
    return {"a": {"draft": "A"}, "b": {"draft": name_b}, "tokens_per_reply": 8, "commit": "x", "seconds": 1.0,
            "T=0.7": {"by_category": by_category(a, b, cats), "replies": len(a), "positions": sum(map(len, a)),
                      "a": {"alpha": mean(a), "alpha_ci95": list(bootstrap_ci(a))},
                      "b": {"alpha": mean(b), "alpha_ci95": list(bootstrap_ci(b))},
                      "b_minus_a": paired_bootstrap_diff(a, b),
                      "per_reply": [{"positions": len(x), "a": round(x.mean().item(), 4),
                                     "b": round(y.mean().item(), 4), "id": f"p{i}", "category": c}
                                    for i, (x, y, c) in enumerate(zip(a, b, cats))]}}


def test_chain_gives_the_direct_comparison_and_refuses_other_replies():
    """a vs b and b vs c on the same replies chain to what comparing a with c directly gives
    (means, every interval, per category), up to the per-reply 4-decimal rounding; files of
    other replies, or with another middle draft, are refused."""
    from research.compare_drafts import chain
    gen = torch.Generator().manual_seed(0)
    lens = [int(n) for n in torch.randint(3, 12, (40,), generator=gen)]
    cats = [("x", "y", "z")[i % 3] for i in range(40)]
    a, b, c = ([torch.rand(n, generator=gen, dtype=torch.float64) * s for n in lens] for s in (0.6, 0.8, 1.0))
    first, second = _set_comparison(a, b, cats, "B"), _set_comparison(b, c, cats, "C")
    got, want = chain(first, second)["T=0.7"], _set_comparison(a, c, cats, "C")["T=0.7"]
    assert got["a"]["alpha"] == pytest.approx(want["a"]["alpha"], abs=1e-4)
    assert got["b"]["alpha"] == pytest.approx(want["b"]["alpha"], abs=1e-4)
    assert got["b_minus_a"]["diff"] == pytest.approx(want["b_minus_a"]["diff"], abs=2e-4)
    assert got["b_minus_a"]["ci"] == pytest.approx(want["b_minus_a"]["ci"], abs=2e-4)
    for k in ("x", "y", "z", "overall"):
        g, w = got["by_category"][k], want["by_category"][k]
        assert g["b"]["ci95"] == pytest.approx(w["b"]["ci95"], abs=2e-4), k
        assert g["b_minus_a"]["ci"] == pytest.approx(w["b_minus_a"]["ci"], abs=2e-4), k
    other = _set_comparison(a, c, cats, "C")                              # its middle draft is a, not b
    with pytest.raises(ValueError, match="same middle draft"):
        chain(first, other)
    shorter = _set_comparison(b[:-1], c[:-1], cats[:-1], "C")
    with pytest.raises(ValueError, match="same replies"):
        chain(first, shorter)
    # held-out template comparisons: rows named by their prompt, no categories
    for doc in (first, second):
        doc["T=0.7"].pop("by_category")
        for r in doc["T=0.7"]["per_reply"]:
            r["prompt"] = r.pop("id") + " text"
            r.pop("category")
    plain = chain(first, second)["T=0.7"]
    assert "by_category" not in plain and plain["b_minus_a"] == got["b_minus_a"]


def test_seed_samples_other_replies_and_the_command_passes_it_on(embedded_pair, monkeypatch, tmp_path):
    """--seed S: the replies of seeds S, S + 1, ... (a replication on new replies to the same
    prompts), recorded in the JSON."""
    import research.compare_drafts as cd
    import research.evaluate_smollm2 as ev
    prompts = [embedded_pair.tokenizer(t)["input_ids"] for t in ("It is a truth", "Emma")]
    first, again = cd.compare(embedded_pair, embedded_pair, prompts, 0.7, 12), cd.compare(embedded_pair, embedded_pair, prompts, 0.7, 12, seed=1000)
    assert [r["a"] for r in first["per_reply"]] != [r["a"] for r in again["per_reply"]]
    seen = []
    monkeypatch.setattr(cd, "load_sides", lambda a, b, device: (embedded_pair, embedded_pair))
    monkeypatch.setattr(ev, "chat_prompts", lambda pair, n: prompts)
    monkeypatch.setattr(cd, "compare", lambda *a, **k: seen.append(a[6] if len(a) > 6 else k.get("seed")) or {"per_reply": []})
    out = cd.main(["--b-int8", "--replies", "2", "--seed", "1000", "--out", str(tmp_path / "c.json")])
    assert seen == [1000] and out["seed"] == 1000


def test_pool_resamples_prompts_with_all_their_replies_and_refuses_mixed_runs(tmp_path):
    """Two --set runs of new replies to the same prompts pool into one comparison: the means
    weigh every position of both runs, and the bootstrap resamples prompts with both their
    replies, so a second run that repeats the first's values adds no false precision (the
    interval stays the one run's). A repeated seed, other prompts or other drafts are refused."""
    from research.compare_drafts import main, pool
    gen = torch.Generator().manual_seed(1)
    lens = [int(n) for n in torch.randint(3, 12, (30,), generator=gen)]
    cats = [("x", "y")[i % 2] for i in range(30)]
    a1, b1, a2, b2 = ([torch.rand(n, generator=gen, dtype=torch.float64) * s for n in lens] for s in (0.6, 0.7, 0.6, 0.7))
    run1, run2 = _set_comparison(a1, b1, cats, "B"), _set_comparison(a2, b2, cats, "B")
    run1["seed"], run2["seed"] = 0, 1000
    got = pool([run1, run2])["T=0.7"]
    w = torch.tensor(lens, dtype=torch.float64)
    means = [((torch.stack([x.mean() for x in v]) * w).sum() + (torch.stack([x.mean() for x in u]) * w).sum())
             / (2 * w.sum()) for v, u in ((a1, a2), (b1, b2))]
    assert got["b_minus_a"]["diff"] == pytest.approx((means[1] - means[0]).item(), abs=1e-4)
    assert got["replies"] == 60 and set(got["by_category"]) == {"x", "y", "overall"}
    twice = _set_comparison(a1, b1, cats, "B")
    twice["seed"] = 1000
    same = pool([run1, twice])["T=0.7"]["b_minus_a"]
    one = pool([run1])["T=0.7"]["b_minus_a"]
    assert same["ci"] == pytest.approx(one["ci"], abs=2e-4)
    assert one["ci"] == pytest.approx(run1["T=0.7"]["b_minus_a"]["ci"], abs=2e-4)
    with pytest.raises(ValueError, match="seed"):
        pool([run1, run1])
    other = _set_comparison(a2[:-1], b2[:-1], cats[:-1], "B")
    other["seed"] = 5
    with pytest.raises(ValueError, match="same prompts"):
        pool([run1, other])
    with pytest.raises(ValueError, match="other drafts"):
        pool([run1, {**run2, "b": {"draft": "C"}}])
    import json
    for name, doc in (("r1.json", run1), ("r2.json", run2)):
        (tmp_path / name).write_text(json.dumps(doc))
    out = main(["--pool", str(tmp_path / "r1.json"), str(tmp_path / "r2.json"), "--out", str(tmp_path / "p.json")])
    assert out["pooled_seeds"] == [0, 1000] and json.loads((tmp_path / "p.json").read_text())["T=0.7"]["replies"] == 60
