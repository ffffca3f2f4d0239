"""System checks: ``manage.py check --deploy`` reports a deployment that still runs on the development key."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register

DEVELOPMENT_KEY = Error(
    "DJANGO_SECRET_KEY is not set: the server signs cookies with the public development key.",
    hint="Set DJANGO_SECRET_KEY to 50 or more random characters, e.g. "
    "python -c 'import secrets; print(secrets.token_urlsafe(50))'.",
    id="s2s.E001",
)


def uses_development_key() -> bool:
    return settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY


@register(Tags.security, deploy=True)
def check_secret_key(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    return [DEVELOPMENT_KEY] if uses_development_key() else []
