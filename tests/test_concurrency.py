"""Many users at once: 20 gradio_client sessions against one in-process server (127.0.0.1, free
port, the app's own queue: one decode at a time, at most QUEUE_MAX waiting).

Checked: every waiting session is told its queue position (rank / queue_size in the job
status, what the browser shows as "queue: n/m"); every session completes with the same greedy
output as a single client; the server runs exactly one decode per request (nothing lost or
repeated); a full queue turns the next request away; and a second wave of 20 sessions leaves
the server's memory (VmRSS) within RSS_BOUND_MB and no decode thread or cancel flag behind.
Bounded: every wait has a timeout; the module takes ~30 s on 2 CPU cores.
"""
import gc
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from gradio_client import Client
from gradio_client.utils import Status

from app import annotate
from app.ui import QUEUE_MAX, handlers
from tests.support import STREAM, TEXT, SUMMARY, FAKE_CEILINGS, free_port, wait_until

N = 20
RSS_BOUND_MB = 64  # growth allowed over a second wave of N sessions (measured: see the report)
END = 'id="stream-end"'
ARGS = ("It is a truth universally acknowledged", "embedded", "model", 3, "fixed", 0.0, 1.0, 0, 0,
        6, "cpu", False, False)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    pytest.skip("no /proc/self/status")


@pytest.fixture(scope="module")
def server(tiny_pair):
    """state.gate: while cleared, a decode waits in the loader (at most 60 s), so the queue
    behind it can be inspected; state.loads counts decodes that reached the loader."""
    from app.ui import build_demo
    state = SimpleNamespace(loads=0, gate=threading.Event(), lock=threading.Lock())
    state.gate.set()

    def loader(preset, device="auto", dtype="auto", ngram=False, progress=None):
        with state.lock:
            state.loads += 1
        state.gate.wait(timeout=60)
        return tiny_pair

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(annotate, "ceilings", lambda device, dtype, progress=None: FAKE_CEILINGS)
        demo = build_demo(loader)  # the app's queue: default_concurrency_limit=1, max_size=QUEUE_MAX
        port = free_port()
        demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
        state.url = f"http://127.0.0.1:{port}/"
        yield state
        state.gate.set()
        demo.close()


def make_clients(url: str, n: int, download_dir) -> list[Client]:
    make = lambda _: Client(url, analytics_enabled=False, verbose=False, download_files=str(download_dir))
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(make, range(n)))


def close_all(clients) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda c: c.close(), clients))


@pytest.fixture(scope="module")
def reference(server, tmp_path_factory):
    """The greedy output of one client alone."""
    client = make_clients(server.url, 1, tmp_path_factory.mktemp("ref"))[0]
    try:
        return client.predict(*ARGS, api_name="/decode")
    finally:
        client.close()


@pytest.fixture(scope="module")
def first_wave(server, reference, tmp_path_factory):
    """N sessions submit at once while the first decode is held in the loader: the other N - 1
    wait in the queue and report their positions; then the gate opens and all run."""
    clients = make_clients(server.url, N, tmp_path_factory.mktemp("wave1"))
    loads, started = server.loads, time.monotonic()
    server.gate.clear()
    try:
        jobs = [c.submit(*ARGS, api_name="/decode") for c in clients]
        def settled():  # the held decode is in the loader, every other one has a position
            queued = [s for s in (j.status() for j in jobs) if s.code == Status.IN_QUEUE]
            return (server.loads == loads + 1 and len(queued) == N - 1
                    and sorted(s.rank for s in queued) == list(range(N - 1)))
        wait_until(settled, 30)
        statuses = [j.status() for j in jobs]
    finally:
        server.gate.set()
    last = max(range(N), key=lambda i: statuses[i].rank if statuses[i].code == Status.IN_QUEUE else -1)
    ranks = []  # what the last in line is told while the queue drains
    deadline = time.monotonic() + 120
    while not jobs[last].done() and time.monotonic() < deadline:
        status = jobs[last].status()
        if status.code == Status.IN_QUEUE and (not ranks or ranks[-1] != status.rank):
            ranks.append(status.rank)
        time.sleep(0.02)
    results = [j.result(timeout=120) for j in jobs]
    wave = SimpleNamespace(statuses=statuses, results=results, jobs=jobs, last_ranks=ranks,
                           loads=server.loads - loads, seconds=time.monotonic() - started)
    close_all(clients)
    return wave


