"""Fixtures of the realtime core tests: Realtime clients over the in-process ASGI app."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from channels.testing import WebsocketCommunicator

from realtime.node import runtime
from s2s_project.asgi import application
from tests.support.client import RealtimeClient
from tests.support.transport import MemoryTransport, PlayingTransport

Connect = Callable[..., Awaitable[RealtimeClient]]


def is_beta(headers: list[tuple[bytes, bytes]], subprotocols: list[str]) -> bool:
    """Whether the server will speak the beta protocol to this client (its events are checked against beta types)."""
    header = b"".join(value for key, value in headers if key.lower() == b"openai-beta").replace(b" ", b"").lower()
    return b"realtime=v1" in header or "openai-beta.realtime-v1" in subprotocols


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

    async def open_session(
        path: str = "/v1/realtime?model=gpt-realtime",
        headers: list[tuple[bytes, bytes]] | None = None,
        expect_session: bool = True,
        subprotocols: list[str] | None = None,
    ) -> RealtimeClient:
        subprotocols = subprotocols or ["realtime"]
        comm = WebsocketCommunicator(application, path, subprotocols=subprotocols, headers=headers or [])
        connected, subprotocol = await comm.connect(timeout=10)
        assert connected
        communicators.append(comm)
        client = RealtimeClient.over_communicator(comm, beta=is_beta(headers or [], subprotocols))
        clients.append(client)
        client.subprotocol = subprotocol  # type: ignore[attr-defined]
        client.communicator = comm  # type: ignore[attr-defined]
        if expect_session:
            client.created = await client.until("session.created", timeout=10)  # type: ignore[attr-defined]
        return client

    yield open_session
    for comm in communicators:
        with contextlib.suppress(Exception):  # already closed by the server or the test
            await comm.disconnect(timeout=10)
    runtime.current().writer.flush(10)
    missing = [event["type"] for client in clients for event in client.received if not event.get("event_id")]
    assert not missing, f"server events without an event_id: {missing}"


@pytest.fixture
async def direct(loopback_pool) -> AsyncIterator[Callable[..., Awaitable[RealtimeClient]]]:
    """Opens Realtime sessions over the in-memory test transport (tests/support/transport.py): the session
    core alone, no socket. ``await direct()`` returns a client whose ``session.created`` was received
    (``client.created``); ``direct(playing=True)`` opens one whose transport plays the reply itself
    (``client.transport``); other keywords are :class:`OpenRequest` fields."""
    transports: list[MemoryTransport] = []

    async def open_session(playing: bool = False, expect_session: bool = True, **request) -> RealtimeClient:
        transport = PlayingTransport() if playing else MemoryTransport()
        transports.append(transport)
        await transport.open(**request)
        client = transport.client
        client.transport = transport  # type: ignore[attr-defined]
        if expect_session:
            client.created = await client.until("session.created", timeout=10)  # type: ignore[attr-defined]
        return client

    yield open_session
    for transport in transports:
        await transport.disconnect()
    runtime.current().writer.flush(10)


@pytest.fixture
def broken_stt(loopback_pool, monkeypatch) -> None:
    """Every unit's transcriber raises: what a failing STT engine looks like to the session.

    A test mends it with ``monkeypatch.undo()`` (the same ``monkeypatch`` it asks for)."""

    def broken(*args, **kwargs):
        raise RuntimeError("the STT engine is out of order")

    for unit in loopback_pool.units:
        stt = next(stage for stage in unit.stages() if stage.name == "stt")
        monkeypatch.setattr(stt.transcriber, "transcribe", broken)
