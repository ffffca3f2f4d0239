"""The process's pipeline pool: built and started by the launcher, read by the consumer and the probes."""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import datetime

from django.conf import settings

from pipelines.factory import build_pool, synthetic_turn
from pipelines.pool import PipelinePool
from realtime import records

logger = logging.getLogger(__name__)

_pool: PipelinePool | None = None
_lock = threading.Lock()
_starting: threading.Thread | None = None
start_error: str | None = None


def get_pool() -> PipelinePool | None:
    return _pool


def install(pool: PipelinePool | None) -> None:
    """Makes ``pool`` the process's pool (tests install pools they built themselves)."""
    global _pool
    with _lock:
        _pool = pool


def start(background: bool = True, warm: bool = True) -> threading.Thread | None:
    """Loads the models, builds the pool from settings and warms every unit.

    In the background the server can answer probes (and turn sessions away with
    a clear error) while the models load.
    """
    global _starting

    def run() -> None:
        global start_error
        try:
            pool = build_pool(settings.S2S_POOL, progress=lambda text: logger.info("pool: %s", text))
            install(pool)
            timings = pool.start(synthetic_turn if warm else None, progress=lambda text: logger.info("pool: %s", text))
            for index, unit_timings in timings.items():
                logger.info("pool: unit %s warm: %s", index,
                            ", ".join(f"{k}={v * 1000:.0f}ms" for k, v in unit_timings.items()))
            logger.info("pool: %s units ready (%s profile)", len(pool.units), settings.S2S_POOL.profile)
        except Exception as exc:
            start_error = f"{type(exc).__name__}: {exc}"
            logger.exception("the pipeline pool failed to start")

    if not background:
        run()
        return None
    _starting = threading.Thread(target=run, name="pool-start", daemon=True)
    _starting.start()
    return _starting


def stop() -> None:
    pool = get_pool()
    if pool is not None:
        pool.shutdown()


def interrupt_stale_sessions(started_at: datetime) -> None:
    """At start: marks sessions an earlier, crashed run of this node left open as interrupted.

    "This node" is the same ``S2S_NODE_NAME`` (set it to something stable in a
    deployment), or, with the default ``host:pid`` names, a process on this host
    that no longer runs. Nodes elsewhere are reaped by their missing heartbeat
    (``realtime.cluster.reap_dead_nodes``). The write goes through the record
    writer, so it happens once the database answers.
    """
    records.writer.submit(lambda: _interrupt_stale_sessions(started_at))


def _interrupt_stale_sessions(started_at: datetime) -> None:
    import psutil

    from realtime.cluster import interrupt_sessions
    from realtime.models import EndReason, RealtimeSession

    stale = {settings.S2S_NODE_NAME}
    local = RealtimeSession.objects.filter(end_reason=EndReason.ACTIVE, node__startswith=f"{socket.gethostname()}:")
    for node in local.values_list("node", flat=True).distinct():
        pid = node.rpartition(":")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not psutil.pid_exists(int(pid)):
            stale.add(node)
    count = sum(interrupt_sessions(node, before=started_at) for node in stale)
    if count:
        logger.warning("marked %s session(s) left open by a crashed run as interrupted", count)
