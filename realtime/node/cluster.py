"""Every server process publishes its slots; the admin and ``pool_status`` read them all.

Each process (node, ``S2S_NODE_NAME``) runs a heartbeat thread that writes its
pool's read-only snapshot to the shared database every ``S2S_HEARTBEAT_S``
seconds, sooner when a session starts or ends. A node whose heartbeat is older
than ``S2S_NODE_TIMEOUT_S`` is shown as gone; ``Node.objects.reap_dead`` (run by a
Celery beat task) marks it gone and its open sessions interrupted.

Ending a live session goes through the channel layer to the group named after
the session (or its API key, or its call), which only the session's mailbox has
joined, on whichever process holds it. Controlling a call held elsewhere
(accept, reject, refer) is a request and its reply: the request names a channel
of the asker's own, and the holder sends its answer there.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from pipelines.pool import PipelinePool
from realtime.models import Node, upsert
from s2s_project.celery import app as celery_app

logger = logging.getLogger(__name__)

# The messages a live session's mailbox (``realtime.live.mailbox``) is sent, by type.
END_SESSION = "session.end"
KEY_REVOKED = "key.revoked"
CALL_CONTROL = "call.control"
CALL_CONTROL_ANSWER = "call.control.answer"
# A supervisor on another node (realtime.live.remote_supervision): asked of the session's and the call's groups,
# answered on the asker's channel; then frames and leaving to the session's mailbox, events back to the asker.
SUPERVISE_JOIN = "supervise.join"
SUPERVISE_JOINED = "supervise.joined"
SUPERVISE_FRAME = "supervise.frame"
SUPERVISE_LEAVE = "supervise.leave"
SUPERVISE_EVENT = "supervise.event"
SUPERVISE_CLOSE = "supervise.close"
ANSWER_TIMEOUT_S = 2.0  # sending a control answer back (the asker waits longer for the whole round)


def session_group(session_id: str) -> str:
    """The channel-layer group of one live session (letters, digits, ``_``, ``-`` and ``.`` only)."""
    return f"s2s.session.{session_id}"


def key_group(api_key_id: int) -> str:
    """The group of every live session opened with one API key (or a client secret it minted), on any node."""
    return f"s2s.key.{api_key_id}"


def call_group(call_id: str) -> str:
    """The group of one live call (WebRTC, SIP): a hang-up that reached another process finds it there."""
    return f"s2s.call.{call_id}"


def end_key_sessions(api_key_id: int) -> None:
    """Ends every live session of a revoked or deleted key and closes every follower that came with it (or a
    secret it minted), wherever they run; never raises (a key is revoked in the database whether or not the
    channel layer answers)."""
    layer = get_channel_layer()
    if layer is None:
        logger.error("API key %s revoked, but no channel layer is configured to end its live sessions", api_key_id)
        return
    try:
        async_to_sync(layer.group_send)(key_group(api_key_id), {"type": KEY_REVOKED, "api_key_id": api_key_id})
    except Exception:
        logger.exception("API key %s revoked, but its live sessions could not be told", api_key_id)


async def control_elsewhere(
    call_id: str, action: str, body: dict[str, Any], caller: dict[str, Any], timeout_s: float
) -> dict[str, Any] | None:
    """Asks whichever process holds ``call_id`` to run a control ``action`` (accept, reject, refer) with the
    request's ``body`` for ``caller`` (a :meth:`realtime.access.owner.Caller.as_message`: the holder
    decides, as it would locally), and waits up to ``timeout_s`` for its answer (a
    :meth:`realtime.live.transport.ControlAnswer.as_message`). None: no channel layer, or nobody answered
    in time (no process holds the call). Raises what the channel layer raises (Redis away)."""
    layer = get_channel_layer()
    if layer is None:
        return None
    reply_to = await layer.new_channel()
    request = {"type": CALL_CONTROL, "action": action, "body": body, "caller": caller, "reply_to": reply_to}
    await layer.group_send(call_group(call_id), request)
    try:
        return await asyncio.wait_for(layer.receive(reply_to), timeout_s)
    except TimeoutError:
        return None


async def answer_control(request: dict[str, Any], answer: dict[str, Any]) -> None:
    """Sends the answer to a :data:`CALL_CONTROL` request back to the channel it names (a request without one
    is only logged: nobody waits for it)."""
    reply_to = request.get("reply_to")
    layer = get_channel_layer()
    if not isinstance(reply_to, str) or not reply_to or layer is None:
        logger.warning("a call control request without a channel to answer on: dropped")
        return
    await asyncio.wait_for(layer.send(reply_to, {**answer, "type": CALL_CONTROL_ANSWER}), ANSWER_TIMEOUT_S)


def end_session(session_id: str, reason: str = "") -> None:
    """Asks whichever process holds ``session_id`` to end it (fire and forget; a session gone already is a no-op)."""
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer is configured")
    async_to_sync(layer.group_send)(session_group(session_id), {"type": END_SESSION, "reason": reason})


# --- publishing ---------------------------------------------------------------


def publish(pool: PipelinePool | None, started_at: datetime, stopping: bool = False) -> None:
    """Writes this node's row: pool state and slots, stamped now."""
    now = timezone.now()
    slots = pool.snapshot() if pool is not None else []
    upsert(
        Node,
        {"name": settings.S2S_NODE_NAME},
        {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "profile": settings.S2S_POOL.profile,
            "started_at": started_at,
            "heartbeat_at": now,
            "stopped_at": now if stopping else None,
            "gone": False,
            "warm": bool(pool and pool.warm),
            "admitting": bool(pool and pool.admitting) and not stopping,
            "free_units": sum(1 for slot in slots if slot["state"] == "idle"),
            "rejections": pool.rejections if pool is not None else 0,
            "slots": slots,
        },
    )


