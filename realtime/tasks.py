"""Background work (Celery): never on the audio path. Each task is a small function tests can call directly."""

from __future__ import annotations

import logging
import math
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from realtime.models import REQUEST_TO_AUDIO, TYPED_LATENCY, ClientSecret, Node, RealtimeSession, RefusalCount, Stage

logger = logging.getLogger(__name__)

FORGET_NODES_AFTER = timedelta(days=1)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(session_id: str) -> dict[str, Any] | None:
    """Latency percentiles per stage and word counts per role, from the session's records."""
    session = RealtimeSession.objects.filter(id=session_id).first()
    if session is None:
        return None
    responses = list(session.responses.all())
    latency: dict[str, dict[str, float | int | None]] = {}
    for stage in Stage:
        values = [getattr(r, stage.field) for r in responses if getattr(r, stage.field) is not None]
        latency[stage.value] = {
            "count": len(values),
            "p50": _round(percentile(values, 50)),
            "p90": _round(percentile(values, 90)),
            "p99": _round(percentile(values, 99)),
            "max": _round(max(values) if values else None),
        }
    typed = [r.breakdown[REQUEST_TO_AUDIO] for r in responses if REQUEST_TO_AUDIO in (r.breakdown or {})]
    latency[TYPED_LATENCY] = {
        "count": len(typed),
        **{f"p{q}": _round(percentile(typed, q)) for q in (50, 90, 99)},
        "max": _round(max(typed, default=None)),
    }
    words: dict[str, int] = {}
    for role, text in session.items.values_list("role", "text"):
        words[role] = words.get(role, 0) + len(text.split())
    statuses: dict[str, int] = {}
    for response in responses:
        statuses[response.status] = statuses.get(response.status, 0) + 1
    return {
        "latency_s": latency,
        "words": words,
        "responses": statuses,
        "output_tokens": sum(r.output_tokens for r in responses),
        "input_tokens": sum(r.input_tokens for r in responses),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@shared_task(
    name="realtime.tasks.summarize_session",
    autoretry_for=(OperationalError, InterfaceError),
    max_retries=5,
    retry_backoff=True,
)
def summarize_session(session_id: str) -> dict[str, Any] | None:
    """After a session ends: computes its summary onto the record."""
    summary = summarize(session_id)
    if summary is not None:
        RealtimeSession.objects.filter(id=session_id).update(summary=summary, summarized_at=timezone.now())
    return summary


@shared_task(name="realtime.tasks.purge_old_sessions")
def purge_old_sessions() -> int:
    """Deletes sessions (with their items and responses) older than S2S_RETENTION_DAYS, long-gone nodes,
    and expired client secrets (with the session settings they carried)."""
    _, per_model = RealtimeSession.objects.older_than(settings.S2S_RETENTION_DAYS).delete()
    deleted = per_model.get(RealtimeSession._meta.label, 0)
    Node.objects.forgotten(FORGET_NODES_AFTER).delete()
    RefusalCount.objects.older_than(settings.S2S_RETENTION_DAYS).delete()
    secrets, _ = ClientSecret.objects.expired().delete()
    if secrets:
        logger.info("retention: deleted %s expired client secrets", secrets)
    if deleted:
        logger.info("retention: deleted %s sessions older than %s days", deleted, settings.S2S_RETENTION_DAYS)
    return deleted


@shared_task(name="realtime.tasks.reap_dead_nodes")
def reap_dead_nodes() -> list[str]:
    """Nodes whose heartbeat stopped: marked gone, their sessions interrupted."""
    reaped = Node.objects.reap_dead(timezone.now(), settings.S2S_NODE_TIMEOUT_S)
    for name in reaped:
        logger.warning("node %s: no heartbeat; marked gone and its open sessions interrupted", name)
    return reaped


def queue_summary(session_id: str) -> None:
    """Queues the post-session summary; a broker that is down costs the summary, never the caller."""
    try:
        summarize_session.delay(session_id)
    except Exception:
        logger.exception("session %s: could not queue its summary", session_id)
