"""A WebSocket handshake to a path with no route is a quiet 404: no 500, no traceback in the log (issue 55).

Before, channels' router raised ``ValueError: No route found for path ...``: daphne answered 500 and logged the
traceback, for any unknown path (a client on a newer API, a typo, a scanner)."""

from __future__ import annotations

import json
import socket

import pytest

from tests.support.server import LiveServer


def handshake(port: int, path: bytes) -> bytes:
    """A raw WebSocket upgrade to ``path``: everything the server answers until it closes."""
    request = (
        b"GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" % (path, port)
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


@pytest.fixture(params=["daphne", "uvicorn"])
def server(request, tmp_path):
    server = LiveServer(tmp_path, launcher=request.param).start()
    yield server
    server.stop()


@pytest.mark.parametrize("path", [b"/v1/realtime/nothing", b"/", b"/v1/realtimex?model=x"])
def test_an_unknown_websocket_path_is_a_quiet_404(server, path):
    for _ in range(2):
        answer = handshake(server.port, path)
        assert answer.startswith(b"HTTP/1.1 404"), answer[:200]
    status, _ = server.get("/healthz")
    assert status == 200
    log = server.full_log()
    assert "Traceback" not in log and "No route found" not in log and "CRITICAL" not in log, log[-3000:]


def test_uvicorn_gives_the_404_the_apis_json_error(tmp_path):
    server = LiveServer(tmp_path, launcher="uvicorn").start()
    try:
        answer = handshake(server.port, b"/v1/realtime/nothing")
    finally:
        server.stop()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404"), head
    assert json.loads(body.split(b"\r\n")[1] if b"chunked" in head.lower() else body)["error"]["code"] == "not_found"
