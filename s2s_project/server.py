"""The daphne launcher behind ``manage.py serve``.

Daphne implements no ASGI lifespan, so this is where the pool starts and stops.
Stock daphne also cannot send an application's close code outside 1000 and
3000-4999 (autobahn refuses them and daphne falls back to 1011) and drops the
close reason; :class:`CloseCodeWebSocketProtocol` sends both as given, and
bounds what a connection may have waiting to be sent (a client that does not
read cannot make the server buffer without end).

SIGTERM (and SIGINT) stop admitting sessions (``/readyz`` answers 503), let
the live ones run for up to ``S2S_SHUTDOWN_GRACE_S``, close what is left with
1001, wait for the units and the records, then stop. A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from daphne import ws_protocol
from daphne.endpoints import build_endpoint_description_strings
from daphne.server import Server
from django.conf import settings
from django.utils import timezone

from realtime import cluster, records, runtime
from realtime.limits import max_frame_bytes

logger = logging.getLogger(__name__)


SEND_BUFFER_FULL_CODE = 1008


def pending_bytes(transport: object) -> int | None:
    """Bytes a Twisted TCP transport still holds for the peer (None where it cannot tell, e.g. TLS)."""
    try:
        return len(transport.dataBuffer) - transport.offset + transport._tempDataLen  # type: ignore[attr-defined]
    except AttributeError:
        return None


class CloseCodeWebSocketProtocol(ws_protocol.WebSocketProtocol):
    """Sends the application's close code (1008, 1011, 1013, ...) and reason unchanged.

    Also the send-buffer policy: when more than ``S2S_MAX_SEND_BUFFER_BYTES`` wait
    for a client that does not read, the connection is dropped (a close frame
    could not reach it either) and the application sees a disconnect with 1008.
    """

    send_overflow = False

    def handle_reply(self, message: dict) -> None:
        if message.get("type") == "websocket.send" and self._send_buffer_full():
            return
        if message.get("type") == "websocket.close" and self.state != self.STATE_CONNECTING:
            code = message.get("code") or 1000
            reason = message.get("reason") or None
            reason_bytes = reason.encode("utf-8")[:123] if reason else None
            self.sendCloseFrame(code=code, reasonUtf8=reason_bytes, isReply=False)
            return
        super().handle_reply(message)

    def _send_buffer_full(self) -> bool:
        if self.send_overflow:
            return True
        pending = pending_bytes(self.transport)
        if pending is None or pending <= settings.S2S_MAX_SEND_BUFFER_BYTES:
            return False
        logger.warning("%s: %s bytes wait for a client that does not read (limit %s): dropping the connection",
                       self.client_addr, pending, settings.S2S_MAX_SEND_BUFFER_BYTES)
        self.send_overflow = True
        self.dropConnection(abort=True)
        return True

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        super().onClose(wasClean, SEND_BUFFER_FULL_CODE if self.send_overflow else code, reason)


def install_close_code_protocol() -> None:
    ws_protocol.WebSocketFactory.protocol = CloseCodeWebSocketProtocol


LISTEN_BACKLOG = 2048


def serve(host: str, port: int, warm: bool = True, verbosity: int = 1) -> None:
    """Starts the pool (in the background, so probes answer while models load) and runs daphne."""
    from s2s_project.asgi import application

    install_close_code_protocol()
    started_at = timezone.now()
    runtime.interrupt_stale_sessions(started_at)
    runtime.start(background=True, warm=warm)
    cluster.start_heartbeat()  # publishes this node's slots for the admin and pool_status
    # The consumer answers a frame over the limit with "event_too_large" and goes on; only frames far over
    # it (beyond what is worth reading into memory) make autobahn close the socket with 1009.
    max_bytes = 2 * max_frame_bytes(settings.S2S_MAX_EVENT_BYTES)
    server = Server(
        application=application,
        # Twisted listens with a backlog of 50: a burst of connections (clients coming back after a restart)
        # overflows it. 2048 is uvicorn's and gunicorn's default (the kernel caps it at net.core.somaxconn).
        endpoints=[f"{endpoint}:backlog={LISTEN_BACKLOG}"
                   for endpoint in build_endpoint_description_strings(host=host, port=port)],
        websocket_timeout=-1,
        websocket_handshake_timeout=settings.S2S_WS_HANDSHAKE_TIMEOUT_S,
        websocket_connect_timeout=settings.S2S_WS_HANDSHAKE_TIMEOUT_S,
        websocket_max_message_size=max_bytes,
        websocket_max_frame_size=max_bytes,
        verbosity=verbosity,
        application_close_timeout=15,
        signal_handlers=False,  # ours below: drain first, then stop
    )
    install_shutdown_handlers()
    if not settings.S2S_AUTH_REQUIRED:
        logger.warning("authentication is OFF (S2S_AUTH_REQUIRED=0): anyone who can reach %s:%s may open sessions",
                       host, port)
    logger.info("serving on http://%s:%s (WebSocket at /v1/realtime)", host, port)
    try:
        server.run()
    finally:
        cluster.stop_heartbeat()
        runtime.stop()


# --- graceful shutdown -----------------------------------------------------------

_shutdown: asyncio.Task[None] | None = None


def install_shutdown_handlers() -> None:
    """SIGTERM/SIGINT start the drain on the reactor's loop; a second one stops at once."""
    from twisted.internet import reactor

    def on_signal(signum: int, frame: object) -> None:
        logger.info("received %s", signal.Signals(signum).name)
        reactor.callFromThread(_begin_shutdown)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _begin_shutdown() -> None:
    global _shutdown
    from twisted.internet import reactor

    if _shutdown is not None:
        logger.warning("second signal: stopping now")
        reactor.stop()
        return
    _shutdown = asyncio.ensure_future(drain(settings.S2S_SHUTDOWN_GRACE_S))
    _shutdown.add_done_callback(lambda _: reactor.stop())


async def drain(grace_s: float) -> None:
    """Stops admitting, waits up to ``grace_s`` for live sessions, closes the rest with 1001, flushes the records."""
    from realtime import consumers

    pool = runtime.get_pool()
    if pool is not None:
        pool.stop_admitting()
    cluster.nudge()
    logger.info("shutting down: no new sessions; %s live session(s) get up to %.0fs", len(consumers.LIVE), grace_s)
    deadline = time.monotonic() + grace_s
    while consumers.LIVE and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    try:
        closed = await consumers.close_all()
        if closed:
            logger.info("closed %s session(s) with 1001 after the grace period", closed)
            await asyncio.sleep(0.2)  # let the close frames go out
        flushed = await asyncio.to_thread(records.writer.flush, 10.0)
        if not flushed:
            logger.error("shutting down with %s session record(s) unwritten", records.writer.backlog)
    except Exception:
        logger.exception("the graceful shutdown failed; stopping anyway")
