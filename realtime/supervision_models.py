"""What supervisors did in a live session (issue 51): each listen, whisper, take-over and hand-back, by whom and
when. Written off the audio path by the record writer (``realtime.audit.records``), shown on the session's page.

The permission a signed-in user needs to supervise any live session lives here, with the records it makes."""

from __future__ import annotations

from django.db import models


class SupervisorActionKind(models.TextChoices):
    LISTEN = "listen", "listened"
    WHISPER = "whisper", "whispered"
    TAKE_OVER = "take_over", "took over"
    HAND_BACK = "hand_back", "handed back"


class SupervisorAction(models.Model):
    """One thing a supervisor did: a listen (from connecting to leaving) and a take-over (until it was handed
    back) have an end; a whisper and a hand-back are a moment."""

    session = models.ForeignKey("realtime.RealtimeSession", on_delete=models.CASCADE, related_name="supervisor_actions")
    kind = models.CharField(max_length=16, choices=SupervisorActionKind.choices, db_index=True)
    actor = models.CharField(max_length=200, help_text='The staff user\'s name, or "key:NAME" for an API key.')
    text = models.TextField(blank=True, help_text="What was whispered.")
    started_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["session", "started_at", "id"]
        permissions = [("supervise_live_session", "Can supervise live sessions")]

    def __str__(self) -> str:
        return f"{self.actor} {self.get_kind_display()}"

    @property
    def duration_s(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()