def test_waiting_sessions_see_their_queue_position(first_wave):
    queued = [s for s in first_wave.statuses if s.code == Status.IN_QUEUE]
    assert len(queued) == N - 1, [s.code for s in first_wave.statuses]
    assert sorted(s.rank for s in queued) == list(range(N - 1))  # 0 = next in line
    # queue_size: the queue's length when the status was sent (on joining, here)
    assert all(s.queue_size >= s.rank + 1 for s in queued) and max(s.queue_size for s in queued) == N - 1
    # the last in line sees its position count down as the sessions ahead finish
    ranks = first_wave.last_ranks
    assert ranks[0] == N - 2 and ranks == sorted(ranks, reverse=True) and len(ranks) >= N // 2, ranks


def test_every_session_completes_with_the_single_client_output(first_wave, reference):
    assert first_wave.loads == N, "each request must run exactly one decode"
    for job, result in zip(first_wave.jobs, first_wave.results):
        assert END in result[STREAM] and len(job.outputs()) >= 2  # streamed, then ended
        assert result[TEXT] == reference[TEXT] and result[STREAM] == reference[STREAM]
        assert result[SUMMARY]["new_tokens"] == reference[SUMMARY]["new_tokens"] == ARGS[9]
    assert first_wave.seconds < 90


def test_a_full_queue_turns_the_next_request_away(server, tmp_path_factory):
    clients = make_clients(server.url, 3, tmp_path_factory.mktemp("full"))
    loads = server.loads
    server.gate.clear()
    try:
        blocker = clients[0].submit(*ARGS, api_name="/decode")
        assert wait_until(lambda: server.loads == loads + 1, 30), "the first decode never started"
        waiting = [clients[1 + i % 2].submit(*ARGS, api_name="/decode") for i in range(QUEUE_MAX)]
        assert wait_until(lambda: sum(j.status().code == Status.IN_QUEUE for j in waiting) == QUEUE_MAX, 30)
        extra = clients[1].submit(*ARGS, api_name="/decode")
        with pytest.raises(Exception, match="(?i)queue is full"):
            extra.result(timeout=30)
        for job in waiting:  # leave: removed from the queue, never run
            job.cancel()
    finally:
        server.gate.set()
    assert END in blocker.result(timeout=60)[STREAM]
    time.sleep(0.5)
    assert server.loads == loads + 1, "cancelled queued requests were still run"
    close_all(clients)


def test_second_wave_keeps_memory_bounded(server, first_wave, reference, tmp_path_factory):
    gc.collect()
    before = rss_mb()
    clients = make_clients(server.url, N, tmp_path_factory.mktemp("wave2"))
    with ThreadPoolExecutor(max_workers=N) as pool:  # N sessions at once, one thread each
        results = list(pool.map(lambda c: c.predict(*ARGS, api_name="/decode"), clients))
    close_all(clients)
    del clients
    gc.collect()
    growth = rss_mb() - before
    print(f"\nVmRSS {before:.0f} MB before the second wave, growth {growth:+.1f} MB")
    assert all(r[TEXT] == reference[TEXT] for r in results)
    assert growth < RSS_BOUND_MB, f"the server grew by {growth:.0f} MB over {N} sessions"
    assert wait_until(lambda: not [t for t in threading.enumerate() if t.name == "speclab-decode"], 10)
    assert not handlers._cancels, "cancel flags of finished sessions were kept"
