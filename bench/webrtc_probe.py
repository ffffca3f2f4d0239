"""The WebRTC probe of issue 25, re-run: the figures of docs/security.md ("WebRTC").

Starts a real ``manage.py serve`` (loopback FAKE pipeline, pool of 2, SQLite) from each ``--root`` in turn
(give main's checkout first for "before", this tree for "after") and runs the issue's attacks, printing one
JSON line per attack and tree. While each runs, a thread asks ``/healthz`` every 20 ms: the slowest answer is
the event loop's worst stall. RSS is the server process's (peak during the attack, and after it).

    git -C ../main archive main | tar -x -C /tmp/before
    .venv/bin/python bench/webrtc_probe.py --root /tmp/before --root .
    .venv/bin/python bench/webrtc_probe.py --root . --only blowup
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import server as live  # noqa: E402
from tests.support.client import Closed  # noqa: E402
from tests.support.webrtc_client import WebRTCClient, multipart  # noqa: E402
from tests.webrtc.test_bad_offers import offer  # noqa: E402

MiB = 1024 * 1024
SDP = "application/sdp"


class Watch:
    """Polls /healthz every 20 ms and samples the server's RSS and CPU, until stopped."""

    def __init__(self, server: live.LiveServer) -> None:
        self.server = server
        self.process = psutil.Process(server.process.pid)
        self.rss_before = self.process.memory_info().rss
        self.cpu_before = sum(self.process.cpu_times()[:2])
        self.worst_ms = 0.0
        self.peak_rss = self.rss_before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._sampler = threading.Thread(target=self._sample, daemon=True)  # on its own: a stalled probe waits
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)
            self._stop.wait(0.05)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=300)
                connection.request("GET", "/healthz")
                connection.getresponse().read()
                connection.close()
            except OSError:
                pass
            self.worst_ms = max(self.worst_ms, (time.monotonic() - started) * 1000)
            self._stop.wait(0.02)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=310)
        self._sampler.join(timeout=5)
        time.sleep(1.0)
        return {
            "loop_worst_stall_ms": round(self.worst_ms),
            "rss_peak_growth_mib": round((self.peak_rss - self.rss_before) / MiB),
            "rss_after_growth_mib": round((self.process.memory_info().rss - self.rss_before) / MiB),
            "server_cpu_s": round(sum(self.process.cpu_times()[:2]) - self.cpu_before, 1),
        }


def request(
    port: int,
    path: str,
    body: bytes = b"",
    content_type: str = SDP,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    source: str = "127.0.0.1",
) -> tuple[int, bytes, dict[str, str], float]:
    """(status, body, headers, seconds) of one request; status 0 when the connection failed."""
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300, source_address=(source, 0))
    sent = {"Content-Type": content_type, **(headers or {})}
    try:
        connection.request(method, path, body=body if method == "POST" else None, headers=sent)
        response = connection.getresponse()
        return response.status, response.read(), dict(response.getheaders()), time.monotonic() - started
    except OSError:
        return 0, b"", {}, time.monotonic() - started
    finally:
        connection.close()


def free_units(server: live.LiveServer) -> int:
    status, body, _, _ = request(server.port, "/readyz", method="GET")
    try:
        return json.loads(body)["free_units"]
    except (ValueError, KeyError):
        return -1


def blow_up(good: str) -> bytes:
    extra = "".join(f"a=rtpmap:{96 + n % 10} a/1\r\n" for n in range(1650)) + "a=rtcp-fb:* n\r\n" * 2150
    return good.replace("a=rtpmap:", extra + "a=rtpmap:", 1).encode()


def in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * count

    def run(n: int) -> None:
        results[n] = work(n)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=400)
    return results


# --- the attacks ---------------------------------------------------------------------------


def attack_blowup(server: live.LiveServer, good: str) -> dict[str, Any]:
    body = blow_up(good)
    figures: dict[str, Any] = {"offer_bytes": len(body)}
    watch = Watch(server)
    status, _, _, took = request(server.port, "/v1/realtime/calls", body, source="127.0.0.20")
    figures["one"] = {"status": status, "seconds": round(took, 1), **watch.stop()}
    deadline = time.monotonic() + 30
    while free_units(server) != 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    watch = Watch(server)
    answers = in_threads(8, lambda n: request(server.port, "/v1/realtime/calls", body, source=f"127.0.0.{30 + n}"))
    figures["eight"] = {
        "statuses": sorted(a[0] for a in answers),
        "slowest_s": round(max(a[3] for a in answers), 1),
        **watch.stop(),
    }
    return figures


