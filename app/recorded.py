"""Recorded runs: load and check a trace.json, say who recorded it, and list the gallery.

    trace = load_trace("run.json")            # or load_trace(text); InputError when it is not one
    runs = gallery()                          # demo_models/recorded/manifest.json's entries
    entry = closest_recorded(prompt, pair, gamma)  # the run to offer instead of a live decode

A trace file comes from anywhere (an upload, another laptop, an older version of this app), so
`load_trace` checks its size (MAX_TRACE_BYTES, before parsing), then every field against the
schema of app.trace and the caps below; a file that fails gets one line (InputError) naming the
field, and nothing is built. Unknown keys are ignored; a newer schema_version is refused.
Nothing here imports torch: a replay needs no model.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import shlex
import subprocess
from pathlib import Path

from app.assets import RECORDED_DIR, REPO_ROOT
from app.metrics import check_baseline_numbers, summary
from app.trace import FATES, SCHEMA_VERSION, Trace, upgrade
from app.validation import InputError

GALLERY_DIR, MANIFEST = RECORDED_DIR, "manifest.json"

MAX_TRACE_BYTES = 20_000_000   # a 1024-token run with its baseline is ~2 MB of JSON
MAX_STEPS = 4096               # target passes per run (the engine stops at MAX_NEW_TOKENS = 1024)
MAX_LIST = 1024                # drafts, checks, pieces, forwards, top-k rows of one step
MAX_IDS = 200_000              # prompt and output token ids
MAX_TEXT_CHARS = 200_000       # the prompt and the output text
MAX_STRING_CHARS = 1_000       # every other string (token texts, names, paths, notes)
MAX_DEPTH = 4                  # nesting of the free-form dicts (settings, device, models, recorded)
MAX_KEYS = 256
MAX_TOKEN_ID = 2**31 - 1
PROB_MAX = 1.001               # probabilities: float32 softmax may round a little above 1

MODELS, PHASES = ("draft", "target"), ("prefill", "draft", "verify", "decode")
BOUNDS, WEIGHTS = ("", "memory", "compute", "overhead"), ("", "int8")
TRACE_KEYS = ("prompt", "settings", "prompt_ids", "steps")  # what makes a JSON object a trace


def _show(value) -> str:
    """A value for an error line: repr, one line, at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _show_path(path: Path) -> str:
    """A path for an error line: control characters escaped, its end kept when long."""
    text = repr(str(path))[1:-1]
    return text if len(text) <= 80 else "..." + text[-77:]


def _fail(where: str, what: str, value=None, show: bool = True) -> None:
    raise InputError(f"{where} {what}" + (f", got {_show(value)}" if show else ""))


