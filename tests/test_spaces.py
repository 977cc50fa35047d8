"""Spaces and ZeroGPU (app.spaces) with the real `spaces` package, each case in a fresh Python
process with the environment a Space sets (SPACE_ID, SPACES_ZERO_GPU), so what the package
reads at import is what a Space gives it. Nothing of ours is mocked.

  * the declared GPU duration: its formula, and that spaces.GPU hands it to ZeroGPU's scheduler;
  * off a Space nothing changes (the decode is not wrapped; `spaces` is not even imported);
  * on a Space without ZeroGPU, spaces.GPU is the package's pass-through: a real decode runs
    through our wrapper unchanged, and a replay never goes through it;
  * on ZeroGPU, when the scheduler lends no GPU (no GPU free, quota exceeded) the Live tab shows
    the closest recorded run with the reason, and never runs the decode. The scheduler is a
    small HTTP server standing in for ZeroGPU's device API (SPACES_ZERO_DEVICE_API_URL),
    answering as spaces/zero/api.py documents.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.runner import INPUTS
from app.spaces import BASE_SECONDS, MAX_SECONDS, TOKENS_PER_SECOND, gpu_seconds, gpu_seconds_of_request

pytest.importorskip("spaces", reason="the spaces package (test-only: pip install spaces==0.51.3)")

ROOT = Path(__file__).resolve().parent.parent
SPACE_ENV = ("SPACE_ID", "SPACES_ZERO_GPU", "SPACES_ZERO_DEVICE_API_URL", "ZEROGPU_PROC_SELF_CGROUP_PATH")


def request(**changes) -> tuple:
    """The Live tab's inputs, in app.runner.INPUTS order."""
    v = {"prompt": "Emma Woodhouse, handsome, clever, and rich,", "preset": "embedded", "drafter": "model",
         "gamma": 4, "depth_policy": "fixed", "temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 0,
         "max_new_tokens": 20, "device": "cpu", "fast_path": False, "baseline": True, "prompt_mode": "auto",
         "draft_int8": False} | changes
    return tuple(v[name] for name in INPUTS)


