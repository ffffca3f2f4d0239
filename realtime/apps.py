from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate

AUDITORS_GROUP = "Auditors"
AUDITOR_PERMISSIONS = ("view_realtimesession", "view_conversationitem", "view_responserecord", "view_node")


def create_auditors_group(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """The audit role: may read sessions, transcripts and the slot board; edits nothing."""
    from django.contrib.auth.models import Group, Permission

    group, _ = Group.objects.using(using).get_or_create(name=AUDITORS_GROUP)
    group.permissions.add(
        *Permission.objects.using(using).filter(content_type__app_label="realtime", codename__in=AUDITOR_PERMISSIONS)
    )


class RealtimeConfig(AppConfig):
    name = "realtime"
    verbose_name = "Realtime speech sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from realtime.access import checks  # noqa: F401  (registers the system checks)
        from realtime.node import revocation  # noqa: F401  (registers the receivers)

        post_migrate.connect(create_auditors_group, sender=self)
