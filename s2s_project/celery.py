"""Celery application: background work only, never the audio path."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "s2s_project.settings")

app = Celery("s2s_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
