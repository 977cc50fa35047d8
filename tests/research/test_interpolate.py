"""research.interpolate: the interpolated draft is the weighted mean of the two, tensor by
tensor; the ends give back each draft; drafts that are not a fine-tune and its parent refuse."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from app.assets import TINY_DRAFT_DIR
from research.interpolate import WEIGHTS, interpolate_dirs, interpolate_state


@pytest.fixture
def parent_and_child(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(TINY_DRAFT_DIR, a)
    shutil.copytree(TINY_DRAFT_DIR, b)
    gen = torch.Generator().manual_seed(0)
    state = load_file(str(a / WEIGHTS))
    save_file({k: (v.float() + 0.01 * torch.randn(v.shape, generator=gen)).to(v.dtype) for k, v in state.items()},
              str(b / WEIGHTS))
    return a, b


def test_the_state_is_the_weighted_mean():
    a = {"w": torch.tensor([0.0, 2.0, -4.0])}
    b = {"w": torch.tensor([1.0, 4.0, 4.0])}
    assert torch.equal(interpolate_state(a, b, 0.25)["w"], torch.tensor([0.25, 2.5, -2.0]))
    with pytest.raises(ValueError, match="names or shapes"):
        interpolate_state(a, {"w": torch.zeros(4)}, 0.5)


@pytest.mark.parametrize("weight", [0.0, 0.5, 1.0])
def test_a_folder_interpolates_every_tensor(parent_and_child, tmp_path, weight):
    a, b = parent_and_child
    interpolate_dirs(a, b, weight, tmp_path / "out")
    sa, sb, out = (load_file(str(d / WEIGHTS)) for d in (a, b, tmp_path / "out"))
    for k, v in out.items():
        want = ((1 - weight) * sa[k].float() + weight * sb[k].float()).to(sb[k].dtype)
        assert v.dtype == sb[k].dtype and torch.equal(v, want), k
    assert weight != 0.0 or all(torch.equal(out[k], sa[k]) for k in out)
    assert weight != 1.0 or all(torch.equal(out[k], sb[k]) for k in out)
    assert (tmp_path / "out" / "tokenizer.json").is_file()


def test_drafts_with_different_configs_or_a_weight_outside_0_1_are_refused(parent_and_child, tmp_path):
    a, b = parent_and_child
    with pytest.raises(ValueError, match="weight"):
        interpolate_dirs(a, b, 1.5, tmp_path / "out")
    cfg = json.loads((b / "config.json").read_text())
    cfg["num_hidden_layers"] += 1
    (b / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="different configs"):
        interpolate_dirs(a, b, 0.5, tmp_path / "out")
    assert not (tmp_path / "out").exists()
