"""Records of every session, what was said in it and how fast it was answered; and the cluster's nodes."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timedelta
from typing import Any

import psutil
from django.conf import settings
from django.db import models
from django.db.models import OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from realtime.auth_models import ApiKey, ClientSecret
from realtime.prompt_models import Prompt, PromptVersion
from realtime.recording_models import Recording
from realtime.supervision_models import SupervisorAction, SupervisorActionKind

__all__ = [
    "ApiKey",
    "ClientSecret",
    "ConversationItem",
    "EndReason",
    "Node",
    "Prompt",
    "PromptVersion",
    "RealtimeSession",
    "Recording",
    "RefusalCount",
    "ResponseRecord",
    "SupervisorAction",
    "SupervisorActionKind",
    "TransportKind",
    "upsert",
]


def upsert(model: type[models.Model], keys: dict[str, object], fields: dict[str, object]) -> None:
    """Inserts the row identified by ``keys`` (its primary key or a unique constraint) with ``fields``,
    or updates those fields where it exists.

    One statement (``INSERT ... ON CONFLICT DO UPDATE``), not ``update_or_create``'s read then write:
    on SQLite that transaction fails at once with "database is locked" when another thread is
    writing, where a single statement waits for its turn.
    """
    names = {field.attname: field.name for field in model._meta.concrete_fields}  # "session_id" -> "session"
    unique = [names[key] for key in keys]
    model._default_manager.bulk_create(
        [model(**keys, **fields)], update_conflicts=True, unique_fields=unique, update_fields=list(fields)
    )


class EndReason(models.TextChoices):
    ACTIVE = "active", "Still active"
    CLIENT_CLOSED = "client_closed", "Client closed"
    SERVER_CLOSED = "server_closed", "Server closed"
    REJECTED = "rejected", "Rejected (no free unit)"
    ERROR = "error", "Error"
    ADMIN_ENDED = "admin_ended", "Ended by an admin"
    INTERRUPTED = "interrupted", "Interrupted by a crash"


class Stage(models.TextChoices):
    """The measured stages of a turn, the whole first: each is a ``ResponseRecord`` field (:attr:`field`),
    a ``/metrics`` label, a key of the session summary and of the page's timings, and a row in the admin."""

    VOICE_TO_VOICE = "voice_to_voice", "End of speech to first audio"
    STT = "stt", "Speech to text"
    LM_FIRST_TOKEN = "lm_first_token", "LM first token"
    TTS_FIRST_AUDIO = "tts_first_audio", "TTS first audio"

    @property
    def field(self) -> str:
        """Its ``ResponseRecord`` field, in seconds (also the key of ``ResponseFinished.latencies``)."""
        return f"{self.value}_s"


# A typed turn has no end of speech to time from: its response is timed from the response.create to the first
# audio sent, kept in the response's ``breakdown`` under this key and summarized under ``TYPED_LATENCY``.
REQUEST_TO_AUDIO = "request_to_audio_s"
TYPED_LATENCY = "request_to_audio"


class TransportKind(models.TextChoices):
    """Which carrier a session came through, as its record keeps it (the interface a carrier implements is
    :class:`realtime.live.transport.Transport`)."""

    WEBSOCKET = "websocket", "WebSocket"
    WEBRTC = "webrtc", "WebRTC"
    SIP = "sip", "SIP"


class SessionQuerySet(models.QuerySet["RealtimeSession"]):
    def open_on(self, node: str) -> SessionQuerySet:
        return self.filter(node=node, end_reason=EndReason.ACTIVE)

    def interrupt(self, node: str, before: datetime, at: datetime | None = None) -> int:
        """Marks the node's sessions still open (and started before ``before``) as interrupted by a crash."""
        return (
            self.open_on(node)
            .filter(started_at__lt=before)
            .update(end_reason=EndReason.INTERRUPTED, ended_at=at or timezone.now())
        )

    def interrupt_left_open(self, node: str, before: datetime) -> int:
        """At start: closes the sessions an earlier, crashed run of this node left open.

        "This node" is the same name (set ``S2S_NODE_NAME`` to something stable in a
        deployment), or, with the default ``host:pid`` names, a process on this host
        that no longer runs. Nodes elsewhere are reaped by their missing heartbeat
        (:meth:`NodeQuerySet.reap_dead`).
        """
        stale = {node}
        local = self.filter(end_reason=EndReason.ACTIVE, node__startswith=f"{socket.gethostname()}:")
        for name in local.values_list("node", flat=True).distinct():
            pid = name.rpartition(":")[2]
            if pid.isdigit() and int(pid) != os.getpid() and not psutil.pid_exists(int(pid)):
                stale.add(name)
        return sum(self.interrupt(name, before=before) for name in stale)

    def older_than(self, days: int) -> SessionQuerySet:
        return self.filter(started_at__lt=timezone.now() - timedelta(days=days))

    def with_user_messages(self) -> SessionQuerySet:
        """Each session with ``n_user_messages``, its user items counted in a subquery of their own: a join the
        query gains later (the admin's search in the transcript) cannot multiply the count."""
        user_items = (
            ConversationItem.objects.filter(session=OuterRef("pk"), role="user")
            .order_by()
            .values("session")
            .annotate(n=models.Count("pk"))
            .values("n")
        )
        return self.annotate(n_user_messages=Coalesce(Subquery(user_items, output_field=models.IntegerField()), 0))


