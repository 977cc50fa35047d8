"""app.cpu_regime: the knee's visibility, read from measured pass times and explained."""
import json

from app import cpu_regime
from app.knee import BEND_RATIO


def test_regime_from_times_uses_the_widest_pass_up_to_eight(monkeypatch):
    import torch
    monkeypatch.delenv("MKL_CBWR", raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    visible = cpu_regime.from_times({1: 0.100, 2: 0.104, 8: 0.120, 64: 0.9}, "AMD EPYC")
    assert visible.q == 8 and visible.ratio == 1.2 and visible.visible
    assert "nearly free" in visible.explanation
    hidden = cpu_regime.from_times({1: 0.100, 5: 0.180}, "AMD EPYC 7B13")
    assert hidden.q == 5 and not hidden.visible and hidden.label == "knee hidden"
    if hidden.mkl:  # torch's CPU wheels are built with MKL
        assert "MKL_CBWR=AVX512" in hidden.explanation
    assert cpu_regime.from_times({1: 1.0, 2: BEND_RATIO}, "x").visible  # the bound is inclusive
    assert cpu_regime.from_times({2: 0.1, 4: 0.2}, "x") is None  # no t(1): no verdict
    assert json.loads(json.dumps(hidden.to_dict()))["label"] == "knee hidden"


def test_the_suggested_mkl_path_is_one_this_cpu_has(monkeypatch):
    """An AVX2-only AMD CPU is told MKL_CBWR=AVX2, not AVX512 (a path it lacks); a CPU with
    neither gets no MKL advice; the ISA is torch's own report of this CPU."""
    import torch
    monkeypatch.delenv("MKL_CBWR", raising=False)
    for isa, told in (("AVX2", "MKL_CBWR=AVX2 "), ("AVX512", "MKL_CBWR=AVX512 ")):
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda isa=isa: isa)
        hidden = cpu_regime.from_times({1: 1.0, 8: 2.0}, "AMD EPYC")
        assert hidden.isa == isa and (told in hidden.explanation) == hidden.mkl
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert "MKL_CBWR" not in cpu_regime.from_times({1: 1.0, 8: 2.0}, "AMD EPYC").explanation
    monkeypatch.undo()
    assert cpu_regime.from_times({1: 1.0, 8: 1.1}, "x").isa == torch.backends.cpu.get_cpu_capability()


def test_hidden_knee_with_the_fix_set_or_on_another_cpu_is_not_blamed_on_mkl(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "AVX512")
    assert "MKL_CBWR=AVX512 to" not in cpu_regime.from_times({1: 1.0, 8: 2.0}, "AMD EPYC").explanation
    monkeypatch.delenv("MKL_CBWR")
    other = cpu_regime.from_times({1: 1.0, 8: 2.0}, "Intel(R) Xeon(R)")
    assert "MKL" not in other.explanation and "gains less" in other.explanation


def test_probe_times_the_model_once_per_setting(tiny_pair, monkeypatch):
    calls = []
    from app import knee
    original = knee.time_passes
    monkeypatch.setattr(knee, "time_passes", lambda *a, **k: calls.append(k["qs"]) or original(*a, **k))
    cpu_regime._probes.pop(tiny_pair.target, None)  # the shared fixture may have been probed already
    first = cpu_regime.probe(tiny_pair.target, "cpu", "test cpu")
    again = cpu_regime.probe(tiny_pair.target, "cpu", "test cpu")
    assert calls == [[1, cpu_regime.PROBE_Q]] and first is again
    assert first.q == cpu_regime.PROBE_Q and first.ratio > 0
    assert first.visible == (first.ratio <= BEND_RATIO)


def test_a_fast_path_run_gets_the_fast_paths_regime(tiny_pair, monkeypatch):
    """probe(fast=True) times the fast path (its own cache entry), and a hidden knee there is
    not blamed on MKL's slow path: the fast path's few-row form does not take it."""
    import torch

    from app import knee
    calls, original = [], knee.time_passes
    monkeypatch.setattr(knee, "time_passes", lambda *a, **k: calls.append(k["fast"]) or original(*a, **k))
    cpu_regime._probes.pop(tiny_pair.target, None)
    eager = cpu_regime.probe(tiny_pair.target, "cpu", "test cpu")
    fast = cpu_regime.probe(tiny_pair.target, "cpu", "test cpu", fast=True)
    assert calls == [False, True] and fast is not eager and fast.fast and not eager.fast
    monkeypatch.delenv("MKL_CBWR", raising=False)
    slow = {1: 1.0, 8: 2.0}
    assert "MKL_CBWR" in cpu_regime.from_times(slow, "AMD EPYC").explanation or not torch.backends.mkl.is_available()
    on_fast = cpu_regime.from_times(slow, "AMD EPYC", fast=True)
    assert not on_fast.visible and "MKL" not in on_fast.explanation and "gains less" in on_fast.explanation


def test_the_roofline_prints_the_verdict_escaped():
    from visualizations import roofline_figure
    note = cpu_regime.from_times({1: 1.0, 8: 2.0}, "AMD <b>EPYC</b>").explanation + " <script>"
    fig = roofline_figure([], {"device": "cpu", "measured": {"flops_per_s": 1e11, "bytes_per_s": 5e10},
                               "datasheet": None, "note": note})
    texts = [a.text for a in fig.layout.annotations]
    shown = [t for t in texts if "knee hidden" in t]
    assert len(shown) == 1 and "<script>" not in shown[0] and "&lt;script&gt;" in shown[0]
    assert not [t for t in [a.text for a in roofline_figure([], None).layout.annotations] if "knee" in t]


def test_an_impossible_ratio_is_called_noise_not_a_visible_knee():
    """A pass of 8 tokens timed at 0.31x one token (seen in the Live tab on a busy machine) cannot
    be: the verdict says timing noise, never "knee visible"."""
    noisy = cpu_regime.from_times({1: 1.0, 8: 0.31}, "AMD EPYC")
    assert noisy.label == "timing noise" and "knee visible" not in noisy.explanation
    assert "0.31x" in noisy.explanation and "cannot be" in noisy.explanation
    fine = cpu_regime.from_times({1: 1.0, 8: 0.95}, "AMD EPYC")  # within the noise of a quiet machine
    assert fine.label == "knee visible" and not fine.noise
