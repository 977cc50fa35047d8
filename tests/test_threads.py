"""torch's CPU thread count reaches every thread that times forwards (app.timing.same_threads).

OpenMP keeps the count per thread, so torch.set_num_threads(1) in the main thread leaves a later
thread on every core while torch.get_num_threads() there still says 1. What OpenMP will use is
read here from the OpenMP runtime torch loaded (omp_get_max_threads)."""
import ctypes
import os
import threading

import pytest
import torch

from app.timing import same_threads
from app.ui import stream, turns


def openmp():
    libs = [line.split()[-1] for line in open("/proc/self/maps")
            if line.rstrip().endswith((".so", ".so.1")) and ("gomp" in line or "iomp" in line)]
    if not libs:
        pytest.skip("torch is not linked against an OpenMP runtime here")
    return ctypes.CDLL(libs[0])


@pytest.fixture
def one_thread():
    """torch.set_num_threads(1) in this (the main) thread, on a machine with more cores."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs at least 2 CPU cores to tell 1 thread from the default")
    omp = openmp()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield omp
    torch.set_num_threads(before)


def in_new_thread(fn):
    box = []
    t = threading.Thread(target=lambda: box.append(fn()))
    t.start()
    t.join()
    return box[0]


def test_a_new_thread_ignores_set_num_threads_until_same_threads(one_thread):
    omp = one_thread
    assert in_new_thread(omp.omp_get_max_threads) > 1  # the trap: OpenMP's per-thread default
    assert in_new_thread(lambda: (same_threads(), omp.omp_get_max_threads())[1]) == 1


def test_the_decode_thread_and_device_turns_use_torchs_count(one_thread):
    omp = one_thread
    decode = stream.in_background(omp.omp_get_max_threads() for _ in range(1))  # runs in its thread
    assert list(decode) == [1]

    def in_turn():
        with turns.turn("cpu-test-threads"):
            return omp.omp_get_max_threads()
    assert in_new_thread(in_turn) == 1
