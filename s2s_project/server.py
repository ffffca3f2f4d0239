"""The daphne launcher behind ``manage.py serve``.

Daphne implements no ASGI lifespan, so this is where the pool starts and stops.
Stock daphne also cannot send an application's close code outside 1000 and
3000-4999 (autobahn refuses them and daphne falls back to 1011) and drops the
close reason; :class:`CloseCodeWebSocketProtocol` sends both as given.
"""

from __future__ import annotations

import logging

from daphne import ws_protocol
from daphne.endpoints import build_endpoint_description_strings
from daphne.server import Server
from django.conf import settings

from realtime import cluster, runtime

logger = logging.getLogger(__name__)


class CloseCodeWebSocketProtocol(ws_protocol.WebSocketProtocol):
    """Sends the application's close code (1008, 1011, 1013, ...) and reason unchanged."""

    def handle_reply(self, message: dict) -> None:
        if message.get("type") == "websocket.close" and self.state != self.STATE_CONNECTING:
            code = message.get("code") or 1000
            reason = message.get("reason") or None
            reason_bytes = reason.encode("utf-8")[:123] if reason else None
            self.sendCloseFrame(code=code, reasonUtf8=reason_bytes, isReply=False)
            return
        super().handle_reply(message)


def install_close_code_protocol() -> None:
    ws_protocol.WebSocketFactory.protocol = CloseCodeWebSocketProtocol


def serve(host: str, port: int, warm: bool = True, verbosity: int = 1) -> None:
    """Starts the pool (in the background, so probes answer while models load) and runs daphne."""
    from s2s_project.asgi import application

    install_close_code_protocol()
    runtime.start(background=True, warm=warm)
    cluster.start_heartbeat()  # publishes this node's slots for the admin and pool_status
    max_bytes = settings.S2S_MAX_EVENT_BYTES * 4 // 3 + 64 * 1024  # base64 of the largest append, plus JSON
    server = Server(
        application=application,
        endpoints=build_endpoint_description_strings(host=host, port=port),
        websocket_timeout=-1,
        websocket_max_message_size=max_bytes,
        websocket_max_frame_size=max_bytes,
        verbosity=verbosity,
        application_close_timeout=15,
    )
    logger.info("serving on http://%s:%s (WebSocket at /v1/realtime)", host, port)
    try:
        server.run()
    finally:
        cluster.stop_heartbeat()
        runtime.stop()
