"""Response headers every page gets: a Content-Security-Policy that runs only the server's own scripts."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    """Adds ``settings.S2S_CONTENT_SECURITY_POLICY`` to every response that has none of its own.

    With no inline script allowed, markup that an attacker gets into a page (a forged
    ``messages`` cookie, a stored string) cannot run.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if settings.S2S_CONTENT_SECURITY_POLICY:
            response.headers.setdefault("Content-Security-Policy", settings.S2S_CONTENT_SECURITY_POLICY)
        return response
