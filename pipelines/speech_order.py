"""Orders sentence synthesis across units: each response's first sentence goes first.

Units share the CPU (or GPU) for TTS. Without an order, a unit speaking the
fifth sentence of a long answer competes with a unit about to speak the first
sentence of a new one, and that session's first audio waits. ``SpeechOrder``
lets at most ``slots`` sentences be synthesized at once; waiting first
sentences are admitted before later ones, then in arrival order.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pipelines.interfaces import Cancel

WAIT_S = 0.05


class SpeechOrder:
    def __init__(self, slots: int = 1) -> None:
        self.slots = max(1, slots)
        self._busy = 0
        self._waiting: list[tuple[int, int]] = []  # (0 first sentence / 1 later, arrival)
        self._arrivals = itertools.count()
        self._cond = threading.Condition()
        self.admitted_first = 0
        self.admitted_later = 0

    @contextmanager
    def turn(self, first: bool, cancel: Cancel | None = None) -> Iterator[bool]:
        """Waits for a slot (first sentences ahead of later ones) and holds it for the block.

        Yields False, holding no slot, when ``cancel`` (anything with ``is_set()``) is set while waiting.
        """
        admitted = self._acquire((0 if first else 1, next(self._arrivals)), cancel)
        try:
            yield admitted
        finally:
            if admitted:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _acquire(self, ticket: tuple[int, int], cancel: Cancel | None) -> bool:
        with self._cond:
            heapq.heappush(self._waiting, ticket)
            while self._busy >= self.slots or self._waiting[0] != ticket:
                if cancel is not None and cancel.is_set():
                    self._waiting.remove(ticket)
                    heapq.heapify(self._waiting)
                    self._cond.notify_all()
                    return False
                self._cond.wait(WAIT_S)
            heapq.heappop(self._waiting)
            self._busy += 1
            if ticket[0] == 0:
                self.admitted_first += 1
            else:
                self.admitted_later += 1
            self._cond.notify_all()
            return True
