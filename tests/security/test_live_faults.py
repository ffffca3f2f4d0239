"""Faults against a real server process: SIGTERM, a crash and restart, the database or Redis going away,
and a client that never reads."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import time
import uuid

import psutil
import pytest

from tests.security.live import close_code, open_session, open_session_once_free, turn, until
from tests.security.tcp_proxy import TcpProxy
from tests.support.polling import wait_for
from tests.support.server import LiveServer


def record(server: LiveServer, session_id: str) -> dict:
    with sqlite3.connect(server.tmp_dir / "server.sqlite3", timeout=10) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("select * from realtime_realtimesession where id = ?", (session_id,)).fetchone()
    return dict(row) if row else {}


def test_sigterm_stops_admitting_lets_live_sessions_run_then_closes_them_with_1001(tmp_path):
    server = LiveServer(tmp_path, env={"S2S_SHUTDOWN_GRACE_S": "3"}).start()
    try:
        ws, created = open_session(server.ws)
        server.process.send_signal(signal.SIGTERM)
        status, body = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(server.get("/readyz")), 5)
        assert json.loads(body)["status"] == "draining"
        late, refused = open_session(server.ws)
        assert refused["type"] == "error" and refused["error"]["code"] == "server_shutting_down"
        assert close_code(late) == 1013
        done, _ = turn(ws, "still served during the grace period")
        assert done["response"]["status"] == "completed"
        goodbye, _ = until(ws, "error", timeout=10)
        assert goodbye["error"]["code"] == "server_shutting_down"
        assert close_code(ws) == 1001
        assert server.process.wait(timeout=20) == 0
        row = record(server, created["session"]["id"])
        assert row["end_reason"] == "server_closed" and row["close_code"] == 1001 and row["ended_at"]
    finally:
        server.stop()


@pytest.mark.parametrize("launcher", ["daphne", "uvicorn"])
def test_sigterm_ends_live_sessions_as_the_servers_doing_and_writes_their_records(tmp_path, launcher):
    """The same lifecycle under both launchers: daphne closes with 1001 after the grace period; uvicorn closes
    live sockets itself (1012) before its lifespan shutdown. Either way the audit says the server ended them."""
    server = LiveServer(tmp_path, env={"S2S_SHUTDOWN_GRACE_S": "1"}, launcher=launcher).start()
    try:
        ws, created = open_session(server.ws)
        done, _ = turn(ws, "remember this before the restart")
        assert done["response"]["status"] == "completed"
        server.process.send_signal(signal.SIGTERM)
        assert close_code(ws) == {"daphne": 1001, "uvicorn": 1012}[launcher]
        # uvicorn re-raises the signal once its graceful shutdown is over, so it exits "killed by SIGTERM"
        assert server.process.wait(timeout=30) == {"daphne": 0, "uvicorn": -signal.SIGTERM}[launcher]
        assert launcher == "daphne" or "Application shutdown complete" in server.log()
        session_id = created["session"]["id"]
        row = record(server, session_id)
        assert row["end_reason"] == "server_closed" and row["ended_at"], row
        with sqlite3.connect(server.tmp_dir / "server.sqlite3", timeout=10) as db:
            texts = [
                t
                for (t,) in db.execute(
                    "select text from realtime_conversationitem where session_id = ? order by seq", (session_id,)
                )
            ]
        assert texts[0] == "remember this before the restart" and len(texts) == 2, texts
    finally:
        server.stop()


def test_sigterm_with_no_live_session_exits_at_once(tmp_path):
    server = LiveServer(tmp_path, env={"S2S_SHUTDOWN_GRACE_S": "30"}).start()
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=15) == 0 and time.monotonic() - started < 10
    server.process = None


def test_sessions_a_crashed_process_left_open_are_marked_interrupted_at_restart(tmp_path):
    server = LiveServer(tmp_path).start()
    ws, created = open_session(server.ws)
    session_id = created["session"]["id"]
    wait_for(lambda: record(server, session_id).get("end_reason") == "active", timeout=15)
    server.process.kill()
    server.process.wait(timeout=10)
    server.process = None
    assert record(server, session_id)["end_reason"] == "active"
    restarted = LiveServer(tmp_path).start()
    try:
        row = wait_for(
            lambda: (lambda r: r if r["end_reason"] == "interrupted" else None)(record(restarted, session_id)),
            timeout=15,
        )
        assert row["ended_at"]
    finally:
        restarted.stop()


def test_sessions_go_on_while_the_database_is_down_and_their_records_are_written_when_it_returns(
    tmp_path, postgres_url
):
    import psycopg

    admin_url = postgres_url.replace("postgres://", "postgresql://")
    name = f"s2s_fault_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as db:
        db.execute(f'create database "{name}"')
    host_port = admin_url.split("@", 1)[1].split("/", 1)[0]
    target = (host_port.rsplit(":", 1)[0], int(host_port.rsplit(":", 1)[1]) if ":" in host_port else 5432)
    proxy = TcpProxy(target).start()
    user = admin_url.split("//", 1)[1].split("@", 1)[0]
    server = LiveServer(
        tmp_path, env={"DATABASE_URL": f"postgres://{user}@127.0.0.1:{proxy.port}/{name}", "S2S_POOL_SIZE": "1"}
    )
    server.manage("migrate", "--noinput")
    server.start()
    direct = admin_url.rsplit("/", 1)[0] + f"/{name}"

    def db_record(session_id):
        with psycopg.connect(direct) as db:
            return db.execute(
                "select end_reason, ended_at, turns from realtime_realtimesession where id = %s", (session_id,)
            ).fetchone()

    try:
        ws, created = open_session(server.ws)
        first = created["session"]["id"]
        assert turn(ws, "before the outage")[0]["response"]["status"] == "completed"
        proxy.cut()
        assert turn(ws, "during the outage")[0]["response"]["status"] == "completed"
        ws.close()
        ws, created = open_session_once_free(server.ws)  # a new session while the database is down
        second = created["session"]["id"]
        assert turn(ws, "a new session during the outage")[0]["response"]["status"] == "completed"
        ws.close()
        time.sleep(2)
        proxy.restore()
        wait_for(
            lambda: (
                (db_record(first) or [None])[0] == "client_closed"
                and (db_record(second) or [None])[0] == "client_closed"
            ),
            timeout=30,
            interval=0.5,
        )
    finally:
        server.stop()
        proxy.stop()
        with psycopg.connect(admin_url, autocommit=True) as db:
            db.execute(f'drop database if exists "{name}" with (force)')


def test_sessions_go_on_while_redis_is_down_and_readyz_says_degraded(tmp_path, redis_url):
    host, port = redis_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    proxy = TcpProxy((host, int(port))).start()
    server = LiveServer(tmp_path, env={"REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0"}).start()
    try:
        ws, _ = open_session(server.ws)
        assert turn(ws, "before the outage")[0]["response"]["status"] == "completed"
        proxy.cut()
        assert turn(ws, "during the outage")[0]["response"]["status"] == "completed"
        ws2, created = open_session(server.ws)
        assert created["type"] == "session.created"
        assert turn(ws2, "new during the outage")[0]["response"]["status"] == "completed"
        body = wait_for(
            lambda: (lambda b: b if b["channel_layer"]["status"] == "degraded" else None)(
                json.loads(server.get("/readyz")[1])
            ),
            timeout=20,
        )
        assert body["free_units"] == 0
        ws.close()
        ws2.close()
        proxy.restore()
        wait_for(
            lambda: json.loads(server.get("/readyz")[1]).get("channel_layer", {}).get("status") == "ok", timeout=30
        )
        wait_for(lambda: json.loads(server.get("/readyz")[1])["free_units"] == 2, timeout=15)
    finally:
        server.stop()
        proxy.stop()


def test_an_idle_node_on_redis_never_says_it_lost_redis(tmp_path, redis_url):
    """A session's receive blocks on Redis for channels_redis's 5 s, redis-py 8's read gave up after its own 5 s:
    the node logged "lost Redis" and /readyz said degraded every few seconds while Redis was fine."""
    server = LiveServer(tmp_path, env={"REDIS_URL": redis_url}).start()
    try:
        ws, created = open_session(server.ws)
        assert created["type"] == "session.created"
        statuses = set()
        deadline = time.monotonic() + 12  # two of the blocking reads and more
        while time.monotonic() < deadline:
            statuses.add(json.loads(server.get("/readyz")[1])["channel_layer"]["status"])
            time.sleep(0.5)
        assert turn(ws, "after the wait")[0]["response"]["status"] == "completed"
        ws.close()
        assert statuses == {"ok"}
        assert "lost Redis" not in server.full_log()
    finally:
        server.stop()


def test_a_client_that_never_reads_is_dropped_before_its_send_buffer_passes_the_limit(tmp_path):
    limit = 256 * 1024
    server = LiveServer(tmp_path, env={"S2S_MAX_SEND_BUFFER_BYTES": str(limit), "S2S_POOL_SIZE": "1"}).start()
    try:
        rss_before = psutil.Process(server.process.pid).memory_info().rss
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        key = "dGhlIHNhbXBsZSBub25jZQ=="
        sock.sendall(
            (
                f"GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        wait_for(lambda: json.loads(server.get("/readyz")[1])["free_units"] == 0, timeout=10)  # it holds the unit
        text = "x" * 60_000
        for _ in range(300):  # each comes back twice (conversation.item.added and .done): 36 MB the client never reads
            event = {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            }
            try:
                sock.sendall(masked_text_frame(json.dumps(event)))
            except OSError:
                break  # dropped by the server
        wait_for(lambda: "does not read" in server.log_path.read_text(errors="replace"), timeout=30)
        wait_for(lambda: json.loads(server.get("/readyz")[1])["free_units"] == 1, timeout=30)
        grown = psutil.Process(server.process.pid).memory_info().rss - rss_before
        assert grown < 64 * 1024 * 1024, grown
        sock.close()
    finally:
        server.stop()


def masked_text_frame(text: str) -> bytes:
    payload = text.encode()
    mask = b"\x01\x02\x03\x04"
    header = bytes([0x81])
    if len(payload) < 126:
        header += bytes([0x80 | len(payload)])
    elif len(payload) < 65536:
        header += bytes([0x80 | 126]) + len(payload).to_bytes(2, "big")
    else:
        header += bytes([0x80 | 127]) + len(payload).to_bytes(8, "big")
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
