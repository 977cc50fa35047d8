"""The lessons decode through app.runner.timed_decode (issue 36's one path): the fast path is
readied before the clock starts, as engine.run does, and greedy text is the same with and
without speculation."""
import time

import pytest

from app import fastpath, runner
from app.lessons.common import decode, plain_and_speculative
from app.settings import DecodeSettings

PROMPT = "It is a truth"
pytestmark = pytest.mark.usefixtures("one_thread")


def built_at_clock(pair, monkeypatch) -> list[tuple[bool, bool]]:
    """Run one fast, int8-draft timed_decode from scratch; at every clock read, whether the
    target's lean runner and the draft's int8 one existed."""
    for runners in fastpath._lean.values():  # as if this process had never run these models
        for model in (pair.target, pair.draft):
            runners.pop(model, None)
    seen = []

    class Clock:
        def perf_counter(self):
            seen.append((pair.target in fastpath._lean[False], pair.draft in fastpath._lean[True]))
            return time.perf_counter()
    monkeypatch.setattr(runner, "time", Clock())
    ids = pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    runner.timed_decode(pair, ids, DecodeSettings(gamma=2, max_new_tokens=6, fast=True, draft_int8=True))
    return seen


def test_timed_decode_readies_the_fast_path_before_its_clock(tiny_pair, monkeypatch):
    assert built_at_clock(tiny_pair, monkeypatch)[0] == (True, True)
    monkeypatch.setattr(runner, "prepare_fast_path", lambda pair, settings: None)  # the control
    assert built_at_clock(tiny_pair, monkeypatch)[0] == (False, False)


def test_lessons_decode_plain_and_speculative_alike(tiny_pair):
    ids = tiny_pair.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    settings = DecodeSettings(gamma=3, max_new_tokens=10)
    runs = plain_and_speculative(tiny_pair, ids, settings, repeats=3)
    assert runs["plain"].seconds.n == runs["speculative"].seconds.n == 3
    assert runs["plain"].run.ids == runs["speculative"].run.ids == decode(tiny_pair, ids, settings).ids
    assert runs["plain"].run.drafted == 0 and runs["speculative"].run.drafted > 0
