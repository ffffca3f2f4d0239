"""Behind a reverse proxy: ``X-Forwarded-For`` names the client only when the proxy is in ``S2S_TRUSTED_PROXIES``,
so the per-address limits meter each client, and a client cannot dodge them by writing the header itself."""

from __future__ import annotations

import ipaddress
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from realtime.server.forwarded import ForwardedFor, client_address
from tests.support.server import LiveServer

PROXIES = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1"))


def test_the_client_is_the_rightmost_address_that_is_not_a_trusted_proxy():
    assert client_address("10.0.0.2", "198.51.100.9, 203.0.113.7, 10.0.0.5", PROXIES) == "203.0.113.7"
    assert client_address("::1", "2001:db8::7", PROXIES) == "2001:db8::7"
    assert client_address("10.0.0.2", "10.0.0.9, 10.0.0.5", PROXIES) == "10.0.0.9"  # all proxies: the furthest
    assert client_address("10.0.0.2", "", PROXIES) == "10.0.0.2"
    assert client_address("10.0.0.2", "unknown, 10.0.0.5", PROXIES) == "10.0.0.5"


def test_the_header_of_a_peer_that_is_not_a_trusted_proxy_is_ignored():
    assert client_address("203.0.113.7", "198.51.100.1", PROXIES) == "203.0.113.7"
    assert client_address("203.0.113.7", "198.51.100.1", ()) == "203.0.113.7"


async def test_the_middleware_rewrites_the_scope_only_for_a_trusted_peer(settings):
    settings.S2S_TRUSTED_PROXIES = PROXIES
    seen: list[tuple[str, int]] = []

    async def app(scope, receive, send):
        seen.append(scope["client"])

    headers = [(b"x-forwarded-for", b"203.0.113.7")]
    for peer in ("10.1.2.3", "198.51.100.1"):
        await ForwardedFor(app)({"type": "websocket", "client": (peer, 5000), "headers": headers}, None, None)
    assert seen == [("203.0.113.7", 0), ("198.51.100.1", 5000)]


@pytest.fixture(scope="module")
def proxied_server(tmp_path_factory) -> Iterator[LiveServer]:
    """A server behind a (pretend) proxy on 127.0.0.1, with one call offer per address and no refill to speak of."""
    server = LiveServer(
        tmp_path_factory.mktemp("proxied"),
        env={"S2S_TRUSTED_PROXIES": "127.0.0.1", "S2S_CALL_OFFERS_PER_SECOND": "0.001", "S2S_CALL_OFFERS_BURST": "1"},
    )
    server.start(ready_timeout=120)
    yield server
    server.stop()


def offer(server: LiveServer, forwarded_for: str) -> tuple[int, str]:
    request = urllib.request.Request(
        f"{server.http}/v1/realtime/calls",
        data=b"v=0\r\n",
        headers={"Content-Type": "application/sdp", "X-Forwarded-For": forwarded_for},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_offer_rate_meters_each_forwarded_client_behind_a_trusted_proxy(proxied_server):
    first, _ = offer(proxied_server, "198.51.100.1, 203.0.113.7")
    again, body = offer(proxied_server, "203.0.113.7")
    other, _ = offer(proxied_server, "203.0.113.8")
    assert first != 429 and other != 429, (first, other)
    assert again == 429 and "from 203.0.113.7" in json.loads(body)["error"]["message"], body
