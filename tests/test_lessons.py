"""The lessons' experiments on tiny random pairs (conftest) and hand-built distributions:
shapes and axes as requested, the formulas, identical greedy text across depth policies,
losslessness of the exact sampler against two broken ones, the memory-wall anchor, the CLI."""
import json
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import plotly.graph_objects as go
import pytest
import torch

from app.hardware import Ceilings
from app.lessons import LESSONS, LessonError, get
from app.lessons.batch_depth import batch_vs_depth, simulate, thresholds
from app.lessons.common import expected_tokens, leviathan_speedup
from app.lessons.flops import flops_vs_time
from app.lessons.knee import five_for_one
from app.lessons.lossless import lossless, permutation_tvs, tv_distance
from app.lessons.memory_wall import memory_wall
from app.lessons.policies import (ConfidenceStop, HeuristicDepth, RooflineDepth, compare_policies)
from app.lessons.theory import theory_vs_measurement
from app.models import ModelPair
import visualizations.lessons as figures

CEIL = Ceilings("cpu", "test", "float32", measured_flops_per_s=5e10, measured_bytes_per_s=1e10)
PROMPTS = ("It is a truth", "ROMEO: But soft")


pytestmark = pytest.mark.usefixtures("one_thread")


def roundtrip(result) -> dict:
    """to_dict() must be plain JSON."""
    return json.loads(json.dumps(result.to_dict()))


# --------------------------------------------------------------------------- registry

def test_registry_names_functions_and_figures():
    assert list(LESSONS) == ["memory_wall", "knee", "batch_depth", "policies", "theory", "lossless", "flops"]
    for lesson in LESSONS.values():
        assert callable(lesson.function) and lesson.claim and lesson.title
        assert callable(getattr(figures, lesson.figure_name))
        assert isinstance(lesson.quick_kwargs, dict)
    with pytest.raises(LessonError, match="unknown lesson"):
        get("nope")


def test_visualizations_do_not_import_torch():
    code = "import sys, visualizations.lessons; assert 'torch' not in sys.modules; assert 'gradio' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parents[1]))


# --------------------------------------------------------------------------- 1. knee

def test_five_for_one_times_the_requested_passes(tiny_pair):
    seen = []
    r = five_for_one(tiny_pair, qs=(5, 2, 3, 8), kv_len=8, repeats=3, ceilings=CEIL,
                     progress=lambda f, m: seen.append(f))
    assert r.qs == [1, 2, 3, 5, 8] and [row["q"] for row in r.rows] == r.qs  # q = 1 always added
    assert all(s.n == 3 and s.min > 0 for s in r.seconds) and r.ratios[0].samples == (1.0, 1.0, 1.0)
    # round-paired ratios: round i of t(5) over round i of t(1)
    assert r.ratios[3].samples == pytest.approx([a / b for a, b in zip(r.seconds[3].samples, r.seconds[0].samples)])
    assert r.ratio_at(5) == r.ratios[3].median and seen[-1] == 1.0
    flops = [row["flops"] for row in r.rows]
    assert flops == sorted(flops) and flops[-1] > 7 * flops[0]  # pass size grows with q
    d = roundtrip(r)
    assert d["seconds"][0].keys() == {"min", "median", "max", "n"} and d["verdict"]["claim"].startswith("a pass of 5")
    assert r.headline().startswith(r.verdict.text())
    assert r.bend == next((q for q, x in zip(r.qs, r.ratios) if q > 1 and x.median > r.bend_ratio), None)
    assert isinstance(figures.knee_lesson_figure(d), go.Figure)
    # on a CPU: the regime from the medians, and where to see the claim on a GPU
    assert d["regime"]["q"] == 8 and d["regime"]["ratio"] == pytest.approx(r.seconds[4].median / r.seconds[0].median, rel=1e-2)
    assert "GPU" in r.verdict.evidence


def test_five_for_one_rejects_passes_longer_than_the_model(tiny_pair):
    with pytest.raises(LessonError, match="positions"):
        five_for_one(tiny_pair, qs=(1, 300), kv_len=8, ceilings=CEIL)


# --------------------------------------------------------------------------- 2. batch x depth

