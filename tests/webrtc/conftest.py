"""A real server (loopback profile) and WebRTC clients of it."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from tests.support.server import LiveServer
from tests.support.webrtc_client import WebRTCClient


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    """One daphne server with a pool of 2, shared by the tests that leave it as they found it."""
    # many offers a second from one address: the offer rate is tested on its own (test_hardening.py)
    live = LiveServer(tmp_path_factory.mktemp("webrtc"), env={"S2S_CALL_OFFERS_PER_SECOND": "0"}).start()
    yield live
    live.stop()


@pytest.fixture
async def calls() -> AsyncIterator[Callable[[LiveServer], WebRTCClient]]:
    """Makes WebRTC clients and closes them all after the test."""
    made: list[WebRTCClient] = []

    def make(live: LiveServer) -> WebRTCClient:
        client = WebRTCClient(live.http)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


def free_units(server: LiveServer, key: str | None = None) -> int:
    """Free units as /readyz says (with authentication on, only to an API key)."""
    request = urllib.request.Request(f"{server.http}/readyz", headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:  # 503 when full: the body still counts
        body = exc.read()
    return json.loads(body)["free_units"]


async def wait_free(server: LiveServer, count: int, within_s: float = 10.0, key: str | None = None) -> int:
    """Polls /readyz until ``count`` units are free (bounded); returns the last count seen."""
    deadline = time.monotonic() + within_s
    free = await asyncio.to_thread(free_units, server, key)
    while free != count and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        free = await asyncio.to_thread(free_units, server, key)
    return free
