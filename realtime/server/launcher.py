"""The daphne launcher behind ``manage.py serve``.

Daphne implements no ASGI lifespan, so this is where the pool starts and stops.
Stock daphne also cannot send an application's close code outside 1000 and
3000-4999 (autobahn refuses them and daphne falls back to 1011) and drops the
close reason; :class:`CloseCodeWebSocketProtocol` sends both as given, and
bounds what a connection may have waiting to be sent (a client that does not
read cannot make the server buffer without end). Twisted's warnings and errors, which daphne drops,
go to Python logging (:func:`route_twisted_log`).

SIGTERM (and SIGINT) stop admitting sessions (``/readyz`` answers 503), let
the live ones run for up to ``S2S_SHUTDOWN_GRACE_S``, close what is left with
1001, wait for the units and the records, then stop. A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import signal
from typing import Any

import txaio
from autobahn.websocket.types import ConnectionDeny
from daphne import server as daphne_server, ws_protocol
from daphne.endpoints import build_endpoint_description_strings
from daphne.server import Server, twisted_loop
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from twisted.internet.interfaces import IReactorFromThreads, ITCPTransport

from realtime.access.checks import uses_development_key
from realtime.node import runtime
from realtime.protocol.close_codes import CLOSE_POLICY
from realtime.protocol.limits import max_frame_bytes
from realtime.server import http_phase, tls
from realtime.transports import not_found
from realtime.transports.sip.signalling import listeners
from s2s_project.asgi import application

logger = logging.getLogger(__name__)


# After the closing handshake timed out, what the server sent before has this long to reach the client.
CLOSE_FLUSH_S = 10.0


def _abort_if_open(transport: ITCPTransport) -> None:
    """Cuts a connection whose graceful close has not finished (the client reads nothing)."""
    if getattr(transport, "connected", False) and not getattr(transport, "disconnected", False):
        transport.abortConnection()


def pending_bytes(transport: object) -> int | None:
    """Bytes a Twisted TCP transport still holds for the peer (None where it cannot tell).

    Under TLS the protocol writes to Twisted's TLS wrapper, which encrypts at once and hands the bytes to the
    TCP transport beneath it: that one holds what waits (the handshake's own buffer aside)."""
    # TLSMemoryBIOProtocol -> TCP; the buffer is a private part of Twisted's FileDescriptor, where there is one.
    tcp: Any = getattr(transport, "transport", None) or transport
    try:
        return len(tcp.dataBuffer) - tcp.offset + tcp._tempDataLen
    except AttributeError:
        return None


class CloseCodeWebSocketProtocol(ws_protocol.WebSocketProtocol):
    """Sends the application's close code (1008, 1011, 1013, ...) and reason unchanged.

    Also the send-buffer policy: when more than ``S2S_MAX_SEND_BUFFER_BYTES`` wait
    for a client that does not read, the connection is dropped (a close frame
    could not reach it either) and the application sees a disconnect with 1008.
    """

    send_overflow = False
    socket_opened: float  # daphne's: when the connection was accepted, for its handshake deadline

    def onConnect(self, request: object) -> object:
        """daphne's connect timeout counts from the TCP accept, not from the upgrade: one deadline in all."""
        result = super().onConnect(request)
        accepted = http_phase.opened_at(self.transport)
        if accepted is not None:
            self.socket_opened = min(self.socket_opened, accepted)
        return result

    def handle_reply(self, message: dict) -> None:
        if message.get("type") == "websocket.send" and self._send_buffer_full():
            return
        if message.get("type", "").startswith(f"{not_found.DENIAL}.") and self.state == self.STATE_CONNECTING:
            self._deny(message)
            return
        if message.get("type") == "websocket.close" and self.state != self.STATE_CONNECTING:
            code = message.get("code") or 1000
            reason = message.get("reason") or None
            reason_bytes = reason.encode("utf-8")[:123] if reason else None
            self.sendCloseFrame(code=code, reasonUtf8=reason_bytes, isReply=False)
            return
        super().handle_reply(message)

    def _deny(self, message: dict) -> None:
        """The ASGI WebSocket denial response (the status of its start; the body is left out): the handshake
        refused with that status, as daphne refuses one with 403 for a close before the accept."""
        if message["type"] != f"{not_found.DENIAL}.start" or not hasattr(self, "handshake_deferred"):
            return
        self.handshake_deferred.errback(ConnectionDeny(code=int(message.get("status", 403)), reason="Not Found"))
        del self.handshake_deferred
        self.server.protocol_disconnected(self)

    def _send_buffer_full(self) -> bool:
        if self.send_overflow:
            return True
        pending = pending_bytes(self.transport)
        if pending is None or pending <= settings.S2S_MAX_SEND_BUFFER_BYTES:
            return False
        logger.warning(
            "%s: %s bytes wait for a client that does not read (limit %s): dropping the connection",
            self.client_addr,
            pending,
            settings.S2S_MAX_SEND_BUFFER_BYTES,
        )
        self.send_overflow = True
        self.dropConnection(abort=True)
        return True

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        if not hasattr(self, "server"):
            # autobahn refused the handshake before daphne saw it (400 for an Origin it cannot read, or one sent
            # twice): no application ran and there is nothing to tell; daphne's own onClose would raise here.
            return
        super().onClose(wasClean, CLOSE_POLICY if self.send_overflow else code, reason)

    def onCloseHandshakeTimeout(self) -> None:
        """The client did not answer the server's close frame in time (``closeHandshakeTimeout``): the
        connection ends with a FIN, not autobahn's reset, so that what was sent before still reaches the client.

        A reset makes the client's kernel throw away what it has not read yet: a client busy for a second (a
        phone, a storm of connections from one process) lost the handshake's answer, the ``error`` and the close
        frame of a refusal (1008, no free slot) and saw only "connection closed while reading HTTP status line".
        What the transport cannot flush within ``CLOSE_FLUSH_S`` (a client that reads nothing) is cut then.
        """
        self.closeHandshakeTimeoutCall = None
        if self.state == self.STATE_CLOSED:
            return
        self.wasClean = False
        self.wasNotCleanReason = (
            "WebSocket closing handshake timeout (peer did not finish the closing handshake in time)"
        )
        self.wasCloseHandshakeTimeout = True
        self.dropConnection(abort=False)
        transport = self.transport
        # txaio binds its call_later only once a framework is picked (autobahn picks Twisted): mypy cannot see it.
        txaio.call_later(CLOSE_FLUSH_S, _abort_if_open, transport)  # type: ignore[attr-defined]


class DenyingServer(Server):
    """daphne offering the ASGI WebSocket denial response (``websocket.http.response``), which
    :class:`CloseCodeWebSocketProtocol` carries out: an unknown path's handshake gets 404."""

    def create_application(self, protocol: Any, scope: dict[str, Any]) -> Any:
        if scope.get("type") == "websocket":
            scope.setdefault("extensions", {})[not_found.DENIAL] = {}
        return super().create_application(protocol, scope)


def install_protocols() -> None:
    """Our WebSocket protocol (close codes, send buffer, one handshake deadline) and HTTP channel (request
    deadline, per-address cap: :mod:`realtime.server.http_phase`) in daphne."""
    ws_protocol.WebSocketFactory.protocol = CloseCodeWebSocketProtocol
    daphne_server.HTTPFactory = http_phase.DeadlineHTTPFactory


LISTEN_BACKLOG = 2048


def serve(host: str, port: int, warm: bool = True, verbosity: int = 1) -> None:
    """Starts the process's parts (the pool in the background, so probes answer while models load), runs daphne."""
    refuse_public_development_key(host)
    install_protocols()
    rt = runtime.current()
    rt.start(warm=warm, listeners=listeners(), loop=twisted_loop)
    # The consumer answers a frame over the limit with "event_too_large" and goes on; only frames far over
    # it (beyond what is worth reading into memory) make autobahn close the socket with 1009.
    max_bytes = 2 * max_frame_bytes(settings.S2S_MAX_EVENT_BYTES)
    server = DenyingServer(
        application=application,
        # Twisted listens with a backlog of 50: a burst of connections (clients coming back after a restart)
        # overflows it. 2048 is uvicorn's and gunicorn's default (the kernel caps it at net.core.somaxconn).
        endpoints=[
            f"{tls.endpoint(endpoint, settings.S2S_TLS)}:backlog={LISTEN_BACKLOG}"
            for endpoint in build_endpoint_description_strings(host=host, port=port)
        ],
        websocket_timeout=-1,
        websocket_handshake_timeout=settings.S2S_WS_HANDSHAKE_TIMEOUT_S,
        websocket_connect_timeout=settings.S2S_WS_HANDSHAKE_TIMEOUT_S,
        websocket_max_message_size=max_bytes,
        websocket_max_frame_size=max_bytes,
        verbosity=verbosity,
        application_close_timeout=15,
        signal_handlers=False,  # ours below: drain first, then stop
    )
    install_shutdown_handlers(rt)
    route_twisted_log()
    if not settings.S2S_AUTH_REQUIRED:
        logger.warning(
            "authentication is OFF (S2S_AUTH_REQUIRED=0): anyone who can reach %s:%s may open sessions", host, port
        )
    secure = settings.S2S_TLS is not None
    logger.info(
        "serving on %s://%s:%s (WebSocket at %s://%s:%s/v1/realtime)",
        *("https" if secure else "http", host, port, "wss" if secure else "ws", host, port),
    )
    try:
        server.run()
    finally:
        rt.stop()


# autobahn's warning for a client that did not answer the server's close frame within a second: routine
# (the connection is dropped, as it should be), and one line per such client under load.
ROUTINE_DROP = "dropping connection to peer"


def route_twisted_log() -> None:
    """Twisted's warnings and errors go to Python logging (logger ``twisted``); daphne sends Twisted's whole
    log nowhere below verbosity 2, which hid, among others, an exception in a protocol and a connection
    closed unanswered because the process was out of file descriptors (logged here as a warning)."""
    from twisted.logger import ILogObserver, LogLevel, STDLibLogObserver, formatEvent, globalLogPublisher
    from zope.interface import provider

    forward = STDLibLogObserver("twisted")
    shown = {LogLevel.warn, LogLevel.error, LogLevel.critical}

    @provider(ILogObserver)
    def observe(event: dict) -> None:
        text = formatEvent(event)
        if text.startswith("EMFILE recovery: Closed socket"):
            logger.warning(
                "out of file descriptors (open-files limit %s): a new connection was closed unanswered (%s)",
                resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                text,
            )
        elif event.get("log_level") in shown and not text.startswith(ROUTINE_DROP):
            forward(event)

    globalLogPublisher.addObserver(observe)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def refuse_public_development_key(host: str) -> None:
    """Anyone can forge cookies signed with the public development key: never serve other hosts with it."""
    if uses_development_key() and not is_loopback(host):
        raise ImproperlyConfigured(
            f"Refusing to serve on {host}: DJANGO_SECRET_KEY is not set, and the development key is public "
            "(anyone could forge this server's signed cookies). Set DJANGO_SECRET_KEY to 50 or more random "
            "characters, or bind to 127.0.0.1."
        )


# --- graceful shutdown -----------------------------------------------------------

_shutdown: asyncio.Task[None] | None = None


def install_shutdown_handlers(rt: runtime.Runtime) -> None:
    """SIGTERM/SIGINT start the drain on the reactor's loop; a second one stops at once."""

    from twisted.internet import reactor  # daphne installs its asyncio reactor first: import it late

    def on_signal(signum: int, frame: object) -> None:
        logger.info("received %s", signal.Signals(signum).name)
        IReactorFromThreads(reactor).callFromThread(_begin_shutdown, rt)  # the reactor, as Twisted types it

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _begin_shutdown(rt: runtime.Runtime) -> None:
    global _shutdown
    from twisted.internet import reactor

    if _shutdown is not None:
        logger.warning("second signal: stopping now")
        reactor.stop()
        return
    _shutdown = asyncio.ensure_future(rt.drain(settings.S2S_SHUTDOWN_GRACE_S))
    _shutdown.add_done_callback(lambda _: reactor.stop())