def test_simulation_matches_closed_forms():
    t_target = [[1.0, 1.2, 1.5], [2.0, 3.0, 4.0]]  # rows b = 1, 4; columns gamma = 0, 1, 2
    t_draft = [0.1, 0.3]
    never = simulate(t_target, t_draft, [1, 4], [0, 1, 2], alpha=0.0, steps=50, seed=0)
    assert never[1] == pytest.approx([4 / 2.0, 4 / (0.3 + 3.0), 4 / (0.6 + 4.0)])
    always = simulate(t_target, t_draft, [1, 4], [0, 1, 2], alpha=1.0, steps=50, seed=0)
    assert always[0] == pytest.approx([1 / 1.0, 2 / 1.3, 3 / 1.7])
    mc = simulate([[1.0] * 5], [0.0], [8], [0, 1, 2, 3, 4], alpha=0.6, steps=4000, seed=1)[0]
    for gamma, tps in zip(range(5), mc):  # tokens/s = 8 * E(gamma) when every pass costs 1 s
        assert tps / 8 == pytest.approx(expected_tokens(0.6, gamma), rel=0.02)


def test_thresholds_find_the_losing_line_and_the_switch_off_batch():
    speedup = [[1, 1.5, 1.8], [1, 1.1, 0.9], [1, 0.8, 0.7], [1, 1.01, 0.5], [1, 0.9, 0.6], [1, 0.5, 0.4]]
    lose, disable = thresholds([1, 2, 4, 8, 16, 32], [0, 1, 2], speedup)
    assert lose == [None, 4, 2]
    assert disable == 16  # b = 8 still has a winner (gamma 1), so the switch-off is from 16 on


def test_batch_vs_depth_grid_has_the_requested_axes(tiny_pair):
    r = batch_vs_depth(tiny_pair, batches=(4,), gammas=(2, 1), alpha=0.8, repeats=3, steps=20, kv_len=4)
    assert r.batches == [1, 2, 4] and r.gammas == [0, 1, 2]  # batches 1 and 2 always measured
    for table in (r.t_target, r.tokens_per_s, r.speedup, r.speedup_range, r.impossible):
        assert len(table) == 3 and all(len(row) == 3 for row in table)
    assert [row[0] for row in r.speedup] == [1.0, 1.0, 1.0]
    assert all(t.n == 3 and t.min > 0 for t in r.t_draft)
    for row, ranges in zip(r.speedup, r.speedup_range):
        assert all(x.min <= s * (1 + 1e-9) and s <= x.max * (1 + 1e-9) for s, x in zip(row, ranges))
    assert "simulated acceptance at α = 0.800" in r.source and "measured forward times" in r.source
    assert r.best_gamma[0] in r.gammas
    assert "batch 2" in r.batch2_verdict.claim and r.headline().startswith(r.verdict.text())
    assert r.batch2_seconds["b=1"].n == r.batch2_seconds["b=2"].n == 3
    d = roundtrip(r)
    assert d["t_target"][0][0].keys() == {"min", "median", "max", "n"} and d["verdict"]["held"] in (True, False, None)
    fig = figures.batch_depth_figure(d)
    assert len(fig.data[0].z) == 3 and list(fig.layout.xaxis.ticktext) == ["γ=0", "γ=1", "γ=2"]


def test_batch_vs_depth_measures_alpha_or_demands_one_for_shape_pairs(tiny_pair):
    r = batch_vs_depth(tiny_pair, batches=(1,), gammas=(1,), repeats=1, steps=5, kv_len=4)
    assert r.batches == [1, 2]
    assert 0.0 <= r.alpha <= 1.0 and r.alpha_source.startswith("measured")
    shape_like = replace(tiny_pair, info={**tiny_pair.info, "shape_only": True})
    with pytest.raises(LessonError, match="choose α"):
        batch_vs_depth(shape_like, batches=(1,), gammas=(1,))
    with pytest.raises(LessonError, match="alpha"):
        batch_vs_depth(tiny_pair, batches=(1,), gammas=(1,), alpha=1.5, repeats=1)


# --------------------------------------------------------------------------- 3. policies