class CallDirection(models.TextChoices):
    INBOUND = "inbound", "inbound"
    OUTBOUND = "outbound", "outbound"


class RealtimeSession(models.Model):
    """One session (over a WebSocket or a WebRTC call), from connect to close; rejected connections too."""

    objects = SessionQuerySet.as_manager()
    n_user_messages: int  # not a field: on the sessions of SessionQuerySet.with_user_messages() only

    id = models.CharField(primary_key=True, max_length=64)
    node = models.CharField(max_length=200, db_index=True)
    unit_index = models.IntegerField(null=True, blank=True)
    model = models.CharField(max_length=200, blank=True, help_text="The model the client asked for.")
    engines = models.CharField(max_length=500, blank=True, help_text="The models that answered, in words.")
    principal = models.CharField(
        "who", max_length=200, blank=True, db_index=True, help_text="The API key or user that opened the session."
    )
    # Who may reach it and read its records (realtime.access.owner): the hash of the credential that opened it
    # (or accepted its call) and that credential's API key; neither: staff alone.
    owner_credential = models.CharField(max_length=64, blank=True, editable=False)
    owner_key = models.ForeignKey(
        "realtime.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    client_addr = models.CharField(max_length=100, blank=True)
    transport = models.CharField(
        max_length=16, choices=TransportKind.choices, default=TransportKind.WEBSOCKET, db_index=True
    )
    user_agent = models.CharField(max_length=500, blank=True)
    # A phone call's numbers, as S2S_SIP_NUMBERS allows (full, the last four digits, or nothing).
    caller = models.CharField(max_length=100, blank=True)
    callee = models.CharField(max_length=100, blank=True)
    # Which way a phone call went (blank: not a phone call) and, for a call the agent placed, how it went: its status
    # (realtime.transports.sip.dialling.STATUSES), why it ended (sip_486, ring_timeout, callee_hung_up, ...) and
    # the final SIP answer to its INVITE.
    direction = models.CharField(max_length=8, choices=CallDirection.choices, blank=True, db_index=True)
    call_status = models.CharField(max_length=16, blank=True)
    call_end_reason = models.CharField(max_length=32, blank=True)
    sip_code = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=32, choices=EndReason.choices, default=EndReason.ACTIVE, db_index=True)
    close_code = models.IntegerField(null=True, blank=True)
    turns = models.IntegerField(default=0)
    errors = models.IntegerField(default=0)
    unit_rebuild = models.CharField(
        max_length=200, blank=True, help_text="Why its unit was rebuilt when the session ended (it could not drain)."
    )
    audio_in_seconds = models.FloatField(default=0.0)
    audio_out_seconds = models.FloatField(default=0.0)
    # Filled by the post-session Celery task (realtime.tasks.summarize_session).
    summary = models.JSONField(null=True, blank=True)
    summarized_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        permissions = [
            ("end_live_session", "Can end a live session"),
            ("place_outbound_call", "Can place an outbound phone call"),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def duration_s(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


class ConversationItem(models.Model):
    """A message of a session's conversation: what the user said (transcript) or the assistant answered."""

    session = models.ForeignKey(RealtimeSession, on_delete=models.CASCADE, related_name="items")
    seq = models.IntegerField(help_text="Order within the session.")
    item_id = models.CharField(max_length=64)
    role = models.CharField(max_length=16)
    text = models.TextField(blank=True)
    audio_ms = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "seq"]
        constraints = [models.UniqueConstraint(fields=["session", "item_id"], name="unique_item_per_session")]

    def __str__(self) -> str:
        return f"{self.role}: {self.text[:60]}"


class ResponseRecord(models.Model):
    """One response of the assistant: its outcome, tokens and per-stage latencies (seconds)."""

    session = models.ForeignKey(RealtimeSession, on_delete=models.CASCADE, related_name="responses")
    response_id = models.CharField(max_length=64)
    item_id = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, db_index=True)
    reason = models.CharField(max_length=200, blank=True)
    input_tokens = models.IntegerField(default=0)
    output_tokens = models.IntegerField(default=0)
    audio_ms = models.IntegerField(default=0)
    stt_s = models.FloatField(null=True, blank=True)
    lm_first_token_s = models.FloatField(null=True, blank=True)
    tts_first_audio_s = models.FloatField(null=True, blank=True)
    voice_to_voice_s = models.FloatField(
        null=True, blank=True, help_text="From the end of the user's speech to the first audio sent back."
    )
    breakdown = models.JSONField(
        default=dict,
        blank=True,
        help_text="Where the turn's time went, span by span (seconds; pipelines/timeline.py).",
    )
    finished_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "finished_at"]
        constraints = [models.UniqueConstraint(fields=["session", "response_id"], name="unique_response_per_session")]

    def __str__(self) -> str:
        return self.response_id


