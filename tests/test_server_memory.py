"""The server's memory and disk stay bounded however many API clients come and go.

The app runs in its own process (this module run as a script: `python -m tests.test_server_memory
PORT`, started through app.ui.launch like `python app.py`), so the VmRSS read from /proc is the
server's alone. Gradio keeps state per session (per session hash: every component's config, the
values an event changed, gr.State), and a session of an API client is never closed; the app caps
the sessions kept (SPECLAB_MAX_SESSIONS) and deletes a run's downloads and inspector data after
SPECLAB_KEEP_S seconds. Here both are small, so the tests see the bounds without waiting long.

Each request is one new API client: Client.reset_session() gives the client a new session hash,
which is all the server knows a client by (a new Client would also fetch the config: slower, same
state on the server). Bounded: every wait has a timeout; the module takes ~90 s on 2 busy CPU
cores, most of it the 160 decodes.
"""
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from gradio_client import Client

from tests.support import FAKE_CEILINGS, JSON_FILE, TEXT, free_port, wait_until

REPO = Path(__file__).resolve().parents[1]
WARM_UP, CLIENTS = 40, 120
RSS_BOUND_MB = 12     # growth allowed over CLIENTS more clients once WARM_UP have come and gone
MAX_SESSIONS = 16     # SPECLAB_MAX_SESSIONS of the server under test
KEEP_S = 2            # SPECLAB_KEEP_S of the server under test
ARGS = ("It is a truth universally acknowledged", "embedded", "model", 1, "fixed", 0.0, 1.0, 0, 0,
        4, "cpu", False, False)  # the embedded pair, 4 new tokens, no baseline: the smallest decode


def serve(port: int) -> None:
    """The server of this module's tests (in its own process): the app as `python app.py` runs
    it, with ceilings no pass can beat, so that no decode waits for microbenchmarks."""
    from app import annotate
    from app.ui import build_demo, launch
    fixed = replace(FAKE_CEILINGS, measured_flops_per_s=1e16, measured_bytes_per_s=1e14)
    annotate.ceilings = lambda device, dtype, progress=None: fixed
    launch(build_demo(), server_name="127.0.0.1", server_port=port, quiet=True)


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    except FileNotFoundError:
        pytest.skip("no /proc/<pid>/status")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("server")
    (root / "tmp").mkdir()
    env = dict(os.environ, SPECLAB_DEFAULT_PAIR="embedded", HF_HUB_OFFLINE="1", SPECLAB_THREADS="1",
               SPECLAB_MAX_SESSIONS=str(MAX_SESSIONS), SPECLAB_KEEP_S=str(KEEP_S),
               GRADIO_TEMP_DIR=str(root / "gradio"),  # Gradio's copies of the downloads
               TMPDIR=str(root / "tmp"),              # the app's own export folder
               SPECLAB_CACHE_DIR=str(root / "cache"), GRADIO_ANALYTICS_ENABLED="False")
    port = free_port()
    log = (root / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "tests.test_server_memory", str(port)], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        client = None
        deadline = time.monotonic() + 120
        while client is None and proc.poll() is None and time.monotonic() < deadline:
            try:
                client = Client(url, analytics_enabled=False, verbose=False, download_files=False)
            except Exception:  # noqa: BLE001 - not listening yet
                time.sleep(0.5)
        assert client is not None, f"the server did not start: {(root / 'server.log').read_text()[-2000:]}"
        yield Server(proc, client, root)
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


class Server:
    """The server process, one API client, and the server's temporary folders."""

    def __init__(self, proc, client, root: Path):
        self.proc, self.client, self.root = proc, client, root

    def new_client_decode(self) -> tuple:
        """One decode as a new API client (a new session hash)."""
        self.client.reset_session()
        return self.client.predict(*ARGS, api_name="/decode")

    def gradio_copies(self) -> list[Path]:
        """Gradio's copies of the exports on disk now. os.walk, not rglob: the server's sweep
        deletes folders while this looks, and os.walk skips a folder that vanished."""
        return [Path(folder) / name for folder, _, names in os.walk(self.root / "gradio")
                for name in names if name in ("trace.json", "forwards.csv")]

    def own_exports(self) -> list[Path]:
        return [p for p in (self.root / "tmp").glob("speclab-exports-*/*") if p.is_dir()]


def test_many_api_clients_keep_server_memory_bounded(server):
    started = time.monotonic()
    results = [server.new_client_decode() for _ in range(WARM_UP)]
    before = rss_mb(server.proc.pid)
    results += [server.new_client_decode() for _ in range(CLIENTS)]
    growth = rss_mb(server.proc.pid) - before
    print(f"\nserver VmRSS {before:.0f} MB after {WARM_UP} clients, {growth:+.1f} MB over {CLIENTS} more "
          f"({time.monotonic() - started:.0f} s)")
    assert len({r[TEXT] for r in results}) == 1  # greedy: every client got the same decode
    assert growth <= RSS_BOUND_MB, f"the server grew by {growth:.1f} MB over {CLIENTS} API clients"


def test_exports_older_than_their_age_are_deleted(server):
    """The app's export folders and Gradio's copies of the files (the ones the download buttons
    serve) are deleted once older than SPECLAB_KEEP_S, with no further run needed."""
    result = server.new_client_decode()
    served = Path(result[JSON_FILE]["path"])  # Gradio's copy, the one the download button serves
    assert served.is_file() and served.is_relative_to(server.root / "gradio")
    assert server.own_exports()
    gone = lambda: not server.gradio_copies() and not server.own_exports()  # noqa: E731
    assert wait_until(gone, 10 * KEEP_S, every=0.2), (server.gradio_copies(), server.own_exports())
    result = server.new_client_decode()
    assert Path(result[JSON_FILE]["path"]).is_file(), "a fresh export must still be served"
    assert len(server.own_exports()) == 1


if __name__ == "__main__":
    serve(int(sys.argv[1]))