def event(gamma, n_accepted, examined=None):
    """What a policy reads of a StepEvent (no timed passes: the roofline policy keeps its probe's)."""
    return SimpleNamespace(gamma=gamma, n_accepted=n_accepted, forwards=[],
                           checks=[0] * (examined if examined is not None else min(gamma, n_accepted + 1)))


def test_heuristic_is_plus_two_minus_one_within_bounds():
    h = HeuristicDepth(gamma=4, gamma_max=8)
    values = []
    for gamma_seen_accepted in (4, 6, 2, 1, 0, 0, 0, 0, 0):  # accepted counts
        g = h.gamma()
        h.update(event(g, min(gamma_seen_accepted, g)))
        values.append(h.gamma())
    assert values == [6, 8, 7, 6, 5, 4, 3, 2, 1]
    h.update(event(1, 0))
    assert h.gamma() == 1


def test_confidence_stop_and_roofline_choice():
    stop = ConfidenceStop(gamma_max=6, threshold=0.5)
    assert stop.gamma() == 6
    assert stop.keep_drafting(torch.tensor([0.6, 0.4])) and not stop.keep_drafting(torch.tensor([0.3, 0.3, 0.4]))
    flat = RooflineDepth(t_draft=0.0, t_target=[1.0] * 9, gamma_max=8, alpha0=0.9)
    assert flat.gamma() == 8  # free drafts, free verification: draft as deep as allowed
    steep = RooflineDepth(t_draft=0.5, t_target=[1.0 + q for q in range(9)], gamma_max=8, alpha0=0.2)
    assert steep.gamma() == 1
    rates = [steep.rate(g) for g in range(1, 9)]
    assert rates[0] == max(rates)
    before = flat.alpha
    for _ in range(5):
        flat.update(event(4, 0, examined=1))
    assert flat.alpha < before / 2


def test_policies_change_speed_never_the_greedy_text(tiny_pair):
    r = compare_policies(tiny_pair, prompts=PROMPTS, gamma=3, gamma_max=5, max_new_tokens=20)
    names = [row.policy for row in r.rows]
    assert names == ["plain", "fixed", "heuristic", "confidence", "roofline"]
    plain = r.rows[0].outputs
    assert all(len(o) == 20 for o in plain)
    for row in r.rows[1:]:
        assert row.outputs == plain, row.policy
        assert row.wasted == row.drafted - row.accepted and row.target_passes > 0
    assert r.identical is True and len(r.t_target) == 6
    # the roofline policy's cost inputs keep every interleaved repeat, and the summary shows them
    assert r.t_draft.n == 3 and all(t.n == 3 and t.min > 0 for t in r.t_target)
    assert [ln for ln in r.summary() if ln.startswith("t_draft(1) ") and "n = 3" in ln and "t_target(6)" in ln]
    d = roundtrip(r)
    assert isinstance(figures.policies_figure(d), go.Figure)


def test_confidence_threshold_controls_the_depth_under_greedy(self_pair):
    """Threshold 1 stops after every first draft (top probability < 1 under softmax); threshold 0
    never stops. Under greedy the engine hands keep_drafting the draft's softmax, not one-hot."""
    shallow = compare_policies(self_pair, prompts=PROMPTS[:1], policies=("confidence",), gamma=2,
                               gamma_max=4, threshold=1.0, max_new_tokens=16)
    deep = compare_policies(self_pair, prompts=PROMPTS[:1], policies=("confidence",), gamma=2,
                            gamma_max=4, threshold=0.0, max_new_tokens=16)
    assert shallow.rows[1].mean_gamma <= 1.0  # with one-hot rows it would never stop: 4
    assert deep.rows[1].mean_gamma >= 3.0
    assert shallow.rows[1].outputs == deep.rows[1].outputs == deep.rows[0].outputs


# --------------------------------------------------------------------------- 4. theory

def test_formulas():
    assert expected_tokens(0.0, 4) == 1.0 and expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    assert leviathan_speedup(0.5, 2, 0.25) == pytest.approx(1.75 / 1.5)