def attack_bodies(server: live.LiveServer, good: str) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    watch = Watch(server)
    status, body, headers, took = request(server.port, "/v1/realtime/calls", b"v=0\r\n" + b"a" * (200 * MiB))
    figures["200_mib"] = {"status": status, "type": headers.get("Content-Type"), "s": round(took, 1), **watch.stop()}
    watch = Watch(server)
    answers = in_threads(4, lambda n: request(server.port, "/v1/realtime/calls", b"v=0\r\n" + b"a" * (150 * MiB)))
    figures["four_150_mib"] = {"statuses": [a[0] for a in answers], **watch.stop()}
    log_before = server.full_log().count("Traceback")
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    connection.request("POST", "/v1/realtime/calls", body=iter([b"v=0\r\n" + b"a" * MiB] * 4), encode_chunked=True)
    response = connection.getresponse()
    response.read()
    connection.close()
    time.sleep(0.5)
    figures["chunked_4_mib"] = {
        "status": response.status,
        "type": response.getheader("Content-Type"),
        "tracebacks_logged": server.full_log().count("Traceback") - log_before,
    }
    return figures


def attack_hold(server: live.LiveServer, good_offers: list[str], seconds: float = 60.0) -> dict[str, Any]:
    """Two dead offers every 15 s from 127.0.0.2; a legitimate client on 127.0.0.3 offers every 2 s."""
    stop = threading.Event()
    busy = {"samples": 0, "full": 0}

    def attacker() -> None:
        n = 0
        while not stop.is_set():
            for _ in range(2):
                dead = good_offers[n % len(good_offers)].encode()
                request(server.port, "/v1/realtime/calls", dead, source="127.0.0.2")
                n += 1
            stop.wait(15)

    def sampler() -> None:
        while not stop.is_set():
            busy["samples"] += 1
            busy["full"] += free_units(server) == 0
            stop.wait(0.5)

    threads = [threading.Thread(target=attacker, daemon=True), threading.Thread(target=sampler, daemon=True)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    got = tries = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        status, _, headers, _ = request(
            server.port, "/v1/realtime/calls", good_offers[tries % len(good_offers)].encode(), source="127.0.0.3"
        )
        tries += 1
        if status == 201:
            got += 1
            request(server.port, headers["Location"], method="DELETE", source="127.0.0.3")
        time.sleep(2.0)
    stop.set()
    return {
        "legitimate_calls": f"{got} of {tries}",
        "pool_full_share": round(busy["full"] / max(1, busy["samples"]), 2),
    }


async def _rtcp_only(server: live.LiveServer, bound_s: float) -> dict[str, Any]:
    quiet = WebRTCClient(server.http, microphone=False)
    try:
        answer = await quiet.connect()
        if answer.status != 201:
            return {"status": answer.status}
        started = time.monotonic()
        while time.monotonic() - started < bound_s:
            if await asyncio.to_thread(free_units, server) == 2:
                return {"unit_back_after_s": round(time.monotonic() - started, 1)}
            await asyncio.sleep(1.0)
        return {"unit_back_after_s": f"> {bound_s:.0f} (still held)"}
    finally:
        await quiet.close()


def attack_rtcp_only(server: live.LiveServer, good: str) -> dict[str, Any]:
    return asyncio.run(_rtcp_only(server, 90.0))


async def _big_message(server: live.LiveServer, size: int) -> dict[str, Any]:
    call = WebRTCClient(server.http)
    try:
        if (await call.connect()).status != 201:
            return {"status": "no call"}
        await call.events.until("session.created")
        call.pc.sctp._remote_max_message_size = 0  # a hostile client does not hold itself to the server's maximum
        watch = await asyncio.to_thread(Watch, server)
        started = time.monotonic()
        call.channel.send(json.dumps({"type": "conversation.item.create", "pad": "x" * size}))
        try:
            error = (await call.events.until("error", timeout=180))["error"]["code"]
        except Closed:
            error = "none: the data channel closed"
        except AssertionError:
            error = "none within 180 s"
        took = time.monotonic() - started
        return {"error": error, "seconds": round(took, 1), **(await asyncio.to_thread(watch.stop))}
    finally:
        await call.close()


def attack_message(server: live.LiveServer, good: str) -> dict[str, Any]:
    return asyncio.run(_big_message(server, 24 * MiB))


def attack_candidates(server: live.LiveServer, good: str) -> dict[str, Any]:
    """850 candidates, each a UDP socket of ours on 127.0.0.1: how many connectivity checks reach them in 10 s."""
    sockets = []
    for _ in range(850):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        sockets.append(sock)
    lines = "".join(
        f"a=candidate:{n} 1 udp {2000000000 - n} 127.0.0.1 {sock.getsockname()[1]} typ host\r\n"
        for n, sock in enumerate(sockets)
    )
    body = good.replace("a=ice-ufrag", lines + "a=ice-ufrag", 1).encode()
    status, _, headers, _ = request(server.port, "/v1/realtime/calls", body, source="127.0.0.4")
    checks = 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for sock in sockets:
            try:
                while True:
                    sock.recv(2048)
                    checks += 1
            except BlockingIOError:
                pass
        time.sleep(0.1)
    for sock in sockets:
        sock.close()
    if status == 201:
        request(server.port, headers["Location"], method="DELETE", source="127.0.0.4")
    return {"status": status, "checks_received_in_10s": checks}


def attack_errors(server: live.LiveServer, good: str) -> dict[str, Any]:
    body, content_type = multipart({"sdp": good, "session": "[" * 100_000 + "]" * 100_000})
    deep = request(server.port, "/v1/realtime/calls", body, content_type, source="127.0.0.5")[0]
    twice = request(server.port, "/v1/realtime/calls", good.replace("a=mid:1", "a=mid:0").encode(), source="127.0.0.6")
    flood: list[int] = []
    started = time.monotonic()
    while time.monotonic() - started < 5:
        flood.append(request(server.port, "/v1/realtime/calls", b"v=0\r\nx", source="127.0.0.7")[0])
    accepted = [s for s in flood if s != 429]
    return {
        "deep_session": deep,
        "duplicate_mid": twice[0],
        "flood_offers_per_s": round(len(flood) / 5),
        "flood_answered_not_429_per_s": round(len(accepted) / 5, 1),
        "origin_hangup": cross_origin_hang_up(server, good),
    }


def cross_origin_hang_up(server: live.LiveServer, good: str) -> int:
    status, _, headers, _ = request(server.port, "/v1/realtime/calls", good.encode(), source="127.0.0.8")
    if status != 201:
        return -status
    return request(
        server.port,
        headers["Location"] + "/hangup",
        b"",
        "text/plain",
        headers={"Origin": "https://evil.example"},
        source="127.0.0.8",
    )[0]


def attack_other_key(server: live.LiveServer, good: str) -> dict[str, Any]:
    alice = server.manage("create_api_key", "alice").stdout.strip()
    mallory = server.manage("create_api_key", "mallory").stdout.strip()
    status, _, headers, _ = request(
        server.port, "/v1/realtime/calls", good.encode(), headers={"Authorization": f"Bearer {alice}"}
    )
    if status != 201:
        return {"status": status}
    answer = request(server.port, headers["Location"], method="DELETE", headers={"Authorization": f"Bearer {mallory}"})
    request(server.port, headers["Location"], method="DELETE", headers={"Authorization": f"Bearer {alice}"})
    return {"another_keys_delete": answer[0]}


ATTACKS: dict[str, tuple[Callable[..., dict[str, Any]], dict[str, str]]] = {
    "blowup": (attack_blowup, {}),
    "bodies": (attack_bodies, {}),
    "hold": (attack_hold, {}),
    "hold_one_per_address": (attack_hold, {"S2S_MAX_CALLS_PER_ADDRESS": "1"}),
    "rtcp_only": (attack_rtcp_only, {}),
    "message": (attack_message, {"S2S_WEBRTC_PEER_TIMEOUT_S": "300"}),  # the sending client stalls itself
    "candidates": (attack_candidates, {}),
    "errors": (attack_errors, {}),
    "other_key": (attack_other_key, {"S2S_AUTH_REQUIRED": "1"}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, action="append", help="a tree to run (repeat: before, after)")
    parser.add_argument("--only", action="append", choices=sorted(ATTACKS))
    args = parser.parse_args()
    roots = args.root or [live.ROOT]
    offers = [asyncio.run(offer()) for _ in range(4)]
    for name, (attack, env) in ATTACKS.items():
        if args.only and name not in args.only:
            continue
        for root in roots:  # interleaved: each attack on every tree before the next attack
            live.ROOT = root.resolve()
            with tempfile.TemporaryDirectory() as tmp:
                server = live.LiveServer(Path(tmp), env=env).start()
                try:
                    figures = attack(server, offers) if attack is attack_hold else attack(server, offers[0])
                finally:
                    server.stop()
            print(json.dumps({"attack": name, "root": str(root), **figures}), flush=True)


if __name__ == "__main__":
    main()
