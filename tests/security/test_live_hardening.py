"""The phase before a session, against a real daphne process: trickled requests, a flood of unfinished
connections under a small open-files limit, and the development key on a public address."""

from __future__ import annotations

import http.client
import json
import resource
import socket
import subprocess
import sys
import time

import psutil
import pytest
from websockets.sync.client import connect

from tests.support.server import ROOT, LiveServer, free_port

DEADLINE_S = 3


@pytest.fixture
def server(tmp_path):
    server = LiveServer(tmp_path, env={"S2S_WS_HANDSHAKE_TIMEOUT_S": str(DEADLINE_S)}).start()
    yield server
    server.stop()


def trickle(port: int, request: bytes, every_s: float, limit_s: float) -> tuple[float, bytes]:
    """Sends ``request`` one byte every ``every_s`` (never all of it); returns when the server closed, and what
    it answered."""
    started = time.monotonic()
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.settimeout(every_s)
        for byte in request[: int(limit_s / every_s)]:
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                try:
                    sock.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    break
                continue
            except ConnectionResetError:
                break
            answer += chunk
            if not chunk:
                break
    return time.monotonic() - started, answer


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 200,
        b"GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Padding: " + b"a" * 200,
    ],
    ids=["http", "websocket-upgrade"],
)
def test_a_request_trickled_a_byte_at_a_time_is_closed_with_408_at_the_deadline(server, request_bytes):
    """Before: every byte reset a 60 s idle timeout (one byte every 5 s kept a socket past 100 s)."""
    took, answer = trickle(server.port, request_bytes, every_s=0.5, limit_s=4 * DEADLINE_S)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert DEADLINE_S - 0.5 <= took < DEADLINE_S + 2, took
    assert server.get("/healthz")[0] == 200


def test_250_unfinished_connections_under_a_256_open_files_limit_leave_the_server_answering_others(server):
    """Before: 250 such sockets made /healthz and every WebSocket fail for 75 s. The attacker here is
    127.0.0.2 (loopback too); the server's own checks come from 127.0.0.1."""
    resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE, (256, 256))
    held: list[socket.socket] = []
    try:
        for _ in range(250):
            sock = socket.socket()
            sock.bind(("127.0.0.2", 0))
            sock.settimeout(5)
            try:
                sock.connect(("127.0.0.1", server.port))
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            except OSError:
                sock.close()
                continue
            held.append(sock)
        time.sleep(0.5)
        still_open = sum(1 for sock in held if _open(sock))
        assert still_open <= 32, f"{still_open} unfinished connections from one address are held (cap 32)"
        assert psutil.Process(server.process.pid).num_fds() < 200
        assert server.get("/healthz")[0] == 200
        with connect(server.ws, open_timeout=10) as ws:
            assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
    finally:
        for sock in held:
            sock.close()


def test_a_server_started_under_a_low_soft_open_files_limit_lifts_it_to_the_hard_limit(tmp_path):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        hard = 65536
    server = LiveServer(tmp_path, open_files=(128, hard)).start()
    try:
        assert resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE) == (hard, hard)
        assert f"open-files limit raised from 128 to {hard}" in server.log()
    finally:
        server.stop()


def test_a_connection_closed_unanswered_for_want_of_file_descriptors_is_logged_and_the_server_recovers(server):
    """Before: Twisted's own log went nowhere, and such connections vanished without a trace."""
    hard = resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE)[1]
    resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE, (64, hard))
    held: list[socket.socket] = []
    try:  # three addresses, each within the per-address cap of unfinished requests: 96 in all
        for address in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            for _ in range(32):
                sock = socket.socket()
                sock.bind((address, 0))
                sock.settimeout(5)
                sock.connect(("127.0.0.1", server.port))
                held.append(sock)
        deadline = time.monotonic() + 10
        while "out of file descriptors" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "out of file descriptors (open-files limit 64): a new connection was closed unanswered" in server.log()
    finally:
        for sock in held:
            sock.close()
    resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE, (hard, hard))
    assert server.get("/healthz")[0] == 200
    with connect(server.ws, open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "session.created"


def _open(sock: socket.socket) -> bool:
    """False when the server has closed or reset the connection."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def test_serve_on_a_public_address_without_a_secret_key_refuses_to_start(tmp_path):
    env = {key: value for key, value in LiveServer(tmp_path).env.items() if key != "DJANGO_SECRET_KEY"}
    result = subprocess.run(
        [sys.executable, "manage.py", "serve", "--host", "0.0.0.0", "--port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "Refusing to serve on 0.0.0.0: DJANGO_SECRET_KEY is not set" in result.stderr


def handshake(port: int, origin_lines: bytes) -> bytes:
    """A raw WebSocket upgrade with ``origin_lines`` among its headers: what the server answers first."""
    request = (
        b"GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" % port + origin_lines + b"\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer


@pytest.mark.parametrize(
    "origin_lines",
    [
        b"Origin: \r\n",
        b"Origin: http://127.0.0.1:1x\r\n",
        b"Origin: http://[::1\r\n",
    ],
    ids=["empty", "bad-port", "bad-host"],
)
def test_a_malformed_origin_is_a_quiet_400(server, origin_lines):
    """Before: 400, then about 30 lines of "CRITICAL twisted: Unhandled Error" (daphne's onClose without its
    server) for each such handshake. On the API's routes into a session the same Origin is a 403 ``invalid_origin``
    (before: ``http://[::1`` was a 500 and a traceback, urlsplit's ValueError)."""
    for _ in range(3):
        assert handshake(server.port, origin_lines).startswith(b"HTTP/1.1 400")
    origin = origin_lines.decode().split(":", 1)[1].strip()
    for method, path in (
        ("DELETE", "/v1/realtime/calls/rtc_0000000000000000000000"),
        ("GET", "/v1/realtime/sessions/sess_0000000000000000000000/timings"),
    ):
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            connection.request(method, path, headers={"Origin": origin})
            answer = connection.getresponse()
            status, body = answer.status, answer.read()
        finally:
            connection.close()
        assert status == 403 and json.loads(body)["error"]["code"] == "invalid_origin", (path, status, body[:200])
    status, _ = server.get("/healthz")
    assert status == 200
    log = server.full_log()
    assert "CRITICAL" not in log and "Traceback" not in log and "Unhandled Error" not in log, log[-3000:]
