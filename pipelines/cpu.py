"""The process's cores as the units share them: who computes now, and how many threads an LM step takes.

:class:`CoreShare` counts the compute stages at work (``busy``) and lets a lone LM step take every core
(``lm_threads``) while no other thread of the machine waits to run, checked against each step's measured time
(``observe``): llama.cpp's threads meet at a spinning barrier, so a core taken by someone else slows every
thread. With ``ordered`` it runs one compute step per core (``core``, ``stepwise``), the one due soonest
first (``serving``: each stage thread's urgency), so that the answers due first get the cores whole.
The measurements behind these choices: docs/benchmarks.md, "Sharing the cores (`pipelines/cpu.py`)".
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

# A step's time is kept as a moving average; a count that measured slower is tried again after this long.
SMOOTHING = 0.3
RETRY_S = 5.0
MAX_RETRY_S = 60.0
# A step this much slower than the share's average on all the cores (a core taken by another process) ends
# their use at once, without waiting for the average.
STALL_RATIO = 2.0
# The rest of an answer, past the first piece on its way to the speaker, is due this long after the end of its
# turn's speech while that first audio is not out: other answers' first words go first.
NEXT_PIECE_S = 0.5
# A reply already playing needs its next words before the audio sent so far runs out: its work is due this much
# before then (other answers' first words go first until that moment; 1.0 s left gaps: docs/benchmarks.md).
PLAYING_RESERVE_S = 1.5
# Reading ahead while the user still speaks is needed only once the turn ends: after everything already due.
BACKGROUND_S = 5.0
# A core a step has just left stays its owner's this long, against less urgent steps: an answer's next step
# (the next token, the first words' synthesis) comes a moment later, and a transcription that took the core
# meanwhile would hold it up for the transcription's whole length.
HOLD_S = 0.015

_thread = threading.local()  # .urgency: Callable[[], float]; .owner: whose work (a session's); .holding: a core


@contextlib.contextmanager
def serving(urgency: Callable[[], float] | None, owner: object = None) -> Iterator[None]:
    """The compute steps this thread takes in the block are due at ``urgency()`` (``time.monotonic()``;
    sooner is more urgent; None: due as they come), and are ``owner``'s work (a session's: its stages' threads
    keep the cores it has just used, ``HOLD_S``)."""
    before = getattr(_thread, "urgency", None), getattr(_thread, "owner", None)
    _thread.urgency, _thread.owner = urgency, owner
    try:
        yield
    finally:
        _thread.urgency, _thread.owner = before


def urgency() -> Callable[[], float]:
    """When this thread's compute steps are due (:func:`serving`; without one, now: due as they come)."""
    found = getattr(_thread, "urgency", None)
    return found if found is not None else _constant(time.monotonic())


def _owner() -> int:
    """Whose work this thread does: its ``serving`` owner's, else its own."""
    owner = getattr(_thread, "owner", None)
    return id(owner) if owner is not None else -threading.get_ident()


def _constant(value: float) -> Callable[[], float]:
    return lambda: value


class _Waiter:
    """A step waiting for a core: when it is due (read anew at each look), its place in arrival, its owner."""

    __slots__ = ("urgency", "arrival", "owner")

    def __init__(self, urgency: Callable[[], float], arrival: int, owner: int) -> None:
        self.urgency = urgency
        self.arrival, self.owner = arrival, owner

    def due(self) -> float:
        return self.urgency()

    def place(self) -> tuple[float, int]:
        return self.due(), self.arrival


