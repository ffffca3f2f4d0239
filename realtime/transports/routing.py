from __future__ import annotations

from channels.routing import URLRouter
from django.urls import path, re_path

from realtime.transports.not_found import not_found
from realtime.transports.translation_ws import TranslationConsumer
from realtime.transports.websocket import RealtimeConsumer

websocket_urlpatterns = [
    path("v1/realtime", RealtimeConsumer.as_asgi()),
    path("v1/realtime/translations", TranslationConsumer.as_asgi()),
]


def websocket_router() -> URLRouter:
    """The routes above, and a quiet 404 for any other path (:mod:`realtime.transports.not_found`)."""
    # django-stubs type re_path's target as a view; channels routes any ASGI application through it.
    return URLRouter([*websocket_urlpatterns, re_path(r"", not_found)])  # type: ignore[arg-type]
