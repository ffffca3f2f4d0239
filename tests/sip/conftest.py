"""A real server with its SIP listener on loopback (loopback profile, a pool of 2), and real phones (baresip)."""

from __future__ import annotations

import base64
import json
import queue
import secrets
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from tests.sip.responder import Responder
from tests.support.baresip import Baresip, write_wav
from tests.support.polling import wait_for
from tests.support.server import LiveServer, free_port
from tests.support.speech import silence, tone


def sip_listener_env(port: int) -> dict[str, str]:
    """The settings of a SIP listener on 127.0.0.1:``port``, with RTP ports of its own (derived from it)."""
    first_rtp = 20000 + port % 10000 * 2
    return {"S2S_SIP_BIND": f"127.0.0.1:{port}", "S2S_SIP_RTP_PORTS": f"{first_rtp}-{first_rtp + 200}"}


def sip_server(tmp_path: Path, launcher: str = "daphne", **env: str) -> LiveServer:
    """A started server listening for SIP on a free port (``server.sip_uri``), with ``env`` on top."""
    port = free_port()
    live = LiveServer(
        tmp_path,
        env={
            **sip_listener_env(port),
            "S2S_SIP_NUMBERS": "masked",
            **env,
        },
        launcher=launcher,
    )
    live.sip_uri = f"sip:+15550001234@127.0.0.1:{port}"  # type: ignore[attr-defined]
    return live.start(ready_timeout=180)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    live = sip_server(tmp_path_factory.mktemp("sip"), S2S_SIP_RTP_TIMEOUT_S="3")
    yield live
    live.stop()


@pytest.fixture
def phones(tmp_path: Path) -> Iterator[Callable[..., Baresip]]:
    """Makes baresip phones (each speaking ``microphone``, a WAV) and stops them all after the test."""
    made: list[Baresip] = []

    def make(
        microphone: Path | None = None, codec: str = "PCMU", account: str = "", certificate: Path | None = None
    ) -> Baresip:
        home = tmp_path / f"phone{len(made)}"
        phone = Baresip(home, microphone or a_tone(tmp_path), codec, account, certificate).start()
        made.append(phone)
        return phone

    yield make
    for phone in made:
        phone.stop()


def a_tone(tmp_path: Path, seconds: float = 1.5, then_silence: float = 20.0) -> Path:
    """A WAV the loopback profile answers: half a second of silence, a tone (a turn), then silence."""
    samples = np.concatenate([silence(0.5, 8000), tone(seconds, 8000), silence(then_silence, 8000)])
    return write_wav(tmp_path / f"tone-{seconds}.wav", samples)


def free_units(server: LiveServer) -> int:
    """Free units as /readyz says (with authentication on, to the API key set as ``server.api_key``)."""
    key = getattr(server, "api_key", None)
    request = urllib.request.Request(f"{server.http}/readyz", headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:  # 503 when full: the body still counts
        body = exc.read()
    return json.loads(body)["free_units"]


def wait_free(server: LiveServer, count: int, timeout: float = 15.0) -> int:
    return wait_for(lambda: free_units(server) == count and count + 1, timeout, what=f"{count} free units") - 1


def wait_settled(server: LiveServer, count: int, quiet_s: float, timeout: float = 40.0) -> int:
    """``count`` free units, and still ``count`` after ``quiet_s``: calls that INVITEs sent just before may still
    claim a unit for a while (until their RTP times out), so one look can fall between two of them."""
    free_since: list[float] = []

    def settled() -> bool:
        if free_units(server) != count:
            free_since.clear()
            return False
        free_since[:] = free_since or [time.monotonic()]
        return time.monotonic() - free_since[0] >= quiet_s

    wait_for(settled, timeout, interval=0.2, what=f"{count} free units for {quiet_s} s")
    return count


def sip_sessions(server: LiveServer) -> list[dict]:
    """The audit's rows of SIP sessions, newest first (the server's own SQLite file)."""
    with sqlite3.connect(server.tmp_dir / "server.sqlite3") as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            "SELECT * FROM realtime_realtimesession WHERE transport = 'sip' ORDER BY started_at DESC"
        ).fetchall()
    return [dict(row) for row in rows]


def loud_seconds(samples: np.ndarray, rate: int, threshold: float = 0.05) -> float:
    """How long ``samples`` are loud (20 ms windows over ``threshold``)."""
    window = rate // 50
    frames = samples[: len(samples) // window * window].reshape(-1, window)
    return float((np.abs(frames).max(axis=1) > threshold).sum() * 0.02)


SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


class Webhook:
    """The operator's webhook endpoint: a real HTTP server in the test process that keeps what it receives."""

    def __init__(self) -> None:
        self.received: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.put((dict(self.headers.items()), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hooks"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def next(self, timeout: float = 15.0) -> tuple[dict[str, str], bytes]:
        return self.received.get(timeout=timeout)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture
def responders() -> Iterator[Callable[..., Responder]]:
    """Makes raw SIP callees (:class:`tests.sip.responder.Responder`) and closes them after the test."""
    made: list[Responder] = []

    def make(answer: str, host: str = "127.0.0.1") -> Responder:
        made.append(Responder(answer, host))
        return made[-1]

    yield make
    for responder in made:
        responder.close()
