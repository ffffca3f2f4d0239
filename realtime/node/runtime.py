"""The process's parts and their one lifecycle, used by every launcher (``manage.py serve`` and the ASGI lifespan).

:class:`Runtime` holds what lives as long as the process: the record writer,
the metrics, the pipeline pool (built in the background so the probes answer
while the models load), the heartbeat and the live sessions. ``start()`` and
``drain()``/``stop()`` are the only places that start or stop them. Like
channels' ``ChannelLayerManager`` it is made on first use and can be reset
(tests).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.utils import timezone

from pipelines.errors import ModelLoadError
from pipelines.factory import build_pool, synthetic_turn
from pipelines.pool import PipelinePool
from realtime import tasks
from realtime.access.owner import Owner
from realtime.access.rate import CallLimits
from realtime.audit import records
from realtime.audit.metrics import Metrics
from realtime.models import RealtimeSession
from realtime.node.cluster import Heartbeat

logger = logging.getLogger(__name__)


def raise_open_files_limit() -> int:
    """Lifts this process's soft limit on open files to its hard limit, and returns it.

    Every connection is a file, and a server out of them closes new connections unanswered.
    Many systems start processes with a soft limit of 1024 (or less) under a far higher hard
    one; a server lifts it, as nginx's ``worker_rlimit_nofile`` and Go's runtime do.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        logger.warning("the open-files limit stays at %s (hard limit %s): %s", soft, hard, exc)
        return soft
    logger.info("open-files limit raised from %s to %s", soft, hard)
    return hard


class LiveSession(Protocol):
    async def going_away(self) -> None:
        """Ends the session because the server stops (1001 where the transport can still send it)."""


class LiveCall(Protocol):
    """A call's session (WebRTC, SIP), found by the call id to hang it up (``DELETE /v1/realtime/calls/ID``)."""

    owner: Owner  # who may reach it (realtime.access.owner)

    @property
    def client_addr(self) -> str:
        """The client's address (live calls are capped per address)."""

    async def hang_up(self) -> None:
        """Ends the call's session and closes its connection."""


class Listener(Protocol):
    """A listener of its own (SIP) that lives on the server's event loop, beside the ASGI app."""

    @property
    def up(self) -> bool:
        """Whether its sockets are open (``/readyz`` is 503 while one is not)."""

    async def start(self, runtime: Runtime) -> None: ...

    async def stop(self) -> None: ...


