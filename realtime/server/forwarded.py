"""The client's address behind a reverse proxy: ``X-Forwarded-For``, believed only from ``S2S_TRUSTED_PROXIES``.

The per-address limits (offers per second, live calls per address, the records' client address) read the
ASGI scope's ``client``, which is the TCP peer: behind a proxy, the proxy. When the peer is one of the
configured proxies, :class:`ForwardedFor` puts the address that proxy saw there instead: the header is read
from the right, the trusted proxies' own entries skipped, and the first other address is the client's (what
a client writes further left is its own claim, not believed). From any other peer the header is ignored.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from django.conf import settings

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def is_trusted(peer: str, trusted: Iterable[Network]) -> bool:
    address = _address(peer)
    return address is not None and any(address in network for network in trusted)


def client_address(peer: str, forwarded_for: str, trusted: tuple[Network, ...]) -> str:
    """The client's address: ``peer`` itself unless it is a trusted proxy that says whom it forwards."""
    if not is_trusted(peer, trusted):
        return peer
    client = peer
    for entry in reversed([part.strip() for part in forwarded_for.split(",") if part.strip()]):
        address = _address(entry)
        if address is None:  # "unknown" or garbage: the last trusted hop is all that is known
            return client
        client = str(address)
        if not any(address in network for network in trusted):
            return client
    return client


class ForwardedFor:
    """ASGI middleware: ``scope["client"]`` becomes the forwarded client's address (port 0) behind a trusted proxy."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        trusted = settings.S2S_TRUSTED_PROXIES
        client = scope.get("client")
        if trusted and client and scope["type"] in ("http", "websocket"):
            forwarded = b",".join(value for name, value in scope.get("headers", ()) if name == b"x-forwarded-for")
            address = client_address(str(client[0]), forwarded.decode("latin-1"), trusted)
            if address != client[0]:
                scope = {**scope, "client": (address, 0)}
        await self.app(scope, receive, send)
