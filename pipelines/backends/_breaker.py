"""A circuit breaker: after repeated failures, stop calling an engine for a while."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class CircuitOpenError(RuntimeError):
    """The engine failed repeatedly; calls are refused until the cool-down ends."""


class CircuitBreaker:
    """Closed: calls go through. ``failures`` failures in a row open it: calls are
    refused at once for ``cooldown_s`` (doubling on each failed trial, up to
    ``max_cooldown_s``). After the cool-down one trial call goes through
    (half-open); its success closes the breaker, its failure reopens it.
    """

    def __init__(
        self,
        name: str,
        failures: int = 3,
        cooldown_s: float = 5.0,
        max_cooldown_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.threshold = max(1, failures)
        self.base_cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._cooldown_s = cooldown_s
        self._open_until: float | None = None
        self._trial = False

    @property
    def state(self) -> str:
        with self._lock:
            if self._open_until is None:
                return "closed"
            return "half_open" if self._clock() >= self._open_until else "open"

    def before_call(self) -> None:
        """Raises ``CircuitOpenError`` while open, or while another caller holds the half-open trial."""
        with self._lock:
            if self._open_until is None:
                return
            left = self._open_until - self._clock()
            if left > 0 or self._trial:
                raise CircuitOpenError(
                    f"{self.name} is unavailable after {self._failures} failed call(s) in a row; "
                    f"not calling it for another {max(left, 0.0):.1f} s"
                )
            self._trial = True

    def succeeded(self) -> None:
        with self._lock:
            self._failures, self._open_until, self._trial = 0, None, False
            self._cooldown_s = self.base_cooldown_s

    def failed(self) -> None:
        with self._lock:
            self._failures += 1
            if self._trial:  # the trial failed: wait longer this time
                self._cooldown_s = min(self._cooldown_s * 2, self.max_cooldown_s)
            if self._trial or self._failures >= self.threshold:
                self._open_until = self._clock() + self._cooldown_s
            self._trial = False