def run_python(code: str, **env) -> dict:
    """Run `code` in a new interpreter (repository root, this venv) with `env` on top of a
    Space-free environment; it prints one JSON object last, returned here."""
    base = {k: v for k, v in os.environ.items() if k not in SPACE_ENV}
    prelude = f"import json, sys\nsys.path.insert(0, {str(ROOT)!r})\nREQUEST = {request()!r}\n"
    done = subprocess.run([sys.executable, "-c", prelude + code], cwd=ROOT, env=base | env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- the duration

def test_the_declared_duration_grows_with_the_tokens_and_is_capped():
    assert gpu_seconds(20, baseline=False) == BASE_SECONDS + 20 // TOKENS_PER_SECOND == 17
    assert gpu_seconds(20, baseline=True) == BASE_SECONDS + 40 // TOKENS_PER_SECOND == 19
    assert gpu_seconds(96) == 15 + 20 and gpu_seconds(1, baseline=False) == 16  # rounded up
    assert gpu_seconds(1024) == gpu_seconds(10_000) == MAX_SECONDS
    lengths = [gpu_seconds(n) for n in range(1, 1025)]
    assert lengths == sorted(lengths) and max(lengths) == MAX_SECONDS


def test_the_duration_is_read_from_the_request_as_gradio_passes_it():
    assert gpu_seconds_of_request(*request(max_new_tokens=96), None, None) == gpu_seconds(96, True)
    assert gpu_seconds_of_request(*request(max_new_tokens=96, baseline=False)) == gpu_seconds(96, False)
    for bad in ("96", None, True, 0, 5000, float("nan")):  # the decode refuses these at once
        assert gpu_seconds_of_request(*request(max_new_tokens=bad)) == BASE_SECONDS


# --------------------------------------------------------------------------- off and on a Space

def test_off_a_space_nothing_changes():
    out = run_python("""
from app import spaces
def decode(*args):
    yield 1
called = []
print(json.dumps({"same": spaces.wrap_decode(decode, None) is decode, "zero": spaces.on_zero_gpu(),
                  "fast": spaces.fast_path_default(), "imported": "spaces" in sys.modules,
                  "preload": spaces.preload(lambda *a, **k: called.append(a), "embedded"), "called": called}))
""")
    assert out == {"same": True, "zero": False, "fast": "auto", "imported": False, "preload": None, "called": []}


def test_on_a_space_without_zero_gpu_a_decode_passes_through_spaces_gpu(tiny_dirs):
    out = run_python(f"""
import spaces
from app import spaces as ours
from app.models import load_pair
from app.ui import build_demo
def f():
    pass
pair = load_pair({tiny_dirs[0]!r}, {tiny_dirs[1]!r}, device="cpu")
demo = build_demo(lambda *a, **k: pair)
fns = {{f.api_name or f.fn.__name__: f.fn for f in demo.fns.values()}}
decode = fns["decode"]
views = list(decode(*REQUEST, None, lambda *a, **k: None))
after_decode = ours.calls["decode"]
from app.recorded import gallery
replayed = list(fns["replay_gallery"](gallery()[0]["file"], "instant"))
print(json.dumps({{"identity": spaces.GPU(duration=5)(f) is f, "zero": ours.on_zero_gpu(),
                   "duration": decode.gpu_seconds(*REQUEST, None, None), "after_decode": after_decode,
                   "after_replay": ours.calls["decode"], "ended": "end of stream" in views[-1][0],
                   "tokens": views[-1][4].count("new tokens"), "replayed": len(replayed),
                   "preload": ours.preload(lambda *a, **k: pair, "embedded")}}))
""", SPACE_ID="lab/test")
    assert out["identity"] and out["zero"] is False  # the package's own pass-through off ZeroGPU
    assert out["duration"] == gpu_seconds(20, baseline=True)
    assert out["after_decode"] == 1 and out["ended"] and out["tokens"] == 1  # the real decode, whole
    assert out["after_replay"] == 1 and out["replayed"] >= 1  # a replay never goes through it
    assert out["preload"] is None


def test_app_py_on_a_space_imports_spaces_first_and_preloads_the_default_pair():
    """app.py as a Space starts it: `spaces` imported before torch, Gradio's automatic GPU
    wrapping of every event turned off (replays must never take a GPU), the default pair loaded
    before the first visitor."""
    out = run_python("""
import runpy
runpy.run_path("app.py", run_name="space_app")
import spaces.gradio
from app import pairs
print(json.dumps({"auto_wrap": spaces.gradio.gradio_auto_wrap_enabled, "loaded": pairs.loaded()}))
""", SPACE_ID="lab/test", SPACES_GRADIO_AUTO_WRAP="true", SPECLAB_DEFAULT_PAIR="embedded")
    assert out == {"auto_wrap": False, "loaded": ["embedded"]}


SCHEDULER = """
import http.server, threading, urllib.parse
asked = []
class Scheduler(http.server.BaseHTTPRequestHandler):
    answer = (503, b"")
    def do_POST(self):
        asked.append((self.path.split("?")[0], dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))))
        code, body = Scheduler.answer
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scheduler)
threading.Thread(target=server.serve_forever, daemon=True).start()
os.environ["SPACES_ZERO_DEVICE_API_URL"] = f"http://127.0.0.1:{server.server_port}"
"""


def test_a_gpu_refused_shows_the_closest_recorded_run_and_other_errors_stay_errors():
    """ZeroGPU's refusals, as the package raises them (spaces.zero.gradio.error with the titles
    of spaces/zero/client.py), reach our wrapper from inside spaces.GPU; here the wrapped
    function raises them itself, since ZeroGPU's mode needs a CUDA build of torch."""
    out = run_python("""
from spaces.zero.gradio import error
from app import spaces as ours
from app.ui import replay
def refused(title, message):
    def decode(*args):
        raise error(title, message)
        yield
    return decode
shown, raised = {}, {}
for title, message in [("ZeroGPU quota exceeded", "Space app has reached its GPU limit."),
                       ("ZeroGPU client error", "No GPU was available"),
                       ("ZeroGPU worker error", "RuntimeError"), ("Not ZeroGPU", "a decode's own error")]:
    try:
        views = list(ours.wrap_decode(refused(title, message), replay.gpu_fallback)(*REQUEST, None, None))
        shown[title] = [len(views), views[-1].status, "end of stream" in views[-1].stream]
    except Exception as exc:
        raised[title] = exc.message
print(json.dumps({"shown": shown, "raised": raised}))
""", SPACE_ID="lab/test")
    assert set(out["shown"]) == {"ZeroGPU quota exceeded", "ZeroGPU client error"}
    for title, (count, status, ended) in out["shown"].items():
        assert count == 1 and ended and status.startswith(f"**No GPU now** ({title}: ")
        assert "cpu\\-embedded\\-emma\\-woodhouse" in status  # the recorded run of this example
    assert out["raised"] == {"ZeroGPU worker error": "RuntimeError", "Not ZeroGPU": "a decode's own error"}


def torch_has_cuda() -> bool:
    import torch
    return torch.version.cuda is not None


@pytest.mark.skipif(not torch_has_cuda(), reason="the spaces package's ZeroGPU mode needs a CUDA build of torch")
def test_on_zero_gpu_a_refused_gpu_shows_the_closest_recorded_run(tmp_path):
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("0::/lab\n")
    out = run_python("import os\n" + SCHEDULER + """
import spaces  # as app.py does on a Space: before torch starts CUDA
from app import spaces as ours
from app.ui import build_demo
def loader(*a, **k):
    raise AssertionError("no GPU was lent: nothing may be loaded")
demo = build_demo(loader)
decode = next(f.fn for f in demo.fns.values() if f.api_name == "decode")
shown = {}
for name, answer in {"no GPU": (503, b""), "quota": (429, b'{"left": 0, "wait": 3600}')}.items():
    Scheduler.answer = answer
    views = list(decode(*REQUEST, None, lambda *a, **k: None))
    shown[name] = [len(views), views[-1][1], "end of stream" in views[-1][0]]
print(json.dumps({"zero": ours.on_zero_gpu(), "fast": ours.fast_path_default(), "shown": shown,
                  "asked": asked, "calls": ours.calls["decode"]}))
""", SPACE_ID="lab/test", SPACES_ZERO_GPU="true", ZEROGPU_PROC_SELF_CGROUP_PATH=str(cgroup))
    assert out["zero"] is True and out["fast"] == "off"  # no CUDA graphs on a lent GPU
    paths = [path for path, _ in out["asked"]]
    assert paths == ["/schedule", "/schedule"]
    assert {q["durationSeconds"] for _, q in out["asked"]} == {str(gpu_seconds(20, baseline=True))}
    for name, reason in (("no GPU", "No GPU was available"), ("quota", "reached its GPU limit")):
        count, status, ended = out["shown"][name]
        assert count == 1 and ended, name
        assert status.startswith("**No GPU now**") and reason in status, status
        assert "cpu\\-embedded\\-emma\\-woodhouse" in status  # the recorded run of this example
    assert out["calls"] == 2


# --------------------------------------------------------------------------- hub downloads

CACHE = """
import os
from pathlib import Path
def cache(repo, files, commit="0123456789abcdef0123456789abcdef01234567"):
    root = Path(os.environ["HF_HOME"]) / "hub" / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    for name, text in files.items():
        (root / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
        (root / "snapshots" / commit / name).write_text(text)
"""


def test_a_hub_pair_needs_a_download_unless_its_files_are_in_the_local_cache(tmp_path):
    """The decision, from the real hub cache layout in a temporary HF_HOME, read by
    huggingface_hub itself; offline nothing is fetched and the load fails as before."""
    out = run_python(CACHE + """
from app.pairs import get_pair, needs_download
from app.settings import ModelLoadError
from app.presets import PRESETS, CPU_SPACE_PAIR
p = PRESETS[CPU_SPACE_PAIR]
repos = [p.target, p.draft]
steps = {"empty": needs_download(repos)}
cache(p.draft, {"config.json": "{}", "model.safetensors": "x"})
steps["draft cached"] = needs_download(repos)
index = '{"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}'
cache(p.target, {"config.json": "{}", "model.safetensors.index.json": index, "model-1.safetensors": "x"})
steps["one shard of two"] = needs_download(repos)
cache(p.target, {"model-2.safetensors": "x"})
steps["all shards"] = needs_download(repos)
cache("someone/no-weights", {"config.json": "{}"})
steps["config alone"] = needs_download("someone/no-weights")
heard = []
try:
    get_pair("qwen2.5-1.5b / 0.5b", device="cpu", progress=heard.append)
    failed = None
except ModelLoadError as exc:
    failed = str(exc)
print(json.dumps({"steps": steps, "failed": failed, "heard": heard, "target": p.target, "draft": p.draft}))
""", HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    target, draft = out["target"], out["draft"]
    assert out["steps"] == {"empty": [target, draft], "draft cached": [target], "one shard of two": [target],
                            "all shards": [], "config alone": ["someone/no-weights"]}
    assert "needs a download but HF_HUB_OFFLINE=1" in out["failed"] and "\n" not in out["failed"]
    assert out["heard"] == []  # offline: no "downloading ..." promised


def test_the_download_bar_says_what_and_how_much_even_when_disabled():
    """huggingface_hub disables its bars without a terminal (a Space's server): the bar still
    counts the bytes and reports each tenth, named after the download."""
    from app.pairs import progress_bar
    heard = []
    bar = progress_bar("downloading org/model (20 MB)", heard.append)(total=20_000_000, unit="B", disable=True)
    for _ in range(8):
        bar.update(2_500_000)
    assert heard == [f"downloading org/model (20 MB): {mb} of 20 MB" for mb in (2, 5, 8, 10, 12, 15, 18, 20)]
    files = progress_bar("x", heard.append)(total=3, unit="it", disable=True)
    files.update(3)
    assert len(heard) == 8  # a bar of files is not bytes: said once, by the label
