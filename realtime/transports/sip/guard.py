"""What the SIP and RTP side takes from the network, checked before it is used.

Addresses and ports come from strangers: a request's ``Via`` and ``Contact``, an offer's
``c=`` and ``m=`` lines. A send to an impossible one (port 99999, a host name) would make
asyncio close the whole socket ("Fatal write error on datagram transport"), so every
destination is checked before a send, a send that fails anyway is dropped, and each is
logged once per peer. A request whose ``Via`` or ``Contact`` names such a port is answered
400, an offer whose audio does 488, as RFC 3261 says.
"""

from __future__ import annotations

import ipaddress
import logging
from collections import OrderedDict
from typing import Any

from aiosipua import SdpMessage, SipRequest
from aiosipua.headers import parse_address, parse_via

logger = logging.getLogger(__name__)

MAX_PEERS_REMEMBERED = 4096  # peers whose failed send was logged: older ones may be logged again


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


def _port_ok(port: int | None) -> bool:
    """A port a header may name: none, or 0 to 65535 (0 and none both mean the default, 5060)."""
    return port is None or 0 <= port <= 65535


def request_problem(request: SipRequest) -> str | None:
    """Why a request cannot be answered as it says (400), or None: a ``Via`` or ``Contact`` that names an
    impossible port, or cannot be read."""
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


def offer_problem(offer: SdpMessage | None) -> str | None:
    """Why an offer's audio cannot be sent to (488), or None: its address is not an IP, or its port (and
    RTCP's, one above) is out of range."""
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
    return None
