"""Load and soak against a real daphne with the loopback (FAKE) pipeline.

Load: 200 concurrent connection attempts on a pool of 4. Soak: 100 sessions in
a row on one unit, half of them cut off in the middle of a response. The
figures (RSS before and after) are printed; docs/security.md quotes a run.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import re
import resource
import socket
import time
from pathlib import Path

import psutil
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidMessage

from tests.security.live import open_session, send, texts, until
from tests.support.conformance import decode
from tests.support.server import LiveServer

MARKER = re.compile(r"m-\d+-[0-9a-f]{6}")


def rss_mb(server: LiveServer) -> float:
    return psutil.Process(server.process.pid).memory_info().rss / 2**20


def free_units(server: LiveServer) -> int:
    return json.loads(server.get("/readyz")[1])["free_units"]


def wait_free(server: LiveServer, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if free_units(server) == count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{free_units(server)} free units after {timeout}s, expected {count}")


DROPPED_BEFORE_HANDSHAKE: list[tuple[str, float]] = []  # (the cause, when: time.monotonic())
OUT_OF_FILES = "a new connection was closed unanswered"


def tcp_counters() -> dict[str, int]:
    """The kernel's TCP counters (/proc/net/snmp and netstat): where a connection the server never answered went."""
    counters: dict[str, int] = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for names, values in zip(lines[::2], lines[1::2]):
            prefix, *keys = names.split()
            counters.update({prefix + key: int(value) for key, value in zip(keys, values.split()[1:])})
    return counters


def counters_moved(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {
        key: after[key] - before.get(key, 0)
        for key in after
        if after[key] != before.get(key, 0) and ("Tcp" in key or "Listen" in key)
    }


async def attempt(url: str, opened: asyncio.Event, release: asyncio.Event) -> tuple[str, int | None]:
    """One connection attempt: ("session", None) held until ``release``, or ("rejected", close code).

    A connection closed before any handshake answer is tried again, up to twice, as a client would; each
    such drop is noted in ``DROPPED_BEFORE_HANDSHAKE`` (with its cause) and the test accounts for them.
    """
    for _ in range(2):
        try:
            return await _attempt(url, opened, release)
        except InvalidMessage as exc:
            DROPPED_BEFORE_HANDSHAKE.append((repr(exc.__cause__), time.monotonic()))
            await asyncio.sleep(0.1)
    return await _attempt(url, opened, release)


async def _attempt(url: str, opened: asyncio.Event, release: asyncio.Event) -> tuple[str, int | None]:
    async with connect(url, open_timeout=30, close_timeout=5, subprotocols=["realtime"]) as ws:
        first = decode(await asyncio.wait_for(ws.recv(), 30))
        if first["type"] == "session.created":
            opened.set()
            await asyncio.wait_for(release.wait(), 60)
            return "session", None
        assert first["error"]["code"] == "session_limit_reached", first
        try:
            await asyncio.wait_for(ws.recv(), 30)
        except ConnectionClosed as exc:
            return "rejected", exc.rcvd.code if exc.rcvd else None
        raise AssertionError("a rejected connection was not closed")


async def storm(url: str, attempts: int) -> list[tuple[str, int | None]]:
    release = asyncio.Event()
    tasks = [asyncio.create_task(attempt(url, asyncio.Event(), release)) for _ in range(attempts)]
    done = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every rejection is in, the sessions wait for the release
        done = {t for t in tasks if t.done()}
        if len(done) >= attempts - 4:
            break
        await asyncio.sleep(0.05)
    release.set()
    return await asyncio.gather(*tasks)


def why_dropped(
    server: LiveServer, unexplained: int, started: float, took: float, kernel: dict[str, int], log_before: int
) -> str:
    """What a failure needs to be understood, the short parts first (a CI report keeps only part of a long one):
    the causes counted, the limits, the kernel's counters, then the server's warnings during the storm."""
    causes = collections.Counter(cause for cause, _ in DROPPED_BEFORE_HANDSHAKE)
    moments = [at - started for _, at in DROPPED_BEFORE_HANDSHAKE]
    process = psutil.Process(server.process.pid)
    try:
        somaxconn = Path("/proc/sys/net/core/somaxconn").read_text().strip()
    except OSError:
        somaxconn = "?"
    noted = [
        line
        for line in server.full_log()[log_before:].splitlines()
        if " WARNING " in line or " ERROR " in line or " CRITICAL " in line or "Traceback" in line
    ]
    return (
        f"{len(DROPPED_BEFORE_HANDSHAKE)} of 200 dropped before the handshake, {unexplained} of them unexplained, "
        f"{min(moments, default=0):.2f}-{max(moments, default=0):.2f}s into a storm of {took:.1f}s; causes: "
        f"{dict(causes)}\nserver: {process.num_fds()} files open, limits {process.rlimit(psutil.RLIMIT_NOFILE)}; "
        f"this process: {resource.getrlimit(resource.RLIMIT_NOFILE)}; somaxconn {somaxconn}; load "
        f"{os.getloadavg()}\nkernel: {counters_moved(kernel, tcp_counters())}\n"
        f"server warnings during the storm ({len(noted)}): {noted[:40]}"
    )


def test_200_concurrent_connections_on_a_pool_of_4_make_4_sessions_and_196_rejections_with_1008(tmp_path):
    # 200 clients, simulated from one address: lift the per-address cap on connections without a whole request.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this process holds the 200 client sockets
    server = LiveServer(tmp_path, env={"S2S_POOL_SIZE": "4", "S2S_MAX_PENDING_PER_ADDRESS": "0"}).start()
    try:
        asyncio.run(storm(server.ws, 20))  # warm the server's own allocations up first
        wait_free(server, 4)
        before = rss_mb(server)
        started = time.monotonic()
        DROPPED_BEFORE_HANDSHAKE.clear()
        kernel, log_before = tcp_counters(), len(server.full_log())
        outcomes = asyncio.run(storm(server.ws, 200))
        took = time.monotonic() - started
        # A server out of file descriptors closes new connections unanswered, and says so in its log: those
        # drops are the machine's limit (printed below). A refused client that answered the close frame after
        # the closing handshake's second used to be reset, losing the unread answer (111 and 120 of 200 in two
        # CI runs; test_a_refused_client_that_reads_late_... below): at most two drops of another cause pass.
        unexplained = len(DROPPED_BEFORE_HANDSHAKE) - server.full_log()[log_before:].count(OUT_OF_FILES)
        assert unexplained <= 2, why_dropped(server, unexplained, started, took, kernel, log_before)
        sessions = [o for o in outcomes if o[0] == "session"]
        rejected = [o for o in outcomes if o[0] == "rejected"]
        assert len(sessions) == 4 and len(rejected) == 196
        assert {code for _, code in rejected} == {1008}
        wait_free(server, 4)
        time.sleep(1)
        after = rss_mb(server)
        print(
            f"\nLOAD: 200 attempts in {took:.1f}s: 4 sessions, 196 rejected with 1008 "
            f"({len(DROPPED_BEFORE_HANDSHAKE)} retried after a drop before the handshake, for want of file "
            f"descriptors); "
            f"RSS {before:.1f} MiB before, {after:.1f} MiB after ({after - before:+.1f} MiB); kernel: "
            f"{counters_moved(kernel, tcp_counters())}"
        )
        assert after - before < 40, (before, after)
    finally:
        server.stop()


def test_100_sessions_in_a_row_on_one_unit_half_cut_off_leak_nothing_and_never_cross(tmp_path):
    server = LiveServer(tmp_path, env={"S2S_POOL_SIZE": "1"}).start()
    rng = random.Random(6)
    rss: list[float] = []
    started = time.monotonic()
    try:
        for i in range(100):
            assert time.monotonic() - started < 300, "the soak is taking too long"
            wait_free(server, 1)
            marker = f"m-{i}-{rng.randrange(16**6):06x}"
            ws, created = open_session(server.ws)
            assert created["type"] == "session.created", created
            received = [created]
            cut = i % 2 == 1
            send(
                ws,
                "conversation.item.create",
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": f"{'slow ' if cut else ''}{marker} says hello"}],
                },
            )
            send(ws, "response.create")
            if cut:  # hang up in the middle of a long, slow spoken answer
                for _ in range(20):
                    received.append(decode(ws.recv(timeout=10)))
                ws.close()
            else:
                done, seen = until(ws, "response.done", timeout=30)
                received += seen + [done]
                assert done["response"]["status"] == "completed"
                ws.close()
            said = set(MARKER.findall(texts(received)))
            assert said <= {marker}, f"session {i} saw another session's output: {said}"
            assert cut or said == {marker}
            if i in (9, 99):
                wait_free(server, 1)
                rss.append(rss_mb(server))
        wait_free(server, 1)
        print(
            f"\nSOAK: 100 sessions (50 cut off mid-response) in {time.monotonic() - started:.1f}s; "
            f"RSS after 10: {rss[0]:.1f} MiB, after 100: {rss[1]:.1f} MiB ({rss[1] - rss[0]:+.1f} MiB)"
        )
        assert rss[1] - rss[0] < 40, rss
    finally:
        server.stop()


