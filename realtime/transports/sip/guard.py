"""What the SIP and RTP side takes from the network, checked before it is used.

Addresses and ports come from strangers: a request's ``Via`` and ``Contact``, an offer's
``c=`` and ``m=`` lines. A send to an impossible one (port 99999, a host name) would make
asyncio close the whole socket ("Fatal write error on datagram transport"), so every
destination is checked before a send, a send that fails anyway is dropped, and each is
logged once per peer. A request whose ``Via`` or ``Contact`` names such a port, or whose
``Call-ID`` is empty, is answered 400; an offer whose audio cannot be sent to (not a unicast
address of the listener's family: multicast, broadcast, link-local) 488, as RFC 3261 says.
Refusals are logged through :class:`RefusalLog`, a line per peer and status a minute, so a
flood of them is a few lines with a count, not a line each.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from aiosipua import SdpMessage, SipRequest
from aiosipua.headers import parse_address, parse_via

logger = logging.getLogger(__name__)

MAX_PEERS_REMEMBERED = 4096  # peers whose failed send (or refusal) was logged: older ones may be logged again
REFUSAL_LOG_INTERVAL_S = 60.0  # a peer's refusals of one status are logged at most once this long
REFUSAL_LINES_PER_INTERVAL = 100  # and all peers' together at most this many lines in that time


def destination(addr: Any) -> tuple[str, int] | None:
    """``addr`` as a destination a socket may send to: an IP literal and a port from 1 to 65535; else None."""
    try:
        host, port = addr[0], addr[1]
        ip = ipaddress.ip_address(str(host).strip("[]"))
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535 or ip.is_unspecified:
        return None
    return str(ip), port


class PeerLog:
    """Logs a failure once per peer (bounded), and counts them all."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0
        self._seen: OrderedDict[str, None] = OrderedDict()

    def failed(self, peer: Any, why: object) -> None:
        self.count += 1
        key = repr(peer)[:200]
        if key in self._seen:
            return
        self._seen[key] = None
        if len(self._seen) > MAX_PEERS_REMEMBERED:
            self._seen.popitem(last=False)
        logger.warning("%s to %s dropped: %s (%s so far; once per peer)", self.what, key, why, self.count)


class RefusalLog:
    """Logs refused requests at most once per peer (its IP) and status per :data:`REFUSAL_LOG_INTERVAL_S`, and
    :data:`REFUSAL_LINES_PER_INTERVAL` lines in all, each line with the refusals it stands for; a flood from
    one address (or from many spoofed ones) is a few lines a minute, not one per packet. Bounded: the
    :data:`MAX_PEERS_REMEMBERED` peers heard from last."""

    def __init__(self, what: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.count = 0
        self._clock = clock
        self._peers: OrderedDict[tuple[str, int], tuple[float, int]] = OrderedDict()  # -> (logged at, unlogged)
        self._window = (0.0, 0)  # (start of this interval, lines logged in it)

    def refused(self, peer: str, status: int, why: str, what: str = "") -> bool:
        """Counts one refusal of ``peer``; True: it was logged (with the ones not logged since). ``what``: what
        was refused (default: this log's)."""
        self.count += 1
        now = self._clock()
        key = (peer[:64], status)
        logged_at, unlogged = self._peers.pop(key, (None, 0))
        start, lines = self._window
        if now - start >= REFUSAL_LOG_INTERVAL_S:
            start, lines = now, 0
        if (logged_at is not None and now - logged_at < REFUSAL_LOG_INTERVAL_S) or lines >= REFUSAL_LINES_PER_INTERVAL:
            self._peers[key] = (logged_at if logged_at is not None else now - REFUSAL_LOG_INTERVAL_S, unlogged + 1)
            self._evict()
            return False
        self._window = (start, lines + 1)
        self._peers[key] = (now, 0)
        self._evict()
        logger.info(
            "%s from %s refused (%s): %s; %s from it not logged in the last minute, %s refused in all",
            what or self.what,
            key[0],
            status,
            why,
            unlogged,
            self.count,
        )
        return True

    def _evict(self) -> None:
        while len(self._peers) > MAX_PEERS_REMEMBERED:
            self._peers.popitem(last=False)


def _port_ok(port: int | None) -> bool:
    """A port a header may name: none, or 0 to 65535 (0 and none both mean the default, 5060)."""
    return port is None or 0 <= port <= 65535


def request_problem(request: SipRequest) -> str | None:
    """Why a request cannot be answered as it says (400), or None: an empty ``Call-ID`` (it names no call or
    transaction), a ``Via`` or ``Contact`` that names an impossible port, or cannot be read."""
    if not (request.call_id or "").strip():
        return "Empty Call-ID"
    try:
        vias = request.headers.get("via")
        if vias:
            via = parse_via(vias[0])
            rport = via.params.get("rport")  # with a value: where the response goes, whatever the port says
            if rport and not (rport.isdigit() and 1 <= int(rport) <= 65535):
                return "Bad Via port"
            if not rport and not _port_ok(via.port):
                return "Bad Via port"
        for contact in request.headers.get("contact"):
            if contact.strip() == "*":
                continue
            if not _port_ok(parse_address(contact).uri.port):
                return "Bad Contact port"
    except Exception:  # a header aiosipua's parser cannot read
        return "Malformed Via or Contact"
    return None


def media_problem(host: str, family: int, caller_ip: str) -> str | None:
    """Why RTP cannot go to ``host`` (an offer's audio address), or None: it must be one unicast host of the
    listener's address ``family`` (4 or 6): not multicast, broadcast, link-local, unspecified or reserved (a
    send there fails at every 20 ms frame, or reaches a whole network); a loopback address only from a caller
    on loopback (else the server would send RTP to its own ports)."""
    try:
        ip = ipaddress.ip_address(str(host))
    except ValueError:
        return "is not an IP address"
    if ip.version != family:
        return f"is not IPv{family}, as the listener is"
    if ip.is_loopback:
        try:
            from_loopback = ipaddress.ip_address(caller_ip).is_loopback
        except ValueError:
            from_loopback = False
        return None if from_loopback else "is a loopback address"
    if ip.is_multicast or ip.is_unspecified or ip.is_link_local or ip.is_reserved:
        return "is not a unicast address"
    return None


def offer_problem(offer: SdpMessage | None, family: int = 4, caller_ip: str = "127.0.0.1") -> str | None:
    """Why an offer's audio cannot be sent to (488), or None: its address is not a unicast IP of the listener's
    ``family`` (:func:`media_problem`; ``caller_ip``: the INVITE's source), or its port (and RTCP's, one above)
    is out of range."""
    if offer is None or offer.audio is None:
        return None
    try:
        address = offer.rtp_address
    except Exception:
        return "the offer's audio address cannot be read"
    if address is None:
        return None  # no c= line: media.open refuses it as having no audio address
    host, port = address
    if destination((host, port)) is None or port > 65534:  # RTCP goes to port + 1
        return f"the offer's audio address {str(host)[:60]}:{port} cannot be sent to"
    problem = media_problem(str(host), family, caller_ip)
    if problem is not None:
        return f"the offer's audio address {str(host)[:60]} {problem}"
    return None