def _int(v, where: str, high: int = 2**63 - 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        _fail(where, "must be a whole number", v)
    if not 0 <= v <= high:
        _fail(where, f"must be between 0 and {high}", v)
    return v


def _num(v, where: str, high: float = math.inf, inf_ok: bool = False) -> float:
    """A finite number >= 0 (and <= high); +inf too where inf_ok (a ratio over q = 0)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        _fail(where, "must be a number", v)
    if v < 0 or v > high or (math.isinf(v) and not inf_ok):
        _fail(where, f"must be finite and between 0 and {high:g}" if high < math.inf
              else "must be a finite number >= 0", v)
    return v


def _str(v, where: str, cap: int = MAX_STRING_CHARS) -> str:
    if not isinstance(v, str):
        _fail(where, "must be a string", v)
    if len(v) > cap:
        _fail(where, f"is {len(v)} characters long; at most {cap} are accepted", show=False)
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        _fail(where, "is not valid Unicode text", show=False)
    return v


def _bool(v, where: str, none_ok: bool = False) -> None:
    if not (isinstance(v, bool) or (none_ok and v is None)):
        _fail(where, "must be true or false" + (" or null" if none_ok else ""), v)


def _choice(v, where: str, choices: tuple[str, ...]) -> None:
    if v not in choices or not isinstance(v, str):
        _fail(where, f"must be one of {', '.join(map(repr, choices))}", v)


def _list(v, where: str, cap: int = MAX_LIST) -> list:
    if not isinstance(v, list):
        _fail(where, "must be a list", v)
    if len(v) > cap:
        _fail(where, f"has {len(v)} entries; at most {cap} are accepted", show=False)
    return v


def _ids(v, where: str, cap: int = MAX_LIST) -> None:
    for i, x in enumerate(_list(v, where, cap)):
        _int(x, f"{where}[{i}]", MAX_TOKEN_ID)


def _probs(v, where: str) -> None:
    for i, x in enumerate(_list(v, where)):
        _num(x, f"{where}[{i}]", PROB_MAX)


def _obj(v, where: str, required: tuple[str, ...] = ()) -> dict:
    if not isinstance(v, dict):
        _fail(where, "must be a JSON object", v)
    missing = [k for k in required if k not in v]
    if missing:
        _fail(where, f"lacks {', '.join(missing)}", show=False)
    return v


def _plain(v, where: str, depth: int = 0) -> None:
    """Free-form JSON (settings, device, models, recorded): bounded depth, keys, lists and
    strings; numbers finite (of any sign)."""
    if v is None or isinstance(v, bool):
        return
    if isinstance(v, (int, float)):
        if isinstance(v, float) and not math.isfinite(v):
            _fail(where, "must be a finite number", v)
        return
    if isinstance(v, str):
        _str(v, where)
        return
    if depth >= MAX_DEPTH:
        _fail(where, f"is nested more than {MAX_DEPTH} levels deep", show=False)
    if isinstance(v, list):
        for i, x in enumerate(_list(v, where)):
            _plain(x, f"{where}[{i}]", depth + 1)
        return
    if not isinstance(v, dict):
        _fail(where, "must be plain JSON", v)
    if len(v) > MAX_KEYS:
        _fail(where, f"has {len(v)} keys; at most {MAX_KEYS} are accepted", show=False)
    for k, x in v.items():
        _str(k, f"{where} key", 200)
        _plain(x, f"{where}.{k}", depth + 1)


def _settings(v, where: str) -> None:
    _plain(_obj(v, where), where)
    for k in ("gamma", "top_k", "seed", "max_new_tokens"):
        if k in v:
            _int(v[k], f"{where}.{k}")
    for k in ("temperature", "top_p"):
        if k in v:
            _num(v[k], f"{where}.{k}")
    for k in ("fast", "draft_int8"):
        if k in v:
            _bool(v[k], f"{where}.{k}")


def _forward(v, where: str) -> None:
    _obj(v, where, ("model", "phase", "batch", "tokens", "kv_len", "seconds"))
    _choice(v["model"], f"{where}.model", MODELS)
    _choice(v["phase"], f"{where}.phase", PHASES)
    for k in ("batch", "tokens", "kv_len"):
        _int(v[k], f"{where}.{k}")
    for k in ("seconds", "flops", "bytes"):
        if k in v:
            _num(v[k], f"{where}.{k}")
    _choice(v.get("bound", ""), f"{where}.bound", BOUNDS)
    _choice(v.get("weights", ""), f"{where}.weights", WEIGHTS)
    if "logits" in v:
        _bool(v["logits"], f"{where}.logits")


def _piece(v, where: str) -> None:
    _obj(v, where, ("token_id", "text", "fate", "step"))
    _int(v["token_id"], f"{where}.token_id", MAX_TOKEN_ID)
    _str(v["text"], f"{where}.text")
    _choice(v["fate"], f"{where}.fate", FATES)
    _int(v["step"], f"{where}.step")
    for k in ("p", "q"):
        if v.get(k) is not None:
            _num(v[k], f"{where}.{k}", PROB_MAX)
    _bool(v.get("special", False), f"{where}.special")


def _check(v, where: str) -> None:
    _obj(v, where, ("token_id", "q", "p", "ratio", "r", "accepted"))
    _int(v["token_id"], f"{where}.token_id", MAX_TOKEN_ID)
    _num(v["q"], f"{where}.q", PROB_MAX)
    _num(v["p"], f"{where}.p", PROB_MAX)
    _num(v["ratio"], f"{where}.ratio", inf_ok=True)
    if v["r"] is not None:
        _num(v["r"], f"{where}.r", 1.0)
    _bool(v["accepted"], f"{where}.accepted")
    for k in ("top_ids", "residual_ids"):
        _ids(v.get(k, []), f"{where}.{k}")
    for k in ("top_p", "top_q", "residual_p"):
        _probs(v.get(k, []), f"{where}.{k}")


def _step(v, where: str) -> None:
    _obj(v, where, ("index", "gamma", "draft_ids", "q_draft", "checks", "n_accepted",
                    "emitted_ids", "pieces", "forwards"))
    _int(v["index"], f"{where}.index")
    _int(v["gamma"], f"{where}.gamma", MAX_LIST)
    _ids(v["draft_ids"], f"{where}.draft_ids")
    _probs(v["q_draft"], f"{where}.q_draft")
    drafted = len(v["draft_ids"])
    if len(v["q_draft"]) != drafted:
        _fail(f"{where}.q_draft", f"has {len(v['q_draft'])} entries for {drafted} drafted tokens", show=False)
    _int(v["n_accepted"], f"{where}.n_accepted", drafted)  # accepted drafts <= drafted ones
    _ids(v["emitted_ids"], f"{where}.emitted_ids", drafted + 1)  # accepted + correction or bonus
    for name, check in (("checks", _check), ("pieces", _piece), ("forwards", _forward)):
        for i, x in enumerate(_list(v[name], f"{where}.{name}")):
            check(x, f"{where}.{name}[{i}]")


def _steps(v, where: str) -> None:
    for i, x in enumerate(_list(v, where, MAX_STEPS)):
        _step(x, f"{where}[{i}]")


def _summary(v, where: str) -> None:
    ints = ("new_tokens", "target_passes", "draft_passes", "drafted", "accepted")
    floats = ("seconds", "tokens_per_s", "acceptance_rate", "tokens_per_pass")
    _obj(v, where, ints + floats)
    for k in ints:
        _int(v[k], f"{where}.{k}")
    for k in floats + ("flops",):
        if k in v:
            _num(v[k], f"{where}.{k}")


def _baseline(v, where: str) -> None:
    _obj(v, where, ("output_ids", "output_text", "tokens_per_s", "seconds"))
    _ids(v["output_ids"], f"{where}.output_ids", MAX_IDS)
    _str(v["output_text"], f"{where}.output_text", MAX_TEXT_CHARS)
    check_baseline_numbers(v, where)  # tokens/s, seconds and the interleaved runs (app.metrics)
    _bool(v.get("identical"), f"{where}.identical", none_ok=True)
    _steps(v.get("steps", []), f"{where}.steps")


def check_trace_dict(d, name: str = "the file") -> dict:
    """`d` (parsed JSON) if it is a trace this app can replay, else InputError in one line."""
    if not isinstance(d, dict) or not all(k in d for k in TRACE_KEYS):
        raise InputError(f"{name} is not a speculative-decoding trace (a JSON object with "
                         f"{', '.join(TRACE_KEYS)}, as the Live tab's trace.json or "
                         "`python -m app generate --json` writes)")
    version = d.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InputError(f"{name}: schema_version must be a whole number >= 1, got {_show(version)}")
    if version > SCHEMA_VERSION:
        raise InputError(f"{name} was written by a newer version of the lab (trace schema {version}; "
                         f"this one reads up to {SCHEMA_VERSION}): update the app")
    try:
        _str(d["prompt"], "prompt", MAX_TEXT_CHARS)
        _settings(d["settings"], "settings")
        _ids(d["prompt_ids"], "prompt_ids", MAX_IDS)
        _ids(d.get("output_ids", []), "output_ids", MAX_IDS)
        _str(d.get("output_text", ""), "output_text", MAX_TEXT_CHARS)
        _steps(d["steps"], "steps")
        if d.get("summary") is not None:
            _summary(d["summary"], "summary")
        if d.get("baseline") is not None:
            _baseline(d["baseline"], "baseline")
        for k in ("device", "models", "recorded"):
            _plain(_obj(d.get(k, {}), k), k)
        _str(d.get("stopped", ""), "stopped")
    except InputError as exc:
        raise InputError(f"{name}: {exc}") from None
    return upgrade(d, version)


def parse_trace(text: str | bytes, name: str = "the file", max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """A Trace from the text of a trace.json (size, JSON and schema checked first)."""
    size = len(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    if size > max_bytes:
        raise InputError(f"{name} is {size / 1e6:.1f} MB; recorded runs of at most "
                         f"{max_bytes / 1e6:.0f} MB are accepted")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{name} is not UTF-8 text: a trace.json is JSON") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name} is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (RecursionError, ValueError) as exc:  # nesting or a number past what Python reads
        raise InputError(f"{name} is not JSON this app can read ({type(exc).__name__})") from None
    return Trace.from_dict(check_trace_dict(data, name))


def load_trace(source: str | os.PathLike | bytes, max_bytes: int = MAX_TRACE_BYTES,
               name: str | None = None) -> Trace:
    """A Trace from a trace.json: a path (str or Path), or the file's text (a str that starts
    with "{", or bytes). Refused in one line (InputError) when it is missing, too large (checked
    before it is read), not JSON, not a trace, or breaks the schema."""
    if isinstance(source, bytes) or (isinstance(source, str) and source.lstrip().startswith("{")):
        return parse_trace(source, name or "the file", max_bytes)
    path = Path(source)
    shown = name or _show_path(path)
    if path.is_dir():
        raise InputError(f"{shown} is a directory: give the path of a trace.json")
    if not path.is_file():
        raise InputError(f"{shown}: no such file")
    size = path.stat().st_size
    if size > max_bytes:
        raise InputError(f"{shown} is {size / 1e6:.1f} MB; recorded runs of at most "
                         f"{max_bytes / 1e6:.0f} MB are accepted")
    try:
        data = path.read_bytes()  # its size was checked above; parse_trace checks it again
    except OSError as exc:
        raise InputError(f"{shown}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    return parse_trace(data, shown, max_bytes)


def git_commit(root: Path = REPO_ROOT) -> tuple[str, bool | None]:
    """(HEAD's hash, whether tracked files differ from it) of the checkout this code runs
    from; ("", None) outside a git checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    try:
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return "", None


def provenance(argv: list[str] | None, pair: str | None, **extra) -> dict:
    """Who made a run: date (UTC), the commit and whether the work tree was dirty, the command,
    the pair's preset name, and `extra` (e.g. torch threads and version); Trace.recorded."""
    commit, dirty = git_commit()
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit, "dirty": dirty, "pair": pair,
           "command": shlex.join(["python", "-m", "app", *argv]) if argv is not None else None}
    try:
        out["load_average_1min"] = round(os.getloadavg()[0], 2)  # how busy the machine was
    except OSError:
        pass
    return out | extra


