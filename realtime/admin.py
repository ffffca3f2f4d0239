from __future__ import annotations

from django.contrib import admin

from realtime.models import RealtimeSession


@admin.register(RealtimeSession)
class RealtimeSessionAdmin(admin.ModelAdmin):
    list_display = ("id", "started_at", "ended_at", "node", "unit_index", "end_reason", "close_code", "turns")
    list_filter = ("end_reason", "node")
    search_fields = ("id",)
    readonly_fields = [f.name for f in RealtimeSession._meta.fields]
