"""API keys and short-lived client secrets. Only hashes are stored.

Keys and secrets are 256-bit random tokens, so a plain SHA-256 is enough to
make a stolen database useless for connecting (a slow password hash protects
low-entropy secrets; these are not). The clear value is shown once, at creation.
"""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.utils import timezone


class ApiKey(models.Model):
    """A key that may open sessions and mint client secrets."""

    name = models.CharField(max_length=200, help_text="Who or what uses the key.")
    prefix = models.CharField(max_length=16, db_index=True, help_text="The key's first characters, to recognise it.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(
        null=True, blank=True, help_text="Set to revoke the key; it stops working at once."
    )
    supervisor = models.BooleanField(
        default=False,
        help_text="May listen to, whisper to, take over and hand back any live session (create_api_key --supervisor).",
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class ClientSecretQuerySet(models.QuerySet):
    def expired(self, now: datetime | None = None) -> ClientSecretQuerySet:
        """Secrets past their expiry: they can open nothing any more (the retention job deletes them)."""
        return self.filter(expires_at__lt=now or timezone.now())


class ClientSecret(models.Model):
    """An ``ek_`` secret for a browser: opens exactly one session before it expires."""

    objects = ClientSecretQuerySet.as_manager()

    secret_hash = models.CharField(max_length=64, unique=True, editable=False)
    api_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.CASCADE, related_name="client_secrets")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)
    used_at = models.DateTimeField(null=True, blank=True)
    session_id = models.CharField(max_length=64, blank=True, help_text="The session it opened.")
    session_config = models.JSONField(default=dict, blank=True, help_text="The session settings it was minted with.")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"client secret {self.pk} (expires {self.expires_at:%Y-%m-%d %H:%M:%S})"
