"""Fixtures for the security and reliability tests: authentication on, an API key, a small WebSocket helper."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from s2s_project.asgi import application
from tests.support.conformance import decode


@pytest.fixture
def auth_on(settings) -> None:
    settings.S2S_AUTH_REQUIRED = True


@pytest.fixture
def api_key(auth_on) -> str:
    from realtime.access import auth

    _, key = auth.create_api_key("tests")
    return key


def bearer(key: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {key}".encode())]


async def connect(
    headers: Iterable[tuple[bytes, bytes]] = (), subprotocols: list[str] | None = None, path: str = "/v1/realtime"
) -> tuple[WebsocketCommunicator, str | None]:
    comm = WebsocketCommunicator(application, path, headers=list(headers), subprotocols=subprotocols)
    connected, subprotocol = await comm.connect(timeout=5)
    assert connected
    return comm, subprotocol


async def next_event(comm: WebsocketCommunicator, timeout: float = 5, beta: bool = False) -> dict[str, Any]:
    """The next server event, validated against the openai SDK's types (``beta``: the beta ones)."""
    return decode(await comm.receive_from(timeout=timeout), beta)


async def wait_for(
    comm: WebsocketCommunicator, kind: str, timeout: float = 10
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Reads until an event of ``kind``; returns it and everything read before it."""
    seen: list[dict[str, Any]] = []
    for _ in range(10_000):
        event = await next_event(comm, timeout)
        if event["type"] == kind:
            return event, seen
        seen.append(event)
    raise AssertionError(f"no {kind} among {len(seen)} events")


async def close_code(comm: WebsocketCommunicator, timeout: float = 5) -> int:
    """Reads until the server's close and returns its code."""
    for _ in range(10_000):
        output = await comm.receive_output(timeout=timeout)
        if output["type"] == "websocket.close":
            return output.get("code", 1000)
    raise AssertionError("the server never closed")


@pytest.fixture(autouse=True)
def _records_written_before_teardown(request):
    """Waits for the record writer before the test database is emptied (no write races the teardown)."""
    from realtime.node import runtime

    marker = request.node.get_closest_marker("django_db")
    if marker is not None and marker.kwargs.get("transaction"):
        request.getfixturevalue("transactional_db")
    yield
    runtime.current().writer.flush(10)
