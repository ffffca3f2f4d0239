"""A WebSocket handshake to a path with no route: a quiet 404, never a traceback.

channels' ``URLRouter`` raises ``ValueError`` for a path it does not know, and the server answers 500 and logs
the traceback. This application, the router's last route, refuses the handshake itself: with the ASGI
WebSocket denial response where the server offers it (uvicorn; daphne through ``manage.py serve``, whose
protocol handles it), a 404 with the API's JSON error; elsewhere a plain close before the accept (403).
"""

from __future__ import annotations

import json
import logging
from typing import Any

logger = logging.getLogger(__name__)

DENIAL = "websocket.http.response"  # the ASGI extension: an HTTP response instead of the handshake


def body(path: str) -> bytes:
    """The API's JSON error for an unknown path."""
    error = {
        "type": "invalid_request_error",
        "code": "not_found",
        "message": f"No WebSocket endpoint at {path!r}: connect to /v1/realtime or /v1/realtime/translations.",
        "param": None,
    }
    return json.dumps({"error": error}).encode()


async def not_found(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Refuses the handshake of ``scope`` with 404 (or 403 where the server has no denial response)."""
    message = await receive()
    if message.get("type") != "websocket.connect":
        return
    logger.info("no WebSocket route for %s: 404", scope.get("path", "?")[:200])
    if DENIAL not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close"})
        return
    await send(
        {
            "type": "websocket.http.response.start",
            "status": 404,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "websocket.http.response.body", "body": body(scope.get("path", ""))})
