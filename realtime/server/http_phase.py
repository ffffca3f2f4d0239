"""The phase before a session exists, under daphne: bounded in time and per client address.

Twisted's HTTP channel only has an idle timeout (60 s) that every byte resets, so
a client trickling one header byte every few seconds could hold a socket for
ever, and a few hundred such sockets exhaust the open-files limit. Here:

* every request must arrive whole (request line, headers, body) within
  ``S2S_WS_HANDSHAKE_TIMEOUT_S`` of the connection (or of the previous response,
  on a kept-alive connection), whatever the trickle: past it the client gets 408
  and the connection is closed;
* a WebSocket upgrade counts from the same moment: it must be accepted within
  ``S2S_WS_HANDSHAKE_TIMEOUT_S`` of the TCP accept in total (daphne's own
  connect check measures from the upgrade otherwise);
* one client address may have at most ``S2S_MAX_PENDING_PER_ADDRESS``
  connections whose request has not arrived yet; more are closed at once;
* a request body over its cap (:func:`realtime.server.body_limit.cap_for`) is refused with a JSON 413
  as soon as its ``Content-Length`` says so, or as soon as that many bytes came (chunked):
  what else it sends is read and dropped for up to ``LINGER_S``, so the client reads
  the 413 instead of a reset, and nothing of it is kept (:class:`CappedRequest`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from daphne import http_protocol
from django.conf import settings
from twisted.internet.interfaces import ITCPTransport
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web import http

from realtime.server import body_limit, forwarded

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
ABORT_AFTER_S = 2.0  # a client that does not read even the 408 is cut off
# A refused body is read and dropped this long after the 413 (as nginx's lingering close), so that a client
# that sends its whole body before it reads (most do, without Expect: 100-continue) still reads the 413.
LINGER_S = 10.0


class PendingByAddress:
    """How many connections each client address has that have not sent a whole request yet."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def enter(self, address: str, limit: int) -> bool:
        """Counts one more; False (and nothing counted) when the address already has ``limit`` (0: no limit)."""
        with self._lock:
            count = self._counts.get(address, 0)
            if limit and count >= limit:
                return False
            self._counts[address] = count + 1
            return True

    def leave(self, address: str) -> None:
        with self._lock:
            count = self._counts.get(address, 0) - 1
            if count > 0:
                self._counts[address] = count
            else:
                self._counts.pop(address, None)

    def count(self, address: str) -> int:
        with self._lock:
            return self._counts.get(address, 0)


pending = PendingByAddress()


ACCEPTED_AT = "s2s_accepted_at"  # our stamp on Twisted's transport: when the connection was accepted (wall clock)


class DeadlineHTTPChannel(http.HTTPChannel):
    """An HTTP channel whose requests must arrive whole within a deadline, capped per client address."""

    transport: ITCPTransport  # TCP, or TLS over TCP (an ITLSTransport is one): set before connectionMade
    _deadline: Any = None
    _counted = False
    _address = ""

    def connectionMade(self) -> None:
        super().connectionMade()
        setattr(self.transport, ACCEPTED_AT, time.time())  # read by the WebSocket side (opened_at)
        self._address = getattr(self.transport.getPeer(), "host", "") or ""
        self._await_request()

    def _await_request(self) -> None:
        """Starts the wait for the next request: counted for its address, and with a deadline."""
        # A trusted proxy carries every client's connections: it caps each client itself.
        proxy = forwarded.is_trusted(self._address, settings.S2S_TRUSTED_PROXIES)
        if not pending.enter(self._address, 0 if proxy else settings.S2S_MAX_PENDING_PER_ADDRESS):
            logger.warning(
                "%s has %s connections without a whole request (S2S_MAX_PENDING_PER_ADDRESS): closing one more",
                self._address,
                pending.count(self._address),
            )
            self.transport.abortConnection()
            return
        self._counted = True
        self._deadline = self.callLater(settings.S2S_WS_HANDSHAKE_TIMEOUT_S, self._request_too_slow)

    def _request_arrived(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        if self._counted:
            self._counted = False
            pending.leave(self._address)

    def _request_too_slow(self) -> None:
        self._deadline = None
        logger.info(
            "%s sent no whole request in %ss: closing with 408", self._address, settings.S2S_WS_HANDSHAKE_TIMEOUT_S
        )
        self._request_arrived()
        self.transport.write(REQUEST_TIMEOUT)
        self.transport.loseConnection()
        self._abortingCall = self.callLater(ABORT_AFTER_S, self.forceAbortClient)

    def allContentReceived(self) -> None:
        self._request_arrived()  # before the request runs: an upgrade hands the socket over right here
        super().allContentReceived()

    def requestDone(self, request: http.Request) -> None:
        super().requestDone(request)
        if self.persistent and self.transport is not None and not self._handlingRequest:
            self._await_request()  # a kept-alive connection waits for its next request under the same rules

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._request_arrived()
        super().connectionLost(reason)


class CappedRequest(http_protocol.WebRequest):
    """daphne's request, whose body may not pass its cap (see the module's docstring)."""

    _cap = 0
    _received = 0
    _refused = False

    def gotLength(self, length: int | None) -> None:
        path = (getattr(self.channel, "_path", b"") or b"").split(b"?", 1)[0].decode("latin-1")
        self._cap = body_limit.cap_for(path)
        if length is not None and length > self._cap:
            super().gotLength(0)
            self._refuse()
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._received += len(data)
        if self._received > self._cap:
            self._refuse()
            return
        super().handleContentChunk(data)

    def _refuse(self) -> None:
        """Answers 413 now; the rest of the body is dropped as it comes, and the connection closes after it."""
        self._refused = True
        channel = self.channel
        logger.info("%s: a request body over %s bytes: 413", getattr(channel, "_address", "?"), self._cap)
        if isinstance(channel, DeadlineHTTPChannel):
            channel._request_arrived()  # its own deadline does not apply to a refused request
        channel.persistent = False
        channel.transport.write(body_limit.too_large_response(self._cap))
        channel._abortingCall = channel.callLater(LINGER_S, channel.forceAbortClient)

    def process(self) -> Any:
        if self._refused:  # the whole (dropped) body came: close cleanly, the 413 went out already
            self.channel.loseConnection()
            return None
        return super().process()


class DeadlineHTTPFactory(http_protocol.HTTPFactory):
    """daphne's HTTP factory, building :class:`DeadlineHTTPChannel` channels with :class:`CappedRequest`."""

    def protocol(self) -> http._GenericHTTPChannelProtocol:
        return http._GenericHTTPChannelProtocol(DeadlineHTTPChannel())

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = CappedRequest
        return protocol


def opened_at(transport: Any) -> float | None:
    """When the TCP connection under a WebSocket was accepted (wall clock), where the HTTP side noted it."""
    return getattr(transport, ACCEPTED_AT, None)
