"""Records of every session (issue: audit builds on these)."""

from __future__ import annotations

from django.db import models


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

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return self.id