class CoreShare:
    """Counts the compute stages at work, and chooses an LM step's threads: ``share`` or every core."""

    def __init__(self, cores: int | None = None, share: int = 1, adaptive: bool = True, ordered: bool = False) -> None:
        self.cores = max(1, cores or os.cpu_count() or 1)
        self.share = max(1, min(share, self.cores))
        self.adaptive = adaptive and self.cores > self.share
        self.ordered = ordered
        self._lock = threading.Lock()
        self._gate = threading.Condition(threading.Lock())
        self._running = 0  # compute steps on a core now (``core``)
        self._waiting: list[_Waiter] = []  # the steps waiting for a core
        self._arrivals = itertools.count()
        self._left: dict[int, tuple[float, float]] = {}  # owner -> (due, when) of its last step, for HOLD_S
        self.steps_waited = 0  # steps that waited for a core (read by the tests)
        self._busy = 0
        self._step_s: dict[int, float] = {}  # threads -> moving average of a step's seconds
        self._slower_at: dict[int, float] = {}  # threads -> when they last measured slower than the other count
        self._retry_s = RETRY_S

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """A compute stage at work for as long as the block runs."""
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1

    @property
    def working(self) -> int:
        return self._busy

    @contextlib.contextmanager
    def core(self) -> Iterator[float]:
        """One compute step on a core, for as long as the block runs; yields the seconds it waited for one.

        With ``ordered``, the step waits while every core runs another step or is kept for a more urgent
        owner's next one (``HOLD_S``); a core that comes free goes to the waiting step due soonest
        (:func:`serving`, read again while it waits: reading ahead becomes urgent once its turn ends), then to
        the one that came first. A step inside another of the same thread runs at once (the core is already
        its thread's).
        """
        if not self.ordered or getattr(_thread, "holding", False):
            yield 0.0
            return
        waiter = _Waiter(urgency(), next(self._arrivals), _owner())
        started = time.monotonic()
        with self._gate:
            self._waiting.append(waiter)
            try:
                if not self._may_run(waiter):
                    self.steps_waited += 1
                    while not self._may_run(waiter):
                        self._gate.wait(HOLD_S)
            finally:  # also when the wait fails: a waiter left in line would stop every other
                self._waiting.remove(waiter)
            self._left.pop(waiter.owner, None)
            self._running += 1
            self._gate.notify_all()  # the next in line may have a core too
        waited = time.monotonic() - started
        _thread.holding = True
        try:
            yield waited
        finally:
            _thread.holding = False
            with self._gate:
                self._running -= 1
                self._left[waiter.owner] = (waiter.due(), time.monotonic())
                self._gate.notify_all()

    def wanted_before(self, due: float) -> bool:
        """Whether a step waiting for a core is due before ``due``: a long step that can stop part-way gives
        way (``ordered`` only; read without the lock, so a hint)."""
        return self.ordered and any(waiter.due() < due for waiter in list(self._waiting))

    def _may_run(self, waiter: _Waiter) -> bool:
        """Whether ``waiter`` takes a core now: it is the first in line (the one due soonest, then the first
        come), and a core is neither running a step nor kept for a more urgent owner that has just left it.
        Called under ``_gate``."""
        first = min(self._waiting, key=_Waiter.place)
        if first is not waiter:
            return False
        now = time.monotonic()
        for owner, (_, at) in list(self._left.items()):
            if now - at >= HOLD_S:
                del self._left[owner]
        due = waiter.due()
        kept = sum(1 for owner, (other, _) in self._left.items() if owner != waiter.owner and other < due)
        return self._running + kept < self.cores

    def lm_threads(self) -> int:
        """The threads for the next LM step: every core while the LM is the only stage at work (its own
        ``busy`` counts one), no other thread on the machine is waiting to run, and every core has not
        measured slower lately; else the share."""
        if not self.adaptive or self._busy > 1:
            return self.share
        slower_at = self._slower_at.get(self.cores)
        if slower_at is not None and time.monotonic() - slower_at < self._retry_s:
            return self.share
        if runnable_elsewhere() > 0:
            return self.share
        return self.cores

    def observe(self, threads: int, seconds: float) -> None:
        """One LM step's time on ``threads`` threads (a token's decode, not the prompt's)."""
        if not self.adaptive:
            return
        with self._lock:
            before = self._step_s.get(threads)
            self._step_s[threads] = seconds if before is None else before + SMOOTHING * (seconds - before)
            everything, share = self._step_s.get(self.cores), self._step_s.get(self.share)
            if (
                threads == self.cores
                and share is not None
                and (seconds > STALL_RATIO * share or (everything is not None and everything > share))
            ):
                # Slower again soon after the last time: tried again twice as late (up to a minute).
                again = self._slower_at.get(self.cores)
                recent = again is not None and time.monotonic() - again < 2 * self._retry_s
                self._retry_s = min(MAX_RETRY_S, self._retry_s * 2) if recent else RETRY_S
                self._slower_at[self.cores] = time.monotonic()
                self._step_s.pop(self.cores, None)  # measured afresh when tried again


def runnable_elsewhere() -> int:
    """Threads on this machine waiting to run besides the caller, now (Linux's ``/proc/loadavg``: its
    fourth field counts the runnable ones, the caller included); 0 where the system does not tell."""
    try:
        with open("/proc/loadavg", "rb") as f:
            running = f.read().split()[3].split(b"/")[0]
        return max(0, int(running) - 1)
    except (OSError, IndexError, ValueError):
        return 0


def stepwise(steps: Iterator[T]) -> Iterator[T]:
    """``steps``, each computed on a core of this process's share (:meth:`CoreShare.core`), none held between."""
    share = current()
    try:
        while True:
            with share.core():
                try:
                    item = next(steps)
                except StopIteration:
                    return
            yield item
    finally:
        close = getattr(steps, "close", None)
        if close is not None:
            close()


_current: CoreShare | None = None


def configure(share: int, adaptive: bool = True, ordered: bool = False) -> CoreShare:
    """This process's core share (engines load it once, with the units' share of the cores)."""
    global _current
    _current = CoreShare(share=share, adaptive=adaptive, ordered=ordered)
    return _current


def current() -> CoreShare:
    """This process's core share; one that never adapts until :func:`configure` is called."""
    global _current
    if _current is None:
        _current = CoreShare(adaptive=False)
    return _current