class Heartbeat:
    """The thread that keeps this node's row current (and, without a Celery broker, runs the beat schedule)."""

    def __init__(
        self,
        pool: Callable[[], PipelinePool | None],
        started_at: datetime,
        interval_s: float,
        on_beat: Callable[[], None] | None = None,
    ) -> None:
        self.pool = pool
        self.on_beat = on_beat  # work that rides along each beat (the refusal counts)
        self.interval_s = interval_s
        self.started_at = started_at
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._due: dict[str, float] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="node-heartbeat", daemon=True)
        self._thread.start()

    def nudge(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                close_old_connections()
                publish(self.pool(), self.started_at)
                if self.on_beat is not None:
                    self.on_beat()
                if settings.S2S_EMBEDDED_BEAT:
                    self._run_due_tasks()
            except Exception:
                logger.exception("node %s: heartbeat failed", settings.S2S_NODE_NAME)
            self._wake.wait(self.interval_s)
            time.sleep(0.05)  # coalesce a burst of nudges into one write
        try:  # on this thread: the ORM may not be called from an event loop (ASGI lifespan)
            publish(self.pool(), self.started_at, stopping=True)
        except Exception:
            logger.exception("node %s: could not publish its shutdown", settings.S2S_NODE_NAME)

    def _run_due_tasks(self) -> None:
        """A minimal beat for single-process setups without a broker: runs each schedule entry when due."""
        if not self._due:  # the first round: Celery discovers tasks lazily, so register them before any lookup
            celery_app.loader.import_default_modules()
        now = time.monotonic()
        for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
            if now < self._due.get(name, 0.0):
                continue
            self._due[name] = now + float(entry["schedule"])
            try:
                celery_app.tasks[entry["task"]].apply()
            except Exception:
                logger.exception("embedded beat: %s failed", entry["task"])


def board() -> list[dict[str, Any]]:
    """Every node's slots as the admin and ``pool_status`` show them."""
    return [node.board_row() for node in Node.objects.all()]
