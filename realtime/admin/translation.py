"""Translation sessions in the admin (issue 55): which sessions are translations (the session list's "kind" column
and filter, the slot board), and a translation's phrases, its source beside its translation, on its page.

A translation session's record says so in its ``engines`` (``realtime.live.translation.ENGINES`` starts with the
session type, ``translation``); each phrase is two items, the source (``user``, ``phrase_{ms}_source``, kept when
the session asked for ``audio.input.transcription``) and its translation (``assistant``, ``phrase_{ms}``), ``ms``
being where the phrase ended in the input audio.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from realtime.models import RealtimeSession
from realtime.protocol.translation import KIND as TRANSLATION

VOICE_AGENT = "realtime"  # every other session: a voice agent's (or a transcription's)
SOURCE_SUFFIX = "_source"
NO_SOURCE = "(not transcribed: the session did not ask for audio.input.transcription)"


def kind_of(session: RealtimeSession) -> str:
    """``translation`` or ``realtime``: the kind of session, as the client opened it."""
    return TRANSLATION if (session.engines or "").startswith(TRANSLATION) else VOICE_AGENT


class KindFilter(admin.SimpleListFilter):
    """The session list by kind: voice agents, or translations."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(VOICE_AGENT, "voice agent (realtime)"), (TRANSLATION, "translation")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[RealtimeSession]) -> QuerySet[RealtimeSession]:
        if self.value() == TRANSLATION:
            return queryset.filter(engines__startswith=TRANSLATION)
        if self.value() == VOICE_AGENT:
            return queryset.exclude(engines__startswith=TRANSLATION)
        return queryset


def phrases(session: RealtimeSession) -> list[dict[str, str]]:
    """A translation session's phrases in order, each its time, its source and its translation ([] for a voice
    agent's session: its page shows the conversation instead)."""
    if kind_of(session) != TRANSLATION:
        return []
    sources: dict[str, str] = {}
    rows = []
    for item in session.items.order_by("seq"):
        if item.item_id.endswith(SOURCE_SUFFIX):
            sources[item.item_id.removesuffix(SOURCE_SUFFIX)] = item.text
            continue
        rows.append(
            {
                "time": timezone.localtime(item.created_at).strftime("%H:%M:%S"),
                "source": sources.get(item.item_id) or NO_SOURCE,  # a phrase's source comes before it
                "translation": item.text,
            }
        )
    return rows
