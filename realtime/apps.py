from __future__ import annotations

from django.apps import AppConfig


class RealtimeConfig(AppConfig):
    name = "realtime"
    verbose_name = "Realtime speech sessions"
    default_auto_field = "django.db.models.BigAutoField"
