from __future__ import annotations

from django.urls import path

from realtime.transports.websocket import RealtimeConsumer

websocket_urlpatterns = [
    path("v1/realtime", RealtimeConsumer.as_asgi()),
]
