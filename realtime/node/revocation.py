"""A key that stops working ends its live sessions too, on every node: revoked (saved with
``revoked_at``) or deleted, however that happens (the admin, the shell, a script)."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from realtime.auth_models import ApiKey
from realtime.node import cluster


@receiver(post_save, sender=ApiKey, dispatch_uid="s2s-key-revoked")
def key_saved(sender: type[ApiKey], instance: ApiKey, **kwargs: Any) -> None:
    if instance.revoked_at is not None:
        cluster.end_key_sessions(instance.pk)


@receiver(post_delete, sender=ApiKey, dispatch_uid="s2s-key-deleted")
def key_deleted(sender: type[ApiKey], instance: ApiKey, **kwargs: Any) -> None:
    cluster.end_key_sessions(instance.pk)
