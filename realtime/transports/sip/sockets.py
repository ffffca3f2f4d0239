"""The SIP listener's sockets: UDP, TCP and TLS transports for aiosipua that no input can stop.

A send that fails is logged once per peer and dropped (never closing the socket); a TCP connection without a
dialog closes when idle, with caps per address and in all; a request's response goes back on the connection
it came on whatever its ``Via`` says; each transport says whether it is ``alive`` and can be ``restart``-ed
(the listener's watchdog, :mod:`realtime.transports.sip.signalling`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from aiosipua import SipRequest, SipResponse
from aiosipua.transport import TcpSipTransport, UdpSipTransport, _read_sip_message

from realtime.transports.sip import guard
from realtime.transports.sip.config import SipConfig

logger = logging.getLogger(__name__)


class _DatagramProtocol(asyncio.DatagramProtocol):
    def __init__(self, owner: UdpTransport) -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.owner._dispatch(data, (str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:
        logger.debug("SIP over UDP: %s", exc)


class UdpTransport(UdpSipTransport):
    """aiosipua's UDP transport, bound without its protocol's ``assert isinstance(transport,
    asyncio.DatagramTransport)`` (Python 3.11's selector transport is not one), whose sends never close the
    socket: a destination is checked first (:func:`guard.destination`), a failed send dropped and logged once
    per peer."""

    failed_sends = guard.PeerLog("SIP over UDP: a send")
    _udp_transport: asyncio.DatagramTransport | None  # aiosipua's

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._udp_transport, _ = await loop.create_datagram_endpoint(
            lambda: _DatagramProtocol(self), local_addr=self.local_addr
        )

    def send(self, message: SipRequest | SipResponse, addr: tuple[str, int]) -> None:
        target = guard.destination(addr)
        if target is None:
            self.failed_sends.failed(addr, "not an IP address and port")
            return
        try:
            super().send(message, target)
        except Exception as exc:
            self.failed_sends.failed(addr, exc)

    @property
    def alive(self) -> bool:
        return self._udp_transport is not None and not self._udp_transport.is_closing()

    async def restart(self) -> None:
        """Binds again after the socket was closed (its close finished first: the port is free)."""
        if self._udp_transport is not None:
            self._udp_transport.abort()
            self._udp_transport = None
        await asyncio.sleep(0)  # the transport's connection_lost, which closes the socket, runs now
        await self.start()


class TcpBounds(TypedDict):
    """The bounds of :class:`TcpTransport` (and :class:`TlsTransport`), from the SIP settings."""

    idle_timeout_s: float
    max_per_address: int
    max_total: int
    carries_call: Callable[[TcpSipTransport, tuple[str, int]], bool]


@dataclass
class TcpTransport(TcpSipTransport):
    """aiosipua's TCP transport with bounds: a connection that carries no call and sends nothing for
    ``idle_timeout_s`` is closed; at most ``max_per_address`` connections from one address and ``max_total`` in
    all. A response goes back on the connection its request came in on (RFC 3261 s18.2.2), whatever port its
    ``Via`` names; a send that cannot be made is dropped and logged once per peer."""

    idle_timeout_s: float = 30.0
    max_per_address: int = 32
    max_total: int = 256
    carries_call: Callable[[TcpSipTransport, tuple[str, int]], bool] = lambda _transport, _addr: False
    _server: asyncio.Server | None = field(default=None, init=False, repr=False)  # aiosipua's, as it declares it
    _sources: OrderedDict[str, tuple[str, int]] = field(default_factory=OrderedDict, init=False, repr=False)
    _per_address: Counter[str] = field(default_factory=Counter, init=False, repr=False)
    name = "TCP"

    def __post_init__(self) -> None:
        self.failed_sends = guard.PeerLog(f"SIP over {self.name}: a send")
        self.refused = 0  # connections over a cap, closed at once
        self.idle_closed = 0  # connections closed for idling without a call

    async def _handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        addr = (str(peer[0]), int(peer[1])) if peer else ("0.0.0.0", 0)
        if self._per_address[addr[0]] >= self.max_per_address or len(self._connections) >= self.max_total:
            self.refused += 1
            self.failed_sends.failed(addr[0], "a connection over the caps (S2S_SIP_TCP_MAX_*) closed at once")
            writer.close()
            return
        self._per_address[addr[0]] += 1
        self._connections[addr] = (reader, writer)
        try:
            while True:
                try:
                    async with asyncio.timeout(self.idle_timeout_s):
                        data = await _read_sip_message(reader)
                except TimeoutError:
                    if self.carries_call(self, addr):
                        continue
                    self.idle_closed += 1
                    break
                if data is None:
                    break
                self._dispatch(data, addr)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, ssl.SSLError):
            pass
        finally:
            self._connections.pop(addr, None)
            self._per_address[addr[0]] -= 1
            if self._per_address[addr[0]] <= 0:
                del self._per_address[addr[0]]
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await writer.wait_closed()

    def _dispatch(self, data: bytes, addr: tuple[str, int]) -> None:
        """Notes which connection each request's top ``Via`` branch came in on, then aiosipua's dispatch."""
        head = data[: data.find(b"\r\n\r\n") + 1 or len(data)]
        branch = _top_branch(head)
        if branch:
            self._sources[branch] = addr
            self._sources.move_to_end(branch)
            while len(self._sources) > MAX_SOURCES:
                self._sources.popitem(last=False)
        super()._dispatch(data, addr)

    def send_reply(self, response: SipResponse) -> None:
        vias = response.headers.get("via")
        branch = _top_branch(("Via: " + vias[0]).encode("utf-8", "replace")) if vias else ""
        source = self._sources.get(branch) if branch else None
        if source is not None and source in self._connections:
            self.send(response, source)
            return
        super().send_reply(response)

    def send(self, message: SipRequest | SipResponse, addr: tuple[str, int]) -> None:
        self._name_transport(message)
        try:
            super().send(message, addr)
        except Exception as exc:  # no connection to that address (any more)
            self.failed_sends.failed(addr, exc)

    def _name_transport(self, message: SipRequest | SipResponse) -> None:
        """A request we send (an outbound call's INVITE, ACK, CANCEL, BYE; a REFER) names this transport in its top
        ``Via`` and its ``Contact`` (aiosipua writes UDP and no transport): the answers, and the other side's
        requests in the dialog, come back over it."""
        if not isinstance(message, SipRequest):
            return
        contact = message.headers.get_first("contact")
        if contact and "transport=" not in contact.lower() and contact.endswith(">"):
            message.headers.set_single("Contact", contact[:-1] + f";transport={self.name.lower()}>")
        vias = message.headers.get("via")
        if vias and vias[0].upper().startswith("SIP/2.0/UDP "):
            message.headers.remove("via")
            for index, via in enumerate(vias):
                message.headers.append("Via", f"SIP/2.0/{self.name} " + via[12:] if index == 0 else via)

    async def connect(
        self, remote_addr: tuple[str, int], server_name: str = ""
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection of our own to ``remote_addr`` (an outbound call's callee or trunk, which TLS knows as
        ``server_name``), reused while it is open; it carries the call's requests and answers and is closed by
        :meth:`disconnect`."""
        if remote_addr in self._connections:
            return self._connections[remote_addr]
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await self._open(remote_addr, server_name)
        self._connections[remote_addr] = (reader, writer)
        self._spawn(self._handle_incoming(reader, writer, remote_addr))
        return reader, writer

    async def _open(
        self, remote_addr: tuple[str, int], server_name: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(remote_addr[0], remote_addr[1])

    def disconnect(self, remote_addr: tuple[str, int]) -> None:
        """Closes the connection to ``remote_addr`` (what is written still goes out)."""
        connection = self._connections.pop(remote_addr, None)
        if connection is not None:
            connection[1].close()

    @property
    def alive(self) -> bool:
        return self._server is not None and self._server.is_serving()

    async def restart(self) -> None:
        """Listens again after the server socket was closed; connections already open (calls) stay."""
        if self._server is not None:
            self._server.close()
            self._server = None
        await asyncio.sleep(0)
        await self.start()


CONNECT_TIMEOUT_S = 10.0  # an outbound call's TCP or TLS connection to its callee or trunk
MAX_SOURCES = 4096  # requests whose connection is remembered for their responses
_BRANCH = re.compile(rb"^(?:via|v)\s*:[^\r\n]*?;\s*branch=([^;,\s]+)", re.IGNORECASE | re.MULTILINE)


def _top_branch(head: bytes) -> str:
    """The branch of the first ``Via`` in a message's head ("" none)."""
    found = _BRANCH.search(head)
    return found.group(1).decode("latin1") if found else ""


@dataclass
class TlsTransport(TcpTransport):
    """The TCP transport behind TLS (RFC 3261 s26.2): its server socket wrapped in ``ssl_context``.

    What the server writes names TLS: the Contact of its answers (so the caller's BYE comes back over
    TLS, not as plain UDP to the TLS port) and the Via of its own requests (a BYE, a REFER)."""

    ssl_context: ssl.SSLContext | None = None
    handshake_timeout_s: float = 10.0
    client_context: ssl.SSLContext | None = None  # an outbound call's TLS to its callee or trunk
    name = "TLS"

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle_connection,
            host=self.local_addr[0],
            port=self.local_addr[1],
            ssl=self.ssl_context,
            ssl_handshake_timeout=self.handshake_timeout_s,
        )

    def _name_transport(self, message: SipRequest | SipResponse) -> None:
        """Requests as on TCP; the Contact of our answers too (the caller's BYE comes back over TLS)."""
        contact = message.headers.get_first("contact")
        if isinstance(message, SipResponse) and contact and "transport=" not in contact.lower() and contact[-1] == ">":
            message.headers.set_single("Contact", contact[:-1] + ";transport=tls>")
        super()._name_transport(message)

    async def _open(
        self, remote_addr: tuple[str, int], server_name: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """TLS to ``remote_addr``, its certificate checked against ``S2S_SIP_OUTBOUND_TLS_CA`` (else the system's
        CAs) for ``server_name`` (the host the target or the proxy names; the address when it names none)."""
        context = self.client_context or ssl.create_default_context()
        return await asyncio.open_connection(
            remote_addr[0],
            remote_addr[1],
            ssl=context,
            server_hostname=server_name or remote_addr[0],
            ssl_handshake_timeout=CONNECT_TIMEOUT_S,
        )


TRANSPORT_NAMES = {UdpTransport: "sip-udp", TcpTransport: "sip-tcp", TlsTransport: "sip-tls"}


def client_tls_context(config: SipConfig) -> ssl.SSLContext:
    """An outbound call's TLS: TLS 1.2 at least, the peer's certificate checked (``S2S_SIP_OUTBOUND_TLS_CA``, else
    the system's CAs) and its name or address."""
    context = ssl.create_default_context(cafile=config.outbound_tls_ca or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def server_tls_context(config: SipConfig) -> ssl.SSLContext:
    """The TLS listener's context: its certificate chain and key (PEM), TLS 1.2 at least, no client certificate."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.tls_cert, config.tls_key)
    return context