def test_a_refused_client_that_reads_late_still_reads_the_refusal_and_its_close_code(tmp_path):
    """A client busy for longer than the closing handshake's second (a phone, a storm of connections from one
    process) used to get a reset: its kernel threw away the unread answer, and the client saw only "connection
    closed while reading HTTP status line" (the load test's drops in CI). Now the server closes with a FIN after
    the timeout, and the client reads the 101, the ``session_limit_reached`` error and the close frame 1008."""
    server = LiveServer(tmp_path, env={"S2S_POOL_SIZE": "1"}).start()
    try:
        holder, created = open_session(server.ws)
        assert created["type"] == "session.created", created
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(
                b"GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                b"Sec-WebSocket-Protocol: realtime\r\n\r\n"
            )
            time.sleep(2.5)  # busy: the server's close frame waits unanswered past its closing handshake timeout
            answer = b""
            while chunk := sock.recv(65536):  # a reset raises ConnectionResetError here
                answer += chunk
        holder.close()
    finally:
        server.stop()
    assert answer.startswith(b"HTTP/1.1 101"), answer[:200]
    frames = server_frames(answer.split(b"\r\n\r\n", 1)[1])
    assert json.loads(frames[0][1])["error"]["code"] == "session_limit_reached"
    assert frames[-1][0] == 0x8 and int.from_bytes(frames[-1][1][:2], "big") == 1008


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """The (opcode, payload) of each unmasked WebSocket frame in ``data``."""
    frames, at = [], 0
    while at + 2 <= len(data):
        opcode, length, at = data[at] & 0x0F, data[at + 1] & 0x7F, at + 2
        if length == 126:
            length, at = int.from_bytes(data[at : at + 2], "big"), at + 2
        elif length == 127:
            length, at = int.from_bytes(data[at : at + 8], "big"), at + 8
        frames.append((opcode, data[at : at + length]))
        at += length
    return frames
