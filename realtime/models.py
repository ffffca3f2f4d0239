"""Records of every session, what was said in it and how fast it was answered; and the cluster's nodes."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


def upsert(model: type[models.Model], keys: dict[str, object], fields: dict[str, object]) -> None:
    """Inserts the row identified by ``keys`` (its primary key or a unique constraint) with ``fields``,
    or updates those fields where it exists.

    One statement (``INSERT ... ON CONFLICT DO UPDATE``), not ``update_or_create``'s read then write:
    on SQLite that transaction fails at once with "database is locked" when another thread is
    writing, where a single statement waits for its turn.
    """
    names = {field.attname: field.name for field in model._meta.concrete_fields}  # "session_id" -> "session"
    unique = [names[key] for key in keys]
    model._default_manager.bulk_create([model(**keys, **fields)], update_conflicts=True,
                                       unique_fields=unique, update_fields=list(fields))


class EndReason(models.TextChoices):
    ACTIVE = "active", "Still active"
    CLIENT_CLOSED = "client_closed", "Client closed"
    SERVER_CLOSED = "server_closed", "Server closed"
    REJECTED = "rejected", "Rejected (no free unit)"
    ERROR = "error", "Error"
    ADMIN_ENDED = "admin_ended", "Ended by an admin"
    INTERRUPTED = "interrupted", "Interrupted by a crash"


class RealtimeSession(models.Model):
    """One WebSocket session, from connect to close; rejected connections too."""

    id = models.CharField(primary_key=True, max_length=64)
    node = models.CharField(max_length=200, db_index=True)
    unit_index = models.IntegerField(null=True, blank=True)
    model = models.CharField(max_length=200, blank=True)
    principal = models.CharField("who", max_length=200, blank=True, db_index=True,
                                 help_text="The API key or user that opened the session.")
    client_addr = models.CharField(max_length=100, blank=True)
    user_agent = models.CharField(max_length=500, blank=True)
    started_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=32, choices=EndReason.choices, default=EndReason.ACTIVE, db_index=True)
    close_code = models.IntegerField(null=True, blank=True)
    turns = models.IntegerField(default=0)
    errors = models.IntegerField(default=0)
    audio_in_seconds = models.FloatField(default=0.0)
    audio_out_seconds = models.FloatField(default=0.0)
    # Filled by the post-session Celery task (realtime.tasks.summarize_session).
    summary = models.JSONField(null=True, blank=True)
    summarized_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        permissions = [("end_live_session", "Can end a live session")]

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
    voice_to_voice_s = models.FloatField(null=True, blank=True,
                                         help_text="From the end of the user's speech to the first audio sent back.")
    finished_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "finished_at"]
        constraints = [models.UniqueConstraint(fields=["session", "response_id"], name="unique_response_per_session")]

    def __str__(self) -> str:
        return self.response_id


class Node(models.Model):
    """A server process with its pool, as its last heartbeat described it."""

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

    def __str__(self) -> str:
        return self.name

    @property
    def alive(self) -> bool:
        """Heartbeat seen within S2S_NODE_TIMEOUT_S and not stopped or reaped."""
        if self.gone or self.stopped_at is not None:
            return False
        return self.heartbeat_at >= timezone.now() - timedelta(seconds=settings.S2S_NODE_TIMEOUT_S)


from realtime.auth_models import ApiKey, ClientSecret  # noqa: E402,F401  (issue 6: API keys, client secrets)
