"""Fixtures of the realtime core tests: Realtime clients over the in-process ASGI app."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from channels.testing import WebsocketCommunicator

from realtime import records
from s2s_project.asgi import application
from tests.support.client import RealtimeClient

Connect = Callable[..., Awaitable[RealtimeClient]]


@pytest.fixture(autouse=True)
def no_auth(settings):
    """These tests are about the protocol and the pool: credentials have their own suite."""
    settings.S2S_AUTH_REQUIRED = False


@pytest.fixture
async def connect(loopback_pool) -> AsyncIterator[Connect]:
    """Opens Realtime sessions on the ASGI application; closes them and flushes their records afterwards.

    ``await connect()`` returns a client whose ``session.created`` was already
    received (``client.created``); ``connect(expect_session=False)`` returns
    right after the socket is accepted.
    """
    communicators: list[WebsocketCommunicator] = []
    clients: list[RealtimeClient] = []

    async def open_session(path: str = "/v1/realtime?model=gpt-realtime", headers: list[tuple[bytes, bytes]] | None = None,
                           expect_session: bool = True) -> RealtimeClient:
        comm = WebsocketCommunicator(application, path, subprotocols=["realtime"], headers=headers or [])
        connected, subprotocol = await comm.connect(timeout=10)
        assert connected
        communicators.append(comm)
        client = RealtimeClient.over_communicator(comm)
        clients.append(client)
        client.subprotocol = subprotocol  # type: ignore[attr-defined]
        client.communicator = comm  # type: ignore[attr-defined]
        if expect_session:
            client.created = await client.until("session.created", timeout=10)  # type: ignore[attr-defined]
        return client

    yield open_session
    for comm in communicators:
        try:
            await comm.disconnect(timeout=10)
        except Exception:  # already closed by the server or the test
            pass
    records.writer.flush(10)
    missing = [event["type"] for client in clients for event in client.received if not event.get("event_id")]
    assert not missing, f"server events without an event_id: {missing}"