def test_theory_on_a_perfect_draft_predicts_and_measures_gamma_plus_one(self_pair):
    r = theory_vs_measurement(self_pair, gammas=(1, 2, 4), prompts=PROMPTS[:1], max_new_tokens=30)
    assert r.alpha == 1.0 and r.gammas == [1, 2, 4]
    assert r.predicted_tokens_per_pass == [2.0, 3.0, 5.0]
    for g, measured in zip(r.gammas, r.measured_tokens_per_pass):
        assert g + 1 >= measured >= 0.85 * (g + 1)  # only the budget-cut last step falls short
    assert 0 < r.c and r.optimal_gamma_measured in r.gammas and r.optimal_gamma_predicted in r.gammas
    assert len(r.measured_speedup) == len(r.predicted_speedup_verify) == 3
    assert isinstance(figures.theory_figure(roundtrip(r)), go.Figure)


# --------------------------------------------------------------------------- 5. lossless

class FixedLM(torch.nn.Module):
    """A 'model' whose next-token distribution ignores the context: logits = log(probs)."""

    def __init__(self, probs):
        super().__init__()
        self.register_buffer("logits", torch.tensor(probs).log())
        self.config = SimpleNamespace(vocab_size=len(probs), max_position_embeddings=64)

    def forward(self, input_ids, cache=None, use_cache=True):
        batch, q = input_ids.shape
        return SimpleNamespace(logits=self.logits.expand(batch, q, -1).clone())


class LetterTokenizer:
    eos_token_id = None

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [0, 1]}

    def decode(self, ids, skip_special_tokens=False):
        return "".join("abcd"[i] for i in ids)


P_TARGET, Q_DRAFT = [0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.7]


@pytest.fixture(scope="module")
def fixed_pair():
    return ModelPair(FixedLM(P_TARGET), FixedLM(Q_DRAFT), LetterTokenizer(), "cpu", torch.float32,
                     "fixed-p", "fixed-q")


def test_lossless_exact_stays_at_p_and_each_broken_variant_moves(fixed_pair):
    """Analytically: exact -> p; greedy draft -> [6/7, 0, 0, 1/7] (TV 0.2 from p); no residual ->
    min(p, q) + (1 - alpha) p = [0.52, 0.16, 0.16, 0.16] (TV 0.18). With N = 3000 over 4 outcomes
    the sampling error of a TV is ~0.02."""
    r = lossless(fixed_pair, prompt="ab", n=3000, k=1, gamma=2, seed=0)
    arms = {a.variant: a for a in r.arms}
    assert arms["exact"].tv_to_exact < 0.04 and arms["exact"].p_value > 0.01
    assert arms["greedy_draft"].tv_to_exact == pytest.approx(0.2, abs=0.04)
    assert arms["no_residual"].tv_to_exact == pytest.approx(0.18, abs=0.04)
    for broken in ("greedy_draft", "no_residual"):
        assert not arms[broken].consistent and arms[broken].p_value <= 0.01
        assert arms[broken].tv > 2 * arms[broken].noise_q95
    assert r.exact_p[:4] == pytest.approx(sorted(P_TARGET, reverse=True), abs=1e-6)
    assert sum(r.target_freqs) == pytest.approx(1.0)
    assert isinstance(figures.lossless_figure(roundtrip(r)), go.Figure)


def test_lossless_two_tokens_and_the_real_sampler(fixed_pair, tiny_pair):
    two = lossless(fixed_pair, prompt="ab", n=2000, k=2, gamma=3, variants=("exact", "greedy_draft"), seed=1)
    arms = {a.variant: a for a in two.arms}
    assert all(len(o) == 2 for o in two.outcomes) and two.exact_p is None
    assert arms["exact"].p_value > 0.01 and arms["greedy_draft"].p_value <= 0.01
    real = lossless(tiny_pair, prompt="It is a truth", n=300, k=1, gamma=3, variants=("exact",), seed=2)
    assert real.arms[0].p_value > 0.01 and real.arms[0].tv_to_exact < 0.2


def test_tv_and_permutation_noise():
    from collections import Counter
    assert tv_distance(Counter("aabb"), Counter("aabb")) == 0.0
    assert tv_distance(Counter("aaaa"), Counter("bbbb")) == 1.0
    assert tv_distance(Counter("aaab"), Counter("abbb")) == pytest.approx(0.5)
    noise = permutation_tvs(list("ab" * 50), list("ab" * 50), splits=50, seed=0)
    assert len(noise) == 50 and 0 < noise.mean() < 0.3


