"""Pipeline output on its way to a session's send task: a bounded queue that stage threads fill."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pipelines import messages as m


class Outbox:
    """Pipeline output on its way to the session's send task, bounded.

    It exists before the unit is claimed and is the claim's sink, so whatever a unit says,
    even before the session object is made, is queued, never dropped.
    """

    def __init__(self, maxsize: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[m.Outbound] = asyncio.Queue(maxsize=maxsize)
        self.closed = False
        self.on_full: Callable[[], None] = lambda: None

    def sink(self, out: m.Outbound) -> None:
        """Called on stage threads: hops to the event loop."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self._put, out)

    def _put(self, out: m.Outbound) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait(out)
        except asyncio.QueueFull:
            self.on_full()