class Runtime:
    def __init__(self) -> None:
        self.started_at = timezone.now()
        self.writer = records.RecordWriter(max_backlog=settings.S2S_RECORD_BACKLOG)
        self.metrics = Metrics(settings.S2S_NODE_NAME, lambda: self.pool, self.writer)
        self.refusals = records.RefusalTally(self.writer, settings.S2S_NODE_NAME)
        self.pool: PipelinePool | None = None
        self.start_error: str | None = None
        self.heartbeat: Heartbeat | None = None
        self.sessions: set[LiveSession] = set()
        self.call_limits = CallLimits()  # offers per second and live calls, per client address and API key
        self.calls: dict[str, LiveCall] = {}  # live calls' sessions by call id (they are in ``sessions`` too)
        self.listeners: list[Listener] = []
        self.started = False
        self._lock = threading.Lock()

    # --- start --------------------------------------------------------------------

    def start(
        self,
        warm: bool = True,
        background: bool = True,
        listeners: Sequence[Listener] = (),
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> threading.Thread | None:
        """Closes what a crashed earlier run left open, starts the heartbeat, then loads and warms the pool,
        and starts ``listeners`` on ``loop`` (the server's: running, or about to; default the running one).

        In the background the server answers probes (and turns sessions away with a
        clear error) while the models load. A second call does nothing.
        """
        with self._lock:
            if self.started:
                return None
            self.started = True
        started_at = self.started_at
        raise_open_files_limit()
        self.writer.submit(lambda: self._interrupt_left_open(started_at))  # once the database answers
        self.heartbeat = Heartbeat(lambda: self.pool, started_at, settings.S2S_HEARTBEAT_S, on_beat=self.refusals.flush)
        self.heartbeat.start()
        self.listeners = list(listeners)
        for listener in self.listeners:
            started = asyncio.run_coroutine_threadsafe(listener.start(self), loop or asyncio.get_running_loop())
            started.add_done_callback(_report_listener_failure)
        if not background:
            self._load(warm)
            return None
        thread = threading.Thread(target=self._load, args=(warm,), name="pool-start", daemon=True)
        thread.start()
        return thread

    @staticmethod
    def _interrupt_left_open(started_at: datetime) -> None:
        count = RealtimeSession.objects.interrupt_left_open(settings.S2S_NODE_NAME, before=started_at)
        if count:
            logger.warning("marked %s session(s) left open by a crashed run as interrupted", count)

    def _load(self, warm: bool) -> None:
        try:
            pool = build_pool(settings.S2S_POOL, progress=lambda text: logger.info("pool: %s", text))
            self.pool = pool
            timings = pool.start(synthetic_turn if warm else None, progress=lambda text: logger.info("pool: %s", text))
            for index, unit_timings in timings.items():
                logger.info(
                    "pool: unit %s warm: %s", index, ", ".join(f"{k}={v * 1000:.0f}ms" for k, v in unit_timings.items())
                )
            logger.info("pool: %s units ready (%s profile)", len(pool.units), settings.S2S_POOL.profile)
        except ModelLoadError as exc:  # a setting or an install the operator must fix: the message says which
            self.start_error = f"{type(exc).__name__}: {exc}"
            logger.error("the pipeline pool failed to start: %s", exc)
        except Exception as exc:
            self.start_error = f"{type(exc).__name__}: {exc}"
            logger.exception("the pipeline pool failed to start")
        self.nudge()

    def install(self, pool: PipelinePool | None) -> None:
        """Makes ``pool`` the process's pool (tests install pools they built themselves)."""
        self.pool = pool

    # --- sessions -------------------------------------------------------------------

    def session_started(self, session: LiveSession | None, session_id: str, **fields: object) -> None:
        """Records a session (or a refused connection, ``session`` None) and republishes the slots."""
        if session is not None:
            self.sessions.add(session)
        fields.setdefault("engines", settings.S2S_POOL.describe())
        records.session_started(self.writer, session_id, **fields)
        self.nudge()

    def session_refused(self, reason: str, close_code: int) -> bool:
        """Counts a connection that never became a session (no row of its own); True: the first of its
        reason this minute."""
        self.metrics.count_refusal(reason)
        return self.refusals.add(reason, close_code, timezone.now())

    def session_ended(self, session: LiveSession, session_id: str, **fields: object) -> None:
        """Closes the session's record, queues its summary once the record is written, republishes the slots."""
        self.sessions.discard(session)
        records.session_ended(self.writer, session_id, **fields)
        self.writer.submit(lambda: tasks.queue_summary(session_id))
        self.nudge()

    def nudge(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.nudge()

    # --- stop -----------------------------------------------------------------------

    async def drain(self, grace_s: float) -> None:
        """Stops admitting, waits up to ``grace_s`` for live sessions, ends the rest as the server's doing,
        and flushes the records."""
        if self.pool is not None:
            self.pool.stop_admitting()
        self.nudge()
        logger.info("shutting down: no new sessions; %s live session(s) get up to %.0fs", len(self.sessions), grace_s)
        deadline = time.monotonic() + grace_s
        while self.sessions and time.monotonic() < deadline:  # noqa: ASYNC110  (the runtime outlives any one loop)
            await asyncio.sleep(0.1)
        try:
            left = list(self.sessions)
            await asyncio.gather(*(session.going_away() for session in left), return_exceptions=True)
            if left:
                logger.info("ended %s session(s) after the grace period", len(left))
                await asyncio.sleep(0.2)  # let the close frames go out
            for listener in self.listeners:
                await listener.stop()
            self.refusals.flush()
            if not await asyncio.to_thread(self.writer.flush, 10.0):
                logger.error("shutting down with %s session record(s) unwritten", self.writer.backlog)
        except Exception:
            logger.exception("the graceful shutdown failed; stopping anyway")

    def stop(self) -> None:
        """Stops the heartbeat (it publishes the stop) and the pool's threads, then writes what is left."""
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None
        if self.pool is not None:
            self.pool.shutdown()
        self.refusals.flush()
        self.writer.flush(10.0)


def _report_listener_failure(started: Future[None]) -> None:
    """A listener that could not start (its port taken, say) is logged: nobody awaits its start."""
    if not started.cancelled() and started.exception() is not None:
        logger.error("a listener failed to start: %s", started.exception())


_current: Runtime | None = None
_current_lock = threading.Lock()


def current() -> Runtime:
    """This process's runtime, made on first use."""
    global _current
    with _current_lock:
        if _current is None:
            _current = Runtime()
        return _current
