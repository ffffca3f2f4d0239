"""A turn's audio, kept when ``S2S_RECORD_AUDIO`` is on: the file lives in Django's storage, the row here."""

from __future__ import annotations

from typing import Any

from django.core.files.storage import default_storage
from django.db import models, transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone


class Recording(models.Model):
    """The user's or the assistant's audio of one conversation item, as a WAV file."""

    session = models.ForeignKey("realtime.RealtimeSession", on_delete=models.CASCADE, related_name="recordings")
    item_id = models.CharField(max_length=64)
    role = models.CharField(max_length=16)
    audio = models.FileField(upload_to="recordings/", max_length=300)
    duration_ms = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "created_at"]
        constraints = [models.UniqueConstraint(fields=["session", "item_id"], name="unique_recording_per_item")]

    def __str__(self) -> str:
        return f"{self.role} {self.item_id}"


@receiver(post_delete, sender=Recording)
def delete_the_file(sender: type[Recording], instance: Recording, **kwargs: Any) -> None:
    """The file goes with its row, also when a session's deletion (retention) cascades to it.

    Deleted once the transaction commits: a rolled-back delete keeps a playable file.
    """
    name = instance.audio.name
    if name:
        transaction.on_commit(lambda: default_storage.delete(name))
