"""The process's cores as the units share them: who is computing now, and how many threads an LM step may take.

Each unit's engines get a fixed share of the cores (``engines.compute_threads``: one thread on two cores
with a pool of two or more), so that several sessions answering at once never oversubscribe the machine.
A lone talker then leaves a core idle through the part of the turn that decides how soon it is heard: the
LM's prompt and first words, while the STT is done and the TTS waits for them. :class:`CoreShare` counts
the compute stages at work (STT, LM, TTS of every unit, ``busy``) and lets an LM step take every core while
it is the only one (``lm_threads``).

Two threads of llama.cpp that cannot both run are much slower than one: its threads meet at a spinning
barrier after every operator, so a thread waiting for a core holds the other up (measured on the 2-core
machine: 57 ms a token on two threads when quiet, 489 ms when another process held a core, against 101 ms
on one). The machine is not only ours, so every core is taken only while no other thread of the machine
waits to run (``runnable_elsewhere``), and the choice is checked against what it measures: each step's time
per thread count (``observe``); every core that measured slower than the share is left alone for a while.

Several sessions answering at once share the cores *in order* (``core``, on unless ``ordered`` is off): at most
one compute step (a transcription, an LM token or prompt chunk, a piece of synthesis) per core runs at a time,
and a free core goes to the most urgent step waiting. A step's urgency is the moment by which its work is
needed (``serving``, set by the unit for each message its stage thread handles; the session's
``SessionContext.urgency`` says when): the end of the user's speech for the work towards an answer's first
audio; the rest of the answer ``NEXT_PIECE_S`` later; once a reply is playing, the moment its audio sent so far
runs out, less ``PLAYING_RESERVE_S``; for speculative reading ahead (partial transcripts, the words so far into
the LM's cache), long after its arrival. Left to the kernel, four answers on two cores shared them evenly and
all came late together; in order, the answers due first get the cores and the others wait whole
(docs/benchmarks.md, the breakdown).
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
# before then (other answers' first words go first until that moment). 1.0 s left four talkers' replies a 0.4 s
# gap at p90 after their first words (the next piece made only once the others had theirs); 1.5 s none, for
# about the same first audio (docs/benchmarks.md, the breakdown of 2026-12-04).
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


def _owner() -> int:
    """Whose work this thread does: its ``serving`` owner's, else its own."""
    owner = getattr(_thread, "owner", None)
    return id(owner) if owner is not None else -threading.get_ident()


class _Waiter:
    """A step waiting for a core: when it is due (read anew at each look), its place in arrival, its owner."""

    __slots__ = ("urgency", "arrival", "owner")

    def __init__(self, urgency: Callable[[], float] | None, arrival: int, owner: int) -> None:
        self.urgency, self.arrival, self.owner = urgency, arrival, owner
        if urgency is None:
            came = time.monotonic()
            self.urgency = lambda: came

    def due(self) -> float:
        return self.urgency()  # type: ignore[misc]

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
        waiter = _Waiter(getattr(_thread, "urgency", None), next(self._arrivals), _owner())
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
            if threads == self.cores and share is not None:
                if seconds > STALL_RATIO * share or (everything is not None and everything > share):
                    # Slower again soon after the last time: tried again twice as late (up to a minute).
                    again = self._slower_at.get(self.cores)
                    recent = again is not None and time.monotonic() - again < 2 * self._retry_s
                    self._retry_s = min(MAX_RETRY_S, self._retry_s * 2) if recent else RETRY_S
                    self._slower_at[self.cores] = time.monotonic()
                    self._step_s.pop(self.cores, None)  # measured afresh when tried again

    def step_seconds(self) -> dict[int, float]:
        """The moving average of an LM step's seconds, by thread count (for the logs and the tests)."""
        with self._lock:
            return dict(self._step_s)


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