class RefusalQuerySet(models.QuerySet["RefusalCount"]):
    def add(self, minute: datetime, node: str, reason: str, close_code: int, count: int) -> None:
        """Adds ``count`` refusals to the row of that minute (one writer per node: no two race on a row)."""
        key = {"minute": minute, "node": node, "reason": reason}
        if not self.filter(**key).update(count=models.F("count") + count):
            self.create(**key, close_code=close_code, count=count)

    def older_than(self, days: int) -> RefusalQuerySet:
        return self.filter(minute__lt=timezone.now() - timedelta(days=days))


class RefusalCount(models.Model):
    """Connections that never became a session, counted per minute, node and reason (not one row each:
    a client that retries in a loop must not be able to fill the disk)."""

    objects = RefusalQuerySet.as_manager()

    minute = models.DateTimeField(db_index=True)
    node = models.CharField(max_length=200)
    reason = models.CharField(max_length=64, help_text="The error code the client was sent.")
    close_code = models.IntegerField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-minute", "reason"]
        constraints = [models.UniqueConstraint(fields=["minute", "node", "reason"], name="one_count_per_minute")]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.reason}: {self.count}"


class NodeQuerySet(models.QuerySet["Node"]):
    def reap_dead(self, now: datetime, timeout_s: float) -> list[str]:
        """Marks nodes whose heartbeat stopped as gone, their slots as gone and their open sessions as interrupted.

        Only the reaper whose UPDATE flips the row interrupts the sessions: another
        process may be reaping the same node at the same time.
        """
        cutoff = now - timedelta(seconds=timeout_s)
        reaped = []
        for node in self.filter(gone=False, heartbeat_at__lt=cutoff):
            slots = [{**slot, "state": "gone"} for slot in node.slots]
            if (
                self.filter(name=node.name, gone=False, heartbeat_at=node.heartbeat_at).update(
                    gone=True, slots=slots, free_units=0, admitting=False
                )
                != 1
            ):
                continue
            RealtimeSession.objects.interrupt(node.name, before=now, at=node.heartbeat_at)
            reaped.append(node.name)
        return reaped

    def forgotten(self, after: timedelta) -> NodeQuerySet:
        """Nodes not heard of for longer than ``after``: history, not state."""
        return self.filter(heartbeat_at__lt=timezone.now() - after)


class Node(models.Model):
    """A server process with its pool, as its last heartbeat described it."""

    objects = NodeQuerySet.as_manager()

    name = models.CharField(primary_key=True, max_length=200)
    host = models.CharField(max_length=200, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    profile = models.CharField(max_length=32, blank=True)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField(db_index=True)
    stopped_at = models.DateTimeField(null=True, blank=True, help_text="Set on a clean shutdown.")
    gone = models.BooleanField(default=False, help_text="Its heartbeat stopped; its slots are gone.")
    warm = models.BooleanField(default=False)
    admitting = models.BooleanField(default=False)
    free_units = models.IntegerField(default=0)
    rejections = models.IntegerField(default=0)
    slots = models.JSONField(default=list, help_text="The pool's snapshot: one entry per unit.")

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "slot board"

    def __str__(self) -> str:
        return self.name

    @property
    def alive(self) -> bool:
        """Heartbeat seen within S2S_NODE_TIMEOUT_S and not stopped or reaped."""
        if self.gone or self.stopped_at is not None:
            return False
        return self.heartbeat_at >= timezone.now() - timedelta(seconds=settings.S2S_NODE_TIMEOUT_S)

    @property
    def status(self) -> str:
        """stopped, gone, warming, draining, full (admitting, no unit free) or ready: as its ``/readyz`` says."""
        if self.stopped_at is not None:
            return "stopped"
        if not self.alive:
            return "gone"
        if not self.warm:
            return "warming"
        if not self.admitting:
            return "draining"
        return "ready" if self.free_units > 0 else "full"

    def board_row(self) -> dict[str, Any]:
        """The node and its slots as the slot board and ``pool_status`` show them, with ages computed now."""
        now = time.time()
        alive = self.alive
        slots = []
        for slot in self.slots:
            state = slot["state"] if alive else "gone"
            since = slot.get("since")
            slots.append(
                {
                    **slot,
                    "state": state,
                    "for_s": round(max(0.0, now - float(since)), 1) if since and state == "busy" else None,
                }
            )
        return {
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "profile": self.profile,
            "alive": alive,
            "status": self.status,
            "heartbeat_at": self.heartbeat_at.isoformat(),
            "heartbeat_age_s": round((timezone.now() - self.heartbeat_at).total_seconds(), 1),
            "started_at": self.started_at.isoformat(),
            "free_units": self.free_units if alive else 0,
            "rejections": self.rejections,
            "slots": slots,
        }
