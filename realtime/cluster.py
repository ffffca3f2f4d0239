"""Every server process publishes its slots; the admin and ``pool_status`` read them all.

Each process (node, ``S2S_NODE_NAME``) runs a heartbeat thread that writes its
pool's read-only snapshot to the shared database every ``S2S_HEARTBEAT_S``
seconds, sooner when a session starts or ends. A node whose heartbeat is older
than ``S2S_NODE_TIMEOUT_S`` is shown as gone; :func:`reap_dead_nodes` (a Celery
beat task) marks it gone and its open sessions interrupted.

Ending a live session goes through the channel layer to the group named after
the session, which only the consumer holding it has joined, on whichever
process that is.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from realtime import runtime

logger = logging.getLogger(__name__)

END_SESSION = "session.end"


def session_group(session_id: str) -> str:
    """The channel-layer group of one live session (letters, digits, ``_``, ``-`` and ``.`` only)."""
    return f"s2s.session.{session_id}"


def end_session(session_id: str, reason: str = "") -> None:
    """Asks whichever process holds ``session_id`` to end it (fire and forget; a session gone already is a no-op)."""
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer is configured")
    async_to_sync(layer.group_send)(session_group(session_id), {"type": END_SESSION, "reason": reason})


# --- publishing ---------------------------------------------------------------


def publish(started_at: datetime, stopping: bool = False) -> None:
    """Writes this node's row: pool state and slots, stamped now."""
    from realtime.models import Node, upsert

    pool = runtime.get_pool()
    now = timezone.now()
    slots = pool.snapshot() if pool is not None else []
    upsert(Node, {"name": settings.S2S_NODE_NAME}, {
        "host": socket.gethostname(), "pid": os.getpid(), "profile": settings.S2S_POOL.profile,
        "started_at": started_at, "heartbeat_at": now, "stopped_at": now if stopping else None, "gone": False,
        "warm": bool(pool and pool.warm), "admitting": bool(pool and pool.admitting) and not stopping,
        "free_units": sum(1 for slot in slots if slot["state"] == "idle"),
        "rejections": pool.rejections if pool is not None else 0,
        "slots": slots,
    })


def interrupt_sessions(node: str, before: datetime, at: datetime | None = None) -> int:
    """Marks the node's sessions still open (and started before ``before``) as interrupted by a crash."""
    from realtime.models import EndReason, RealtimeSession

    return RealtimeSession.objects.filter(node=node, end_reason=EndReason.ACTIVE, started_at__lt=before).update(
        end_reason=EndReason.INTERRUPTED, ended_at=at or timezone.now())


def reap_dead_nodes(now: datetime | None = None) -> list[str]:
    """Marks nodes whose heartbeat stopped as gone, their slots as gone and their open sessions as interrupted."""
    from realtime.models import Node

    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.S2S_NODE_TIMEOUT_S)
    reaped = []
    for node in Node.objects.filter(gone=False, heartbeat_at__lt=cutoff):
        slots = [{**slot, "state": "gone"} for slot in node.slots]
        # Only the reaper that flips the row interrupts the sessions (another process may race us).
        if Node.objects.filter(name=node.name, gone=False, heartbeat_at=node.heartbeat_at).update(
                gone=True, slots=slots, free_units=0, admitting=False) != 1:
            continue
        count = interrupt_sessions(node.name, before=now, at=node.heartbeat_at)
        logger.warning("node %s: no heartbeat since %s; marked gone, %s session(s) interrupted",
                       node.name, node.heartbeat_at.isoformat(), count)
        reaped.append(node.name)
    return reaped


class Heartbeat:
    """The thread that keeps this node's row current (and, without a Celery broker, runs the beat schedule)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.started_at = timezone.now()
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
        try:
            close_old_connections()
            # Sessions left open under this name by an earlier process of the same name died with it.
            count = interrupt_sessions(settings.S2S_NODE_NAME, before=self.started_at)
            if count:
                logger.warning("node %s: %s session(s) of a previous run marked interrupted", settings.S2S_NODE_NAME, count)
        except Exception:
            logger.exception("node %s: could not close a previous run's sessions", settings.S2S_NODE_NAME)
        while not self._stop.is_set():
            self._wake.clear()
            try:
                close_old_connections()
                publish(self.started_at)
                if settings.S2S_EMBEDDED_BEAT:
                    self._run_due_tasks()
            except Exception:
                logger.exception("node %s: heartbeat failed", settings.S2S_NODE_NAME)
            self._wake.wait(self.interval_s)
            time.sleep(0.05)  # coalesce a burst of nudges into one write
        try:  # on this thread: the ORM may not be called from an event loop (ASGI lifespan)
            publish(self.started_at, stopping=True)
        except Exception:
            logger.exception("node %s: could not publish its shutdown", settings.S2S_NODE_NAME)

    def _run_due_tasks(self) -> None:
        """A minimal beat for single-process setups without a broker: runs each schedule entry when due."""
        from s2s_project.celery import app

        if not self._due:  # the first round: Celery discovers tasks lazily, so register them before any lookup
            app.loader.import_default_modules()
        now = time.monotonic()
        for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
            if now < self._due.get(name, 0.0):
                continue
            self._due[name] = now + float(entry["schedule"])
            try:
                app.tasks[entry["task"]].apply()
            except Exception:
                logger.exception("embedded beat: %s failed", entry["task"])


_heartbeat: Heartbeat | None = None


def start_heartbeat() -> Heartbeat:
    global _heartbeat
    _heartbeat = Heartbeat(settings.S2S_HEARTBEAT_S)
    _heartbeat.start()
    return _heartbeat


def stop_heartbeat() -> None:
    global _heartbeat
    if _heartbeat is not None:
        _heartbeat.stop()
        _heartbeat = None


def nudge() -> None:
    """Publishes soon (a session started or ended); a no-op where no heartbeat runs (tests, commands)."""
    if _heartbeat is not None:
        _heartbeat.nudge()


# --- reading --------------------------------------------------------------------


def board() -> list[dict[str, Any]]:
    """Every node's slots as the admin and ``pool_status`` show them, with ages computed now."""
    from realtime.models import Node

    now = time.time()
    nodes = []
    for node in Node.objects.all():
        alive = node.alive
        slots = []
        for slot in node.slots:
            state = slot["state"] if alive else "gone"
            since = slot.get("since")
            slots.append({**slot, "state": state,
                          "for_s": round(max(0.0, now - float(since)), 1) if since and state == "busy" else None})
        nodes.append({"name": node.name, "host": node.host, "pid": node.pid, "profile": node.profile, "alive": alive,
                      "status": _node_status(node, alive), "heartbeat_at": node.heartbeat_at.isoformat(),
                      "heartbeat_age_s": round((timezone.now() - node.heartbeat_at).total_seconds(), 1),
                      "started_at": node.started_at.isoformat(), "free_units": node.free_units if alive else 0,
                      "rejections": node.rejections, "slots": slots})
    return nodes


def _node_status(node: Any, alive: bool) -> str:
    if node.stopped_at is not None:
        return "stopped"
    if not alive:
        return "gone"
    if not node.warm:
        return "warming"
    return "ready" if node.admitting else "draining"
