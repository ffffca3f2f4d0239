"""How large a request body may be, counted as it arrives: over the cap, a JSON 413 and nothing kept.

Django reads a body whole before a view can look at it (a probe's 200-300 MiB offers grew the
server by as much before their 400), and a chunked body, which has no Content-Length, ended in
an HTML 400 and a logged traceback. The caps here are checked on ``Content-Length`` as soon as the
headers are in, and on the bytes as they come: under daphne by :class:`realtime.server.http_phase.CappedRequest`
(before Twisted buffers anything), under any ASGI server by :class:`BodyLimit`, which also hands
Django a chunked body whole, with its length.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

from django.conf import settings

from realtime.protocol.events import error_event

CALLS_PREFIX = ("/v1/realtime/calls", "/v1/realtime/translations/calls")
CLIENT_SECRETS = ("/v1/realtime/client_secrets", "/v1/realtime/translations/client_secrets")


def cap_for(path: str) -> int:
    """The most bytes a request body to ``path`` may have."""
    if path.startswith(CALLS_PREFIX):
        return settings.S2S_MAX_CALL_BODY_BYTES
    if path in CLIENT_SECRETS:
        return 2 * settings.S2S_MAX_CLIENT_SECRET_CONFIG_BYTES
    return settings.S2S_MAX_REQUEST_BODY_BYTES


def too_large_body(cap: int) -> bytes:
    """The body of a 413: the same error object as every other API error."""
    return json.dumps(error_event("request_too_large", f"The request body is larger than {cap} bytes.")).encode()


def too_large_response(cap: int) -> bytes:
    """A whole HTTP/1.1 413 response that closes the connection (written by the daphne side)."""
    body = too_large_body(cap)
    head = (
        "HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimit:
    """ASGI middleware: refuses a body over :func:`cap_for` with a JSON 413 as soon as it is known to be over,
    and gives the application the body in one message with its ``content-length`` (a chunked one too)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = cap_for(scope["path"])
        length = declared_length(scope["headers"])
        if length is not None and length > cap:
            await self._refuse(send, cap)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > cap:
                await self._refuse(send, cap)
                return
            if not message.get("more_body"):
                break
        headers = [(n, v) for n, v in scope["headers"] if n.lower() not in (b"content-length", b"transfer-encoding")]
        headers.append((b"content-length", str(len(body)).encode()))
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app({**scope, "headers": headers}, replay, send)

    @staticmethod
    async def _refuse(send: Any, cap: int) -> None:
        body = too_large_body(cap)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
