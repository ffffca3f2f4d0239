"""The TTS order across units: first sentences ahead of later ones, a bounded number at once."""

from __future__ import annotations

import threading
import time

from pipelines.speech_order import SpeechOrder


def test_a_waiting_first_sentence_goes_before_later_sentences_that_came_earlier():
    order = SpeechOrder(slots=1)
    admitted: list[str] = []
    release = threading.Event()

    def speak(name: str, first: bool) -> None:
        with order.turn(first=first) as ok:
            assert ok
            admitted.append(name)
            if name == "busy":
                release.wait(10)

    busy = threading.Thread(target=speak, args=("busy", False))
    busy.start()
    while not admitted:
        time.sleep(0.01)
    later = [threading.Thread(target=speak, args=(f"later{i}", False)) for i in range(2)]
    for t in later:
        t.start()
        time.sleep(0.05)  # the later sentences queue first
    first = threading.Thread(target=speak, args=("first", True))
    first.start()
    time.sleep(0.1)
    release.set()
    for t in [busy, first, *later]:
        t.join(10)
    assert admitted == ["busy", "first", "later0", "later1"]


def test_no_more_than_the_slots_synthesize_at_once():
    order = SpeechOrder(slots=2)
    inside = 0
    most = 0
    lock = threading.Lock()

    def speak() -> None:
        nonlocal inside, most
        with order.turn(first=False):
            with lock:
                inside += 1
                most = max(most, inside)
            time.sleep(0.05)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=speak) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert most == 2


def test_a_sentence_cancelled_while_waiting_gives_up_its_place():
    order = SpeechOrder(slots=1)
    cancel = threading.Event()
    result: list[bool] = []
    with order.turn(first=True):
        waiter = threading.Thread(target=lambda: result.append(order.turn(first=True, cancel=cancel).__enter__()))
        waiter.start()
        time.sleep(0.1)
        cancel.set()
        waiter.join(5)
    assert result == [False]
    with order.turn(first=False) as ok:  # nothing leaked: the slot is free
        assert ok
