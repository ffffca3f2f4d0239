"""Writes session records off the audio path, on a thread of its own.

The consumer only enqueues; a slow or unavailable database delays the records,
never an audio delta. Writes that fail are retried until they succeed, so
nothing is lost while the database is down.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections

logger = logging.getLogger(__name__)

Write = Callable[[], None]


class RecordWriter:
    def __init__(self, retry_s: float = 1.0) -> None:
        self._queue: queue.Queue[Write] = queue.Queue()
        self._retry_s = retry_s
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.failures = 0

    def submit(self, write: Write) -> None:
        with self._lock:
            self._idle.clear()
            self._queue.put(write)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="record-writer", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                write = self._queue.get(timeout=5)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            while True:
                try:
                    close_old_connections()
                    write()
                    break
                except Exception:
                    self.failures += 1
                    logger.exception("writing a session record failed; retrying in %.1fs", self._retry_s)
                    time.sleep(self._retry_s)
            if self._queue.empty():
                self._idle.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Waits until every submitted write is done (tests and shutdown)."""
        return self._idle.wait(timeout)


writer = RecordWriter()


def session_started(session_id: str, **fields: Any) -> None:
    from realtime.models import RealtimeSession

    writer.submit(lambda: RealtimeSession.objects.update_or_create(id=session_id, defaults=fields))


def session_ended(session_id: str, **fields: Any) -> None:
    from realtime.models import RealtimeSession

    writer.submit(lambda: RealtimeSession.objects.filter(id=session_id).update(**fields))