def manifest_entry(path: Path, trace: Trace, root: Path = GALLERY_DIR) -> dict:
    """What the manifest says of one recorded run (the tests recompute it from the file)."""
    s, rec, dev = summary(trace), trace.recorded or {}, trace.device or {}
    data = path.read_bytes()
    return {"file": path.relative_to(root).as_posix(), "pair": rec.get("pair"), "prompt": trace.prompt,
            "device": dev.get("device"), "device_name": dev.get("device_name"), "dtype": dev.get("dtype"),
            "settings": s["settings"], "new_tokens": s["new_tokens"],
            "tokens_per_s": s["tokens_per_s"], "mean_acceptance_length": s["mean_acceptance_length"],
            "draft_acceptance_rate": s["draft_acceptance_rate"], "speedup": s["speedup"],
            "date": rec.get("date"), "commit": rec.get("commit"),
            "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def gallery(root: Path = GALLERY_DIR) -> list[dict]:
    """The manifest's entries (one per recorded run), or [] when there is no gallery."""
    return list(json.loads((root / MANIFEST).read_text()).get("runs", [])) if (root / MANIFEST).is_file() else []


def find_recorded(prompt: str, pair: str, device: str | None = None, root: Path = GALLERY_DIR) -> dict | None:
    """The gallery's run of exactly this prompt on this pair (and device kind, "cpu" / "cuda",
    when given); None when there is none."""
    return next((e for e in gallery(root) if e.get("prompt") == prompt and e.get("pair") == pair
                 and (device is None or e.get("device") == device)), None)


def closest_recorded(prompt: str, pair: str, gamma: int, policy: str = "fixed", device: str | None = None,
                     root: Path = GALLERY_DIR) -> dict | None:
    """The gallery run closest to a Live-tab request, for the Live tab to offer when the device
    is busy (or ZeroGPU lends none): the same pair or the same prompt is required; then, in this
    order, both, the same prompt, the same device kind ("cpu" / "cuda"), the nearest gamma, the
    same depth policy (gallery runs without one were fixed-gamma). None when nothing matches."""
    def rank(e: dict) -> tuple:
        s = e.get("settings") or {}
        g = s.get("gamma") if isinstance(s.get("gamma"), int) else 10**6
        return (-(e.get("prompt") == prompt) - (e.get("pair") == pair), -(e.get("prompt") == prompt),
                e.get("device") != device if device else 0, abs(g - gamma), s.get("depth_policy", "fixed") != policy)
    found = [e for e in gallery(root) if e.get("prompt") == prompt or e.get("pair") == pair]
    return min(found, key=rank) if found else None


def gallery_trace(entry: dict, root: Path = GALLERY_DIR) -> Trace:
    """The recorded run a manifest entry names (checked like any upload)."""
    file = Path(str(entry.get("file", "")))
    if file.is_absolute() or ".." in file.parts or not file.name:
        raise InputError(f"gallery entry {_show(str(file))} is not a file of the gallery")
    return load_trace(root / file, name=file.as_posix())
