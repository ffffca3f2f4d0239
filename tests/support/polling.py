"""Waiting for a condition in tests that drive other processes: polled, bounded in time."""

from __future__ import annotations

import time
from typing import Any


def wait_for(check: Any, timeout: float = 10.0, interval: float = 0.1, what: str = "condition") -> Any:
    """Polls ``check()`` until it returns something truthy, and returns that (bounded in time)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"{what} not met in {timeout}s (last: {last!r})")