def test_lossless_rejects_bad_input(fixed_pair):
    with pytest.raises(LessonError, match="temperature"):
        lossless(fixed_pair, prompt="ab", temperature=0.0)
    with pytest.raises(LessonError, match="variant"):
        lossless(fixed_pair, prompt="ab", n=10, variants=("exact", "nonsense"))
    with pytest.raises(LessonError, match="empty"):
        lossless(fixed_pair, prompt="  ")


# --------------------------------------------------------------------------- 6. FLOPs

def test_flops_split_adds_up_and_wastes_only_after_rejections(tiny_pair, self_pair):
    from app.costmodel import forward_cost
    r = flops_vs_time(tiny_pair, prompt=PROMPTS[0], gamma=3, max_new_tokens=16, repeats=3)
    assert [s["gamma"] for s in r.sweep] == [1, 2, 3]
    assert r.gamma == min(r.sweep, key=lambda s: s["seconds"])["gamma"]  # the sweep's fastest
    assert r.identical is True and r.new_tokens == r.baseline_tokens == 16
    assert r.seconds["plain"].n == r.seconds["speculative"].n == 3 and r.time_ratio.n == 3
    assert r.flops["draft"] > 0 and r.flops["verify_used"] > 0 and r.plain_flops > 0
    assert r.spec_flops > r.plain_flops  # drafts and rejected positions are extra arithmetic
    if r.gamma > 1 or r.wasted_positions:
        assert r.flops["verify_wasted"] >= r.wasted_positions * 0.9 * forward_cost(
            tiny_pair.target.config, 1, 1, 0, 4).linear_flops
    assert len(r.pass_seconds) == r.gamma + 1 and r.waste["total_s"] == pytest.approx(
        r.waste["verify_marginal_s"] + r.waste["draft_rejected_s"])
    perfect = flops_vs_time(self_pair, prompt=PROMPTS[0], gamma=2, max_new_tokens=12, repeats=3)
    assert perfect.wasted_positions == 0 and perfect.flops["verify_wasted"] == 0
    assert perfect.accepted == perfect.drafted and perfect.waste["draft_rejected_s"] == 0
    d = roundtrip(r)
    assert d["flops_ratio"] == pytest.approx(r.spec_flops / r.plain_flops)
    assert d["seconds"]["plain"].keys() == {"min", "median", "max", "n"} and d["labels"]["flops"] == "counted"
    assert r.headline().startswith(r.verdict.text())
    assert isinstance(figures.flops_figure(d), go.Figure)


# --------------------------------------------------------------------------- 7. memory wall

def test_memory_wall_reproduces_the_70b_example():
    w = memory_wall(70e9, dtype="fp16", batch=1, bytes_per_s=2e12)
    assert w.bytes_per_token == pytest.approx(140e9)
    assert w.memory_floor_s == pytest.approx(0.070)
    assert w.intensity == pytest.approx(1.0)
    assert w.bound is None and w.tokens_per_s == pytest.approx(1 / 0.070)
    assert w.verdict.held is None and "no ridge" in w.verdict.evidence  # no peak given
    assert "a device of 2 TB/s" in w.verdict.claim
    # q = 5 at alpha 0.5: E = 1 + .5 + .25 + .125 + .0625 = 1.9375 tokens emitted per sequence, not 5
    batched = memory_wall(70e9, dtype="fp16", batch=8, q=5, alpha=0.5, bytes_per_s=2e12, flops_per_s=1e15)
    assert batched.intensity == pytest.approx(40.0) and batched.bytes_per_token == pytest.approx(140e9 / (8 * 1.9375))
    assert batched.memory_bound_below == pytest.approx(500) and batched.bound == "memory"
    assert batched.verdict.held is True  # 40 FLOP/byte < ridge 1000
    assert memory_wall(70e9, dtype="int4", bytes_per_s=2e12).memory_floor_s == pytest.approx(0.0175)
    # the KV cache is read too: 1024 cached tokens of 327,680 B (Llama-3-70B, fp16) + the new one
    kv = memory_wall(70e9, dtype="fp16", bytes_per_s=2e12, context=1024, kv_bytes_per_token=327680)
    assert kv.kv_bytes == pytest.approx(1025 * 327680) and kv.bytes_per_pass == pytest.approx(140e9 + 1025 * 327680)
    assert kv.intensity < 1.0
    h100 = memory_wall(8e9, device="H100 SXM")
    assert h100.bytes_per_s == 3.35e12 and h100.flops_per_s == 989e12
    assert h100.reference["ridge"] == pytest.approx(312e12 / 2.039e12)  # the A100 beside it
    d = roundtrip(h100)
    assert d["verdict"]["held"] is True and d["labels"]["*"] == "calculated"
    assert h100.headline().startswith(h100.verdict.text())
    assert isinstance(figures.memory_wall_figure(d), go.Figure)


