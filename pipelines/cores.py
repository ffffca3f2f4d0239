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
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

# A step's time is kept as a moving average; a count that measured slower is tried again after this long.
SMOOTHING = 0.3
RETRY_S = 5.0
MAX_RETRY_S = 60.0
# A step this much slower than the share's average on all the cores (a core taken by another process) ends
# their use at once, without waiting for the average.
STALL_RATIO = 2.0


class CoreShare:
    """Counts the compute stages at work, and chooses an LM step's threads: ``share`` or every core."""

    def __init__(self, cores: int | None = None, share: int = 1, adaptive: bool = True) -> None:
        self.cores = max(1, cores or os.cpu_count() or 1)
        self.share = max(1, min(share, self.cores))
        self.adaptive = adaptive and self.cores > self.share
        self._lock = threading.Lock()
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


_current: CoreShare | None = None


def configure(share: int, adaptive: bool = True) -> CoreShare:
    """This process's core share (engines load it once, with the units' share of the cores)."""
    global _current
    _current = CoreShare(share=share, adaptive=adaptive)
    return _current


def current() -> CoreShare:
    """This process's core share; one that never adapts until :func:`configure` is called."""
    global _current
    if _current is None:
        _current = CoreShare(adaptive=False)
    return _current
