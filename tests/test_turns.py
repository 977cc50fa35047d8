"""Device turns (app/ui/turns.py): runs on one device take turns, runs on two devices overlap,
and every device-using event of the app shares the device queue."""
import threading
import time

from app.ui import turns


def overlap(device_a: str, device_b: str) -> tuple[bool, list[str]]:
    """Two threads each hold a turn for 0.2 s; (did they overlap, waiting messages)."""
    inside, most, said = [0], [0], []
    guard = threading.Lock()

    def work(device):
        with turns.turn(device, waiting=said.append):
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.2)
            with guard:
                inside[0] -= 1
    threads = [threading.Thread(target=work, args=(d,)) for d in (device_a, device_b)]
    for t in threads:
        t.start()
        time.sleep(0.05)  # the second arrives while the first holds its device
    for t in threads:
        t.join()
    return most[0] > 1, said


def test_runs_on_one_device_take_turns_and_the_second_is_told_why():
    overlapped, said = overlap("cpu", "cpu")
    assert not overlapped
    assert said == ["waiting for cpu: another decode or lesson is running on it"]
    assert not turns.busy("cpu")


def test_runs_on_two_devices_overlap():
    overlapped, said = overlap("cpu", "cuda")
    assert overlapped and said == []


def test_a_failing_run_gives_its_turn_back():
    try:
        with turns.turn("cpu"):
            raise RuntimeError("lesson failed")
    except RuntimeError:
        pass
    assert not turns.busy("cpu")


def test_decode_and_every_lesson_share_the_device_queue():
    from app.ui import build_demo
    demo = build_demo(lambda *a, **k: None)
    device_events = {f.api_name: f.concurrency_limit for f in demo.fns.values() if f.concurrency_id == turns.DEVICE_QUEUE}
    assert "decode" in device_events and len(device_events) == 1 + 14  # decode, 7 walkthrough + 7 tab lessons
    assert set(device_events.values()) == {turns.device_count()}
    others = [f.api_name for f in demo.fns.values() if f.concurrency_id != turns.DEVICE_QUEUE]
    assert "stop" in others  # stop must never wait behind a decode