def test_memory_wall_shows_this_devices_measured_ridge(monkeypatch):
    import app.annotate
    monkeypatch.setattr(app.annotate, "ceilings", lambda device, dtype, progress=None: CEIL)
    w = memory_wall(70e9, bytes_per_s=2e12, this_device=True)
    assert w.here["ridge"] == pytest.approx(5.0) and w.here["label"] == "measured"
    assert w.here["decode_intensity"] == pytest.approx(0.5)  # fp32 on a CPU: 2 FLOPs per 4 bytes
    assert "measured ridge of 5" in w.verdict.evidence and "ridge 5 FLOP/byte (measured)" in w.headline()


def test_memory_wall_rejects_bad_input():
    with pytest.raises(LessonError, match="dtype"):
        memory_wall(7e9, dtype="fp12", bytes_per_s=1e12)
    with pytest.raises(LessonError, match="unknown device"):
        memory_wall(7e9, device="Z80")
    with pytest.raises(LessonError, match="bandwidth"):
        memory_wall(7e9)


# --------------------------------------------------------------------------- CLI

def cli(argv, capsys):
    from app.cli import main
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_memory_wall_json_to_stdout(capsys):
    code, out, err = cli(["lesson", "memory_wall", "--params", "70B", "--bandwidth", "2", "--json", "-"], capsys)
    assert code == 0
    d = json.loads(out)
    assert d["lesson"] == "memory_wall" and d["memory_floor_s"] == pytest.approx(0.07)
    assert "140 GB per token" in err
    assert d["verdict"]["held"] is None and d["verdict"]["claim"]  # no peak given: no ridge to judge by
    code, out, err = cli(["lesson", "memory_wall", "--params", "70B", "--peak", "300", "--context", "1024",
                          "--kv-per-token", "327680", "--json", "-"], capsys)
    d = json.loads(out)
    assert code == 0 and d["verdict"]["held"] is True and d["kv_bytes"] == pytest.approx(1025 * 327680)


def test_cli_knee_writes_json_file(tiny_dirs, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("app.hardware.measure_ceilings", lambda *a, **k: CEIL)  # no 2 s benchmark
    path = tmp_path / "knee.json"
    code, out, _ = cli(["lesson", "knee", "--target", tiny_dirs[0], "--draft", tiny_dirs[1], "--device", "cpu",
                        "--qs", "1,2,5", "--repeats", "3", "--kv-len", "4", "--json", str(path)], capsys)
    assert code == 0 and "t(q)/t(1)" in out
    d = json.loads(path.read_text())
    assert d["qs"] == [1, 2, 5] and len(d["seconds"]) == 3
    assert {"claim", "held", "evidence"} <= d["verdict"].keys()
    assert all({"min", "median", "max"} <= s.keys() for s in d["seconds"])


def test_cli_errors_are_one_line_and_exit_2(tiny_dirs, capsys):
    code, out, err = cli(["lesson", "theory", "--target", tiny_dirs[0], "--draft", tiny_dirs[1],
                          "--device", "cpu", "--gammas", "0,1"], capsys)
    assert code == 2 and err.startswith("error: gammas must be between 1 and 16") and err.count("\n") == 1
    code, _, err = cli(["lesson", "flops", "--target", "/nonexistent/dir", "--draft", "x/y"], capsys)
    assert code == 2 and err.startswith("error:") and err.count("\n") == 1
    code, _, err = cli(["lesson", "memory_wall", "--dtype", "fp12"], capsys)
    assert code == 2 and "unknown dtype" in err
