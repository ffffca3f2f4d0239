"""Revoking a key, an admin's "end session" and a shutdown reach every transport alike, across processes.

A real server process (daphne, the Redis channel layer, authentication on) holds the
sessions: one over a WebSocket (``websockets``), one over WebRTC (aiortc, as
``tests/webrtc/`` calls). The revocation and the admin's end are sent from this test
process through Redis, as another node, the admin or a Celery task would: each session
gets its ``error``, is closed, and its unit comes back (``/readyz``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from channels_redis.core import RedisChannelLayer
from websockets.asyncio.client import connect

from realtime.node import cluster
from tests.support.client import Closed, RealtimeClient
from tests.support.server import LiveServer
from tests.support.webrtc_client import WebRTCClient
from tests.webrtc.conftest import wait_free

pytestmark = pytest.mark.services

ERRORS = {"revoke": "invalid_api_key", "admin_end": "session_ended_by_admin", "shutdown": "server_shutting_down"}


def start_server(tmp_path, redis_url: str) -> tuple[LiveServer, str, int]:
    """A server on Redis with authentication on, and an API key (its value and its id) made in its database."""
    env = {"REDIS_URL": redis_url, "S2S_AUTH_REQUIRED": "1", "S2S_SHUTDOWN_GRACE_S": "1"}
    server = LiveServer(tmp_path, env).start()
    key = server.manage("create_api_key", "remote ends").stdout.strip()
    with sqlite3.connect(tmp_path / "server.sqlite3") as db:
        (key_id,) = db.execute("select id from realtime_apikey where name = 'remote ends'").fetchone()
    return server, key, key_id


@pytest.fixture(scope="module")
def secured(module_redis_url: str, tmp_path_factory) -> Iterator[tuple[LiveServer, str, int]]:
    server, key, key_id = start_server(tmp_path_factory.mktemp("remote-ends"), module_redis_url)
    yield server, key, key_id
    server.stop()


@asynccontextmanager
async def session_over(transport: str, server: LiveServer, key: str) -> AsyncIterator[tuple[RealtimeClient, str]]:
    """A session opened with ``key`` over ``transport``: its client (``session.created`` read) and its id."""
    if transport == "websocket":
        headers = {"Authorization": f"Bearer {key}"}
        async with connect(server.ws, additional_headers=headers, subprotocols=["realtime"], open_timeout=10) as ws:
            client = RealtimeClient.over_websocket(ws)
            created = await client.until("session.created", timeout=10)
            yield client, created["session"]["id"]
        return
    call = WebRTCClient(server.http)
    try:
        assert (await call.connect(token=key)).status == 201
        created = await call.events.until("session.created", timeout=15)
        yield call.events, created["session"]["id"]
    finally:
        await call.close()


async def send_through_redis(redis_url: str, group: str, message: dict) -> None:
    """What another process does: a message to a group, through the Redis channel layer (the server's prefix)."""
    layer = RedisChannelLayer(hosts=[redis_url])
    try:
        await layer.group_send(group, message)
    finally:
        await layer.close_pools()


async def ended(client: RealtimeClient, code: str) -> Closed:
    """The error that says why, then the close."""
    error = await client.until("error", timeout=10)
    assert error["error"]["code"] == code, error
    with pytest.raises(Closed) as closed:
        await client.until("never", timeout=10)
    return closed.value


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
@pytest.mark.parametrize("how", ["revoke", "admin_end"])
async def test_a_revocation_or_an_admin_end_from_another_process_ends_the_session_on_either_transport(
    secured, module_redis_url, transport, how
):
    server, key, key_id = secured
    assert await wait_free(server, 2, key=key) == 2
    async with session_over(transport, server, key) as (client, session_id):
        assert await wait_free(server, 1, key=key) == 1
        if how == "revoke":
            await send_through_redis(module_redis_url, cluster.key_group(key_id), {"type": cluster.KEY_REVOKED})
        else:
            await send_through_redis(module_redis_url, cluster.session_group(session_id), {"type": cluster.END_SESSION})
        closed = await ended(client, ERRORS[how])
        if transport == "websocket":
            assert closed.code == 1008
        assert await wait_free(server, 2, key=key) == 2


async def test_a_shutdown_ends_a_websocket_and_a_webrtc_session_alike(module_redis_url, tmp_path):
    server, key, _ = start_server(tmp_path, module_redis_url)
    try:
        async with (
            session_over("websocket", server, key) as (socket, _),
            session_over("webrtc", server, key) as (
                call,
                _,
            ),
        ):
            assert await wait_free(server, 0, key=key) == 0
            assert server.process is not None
            server.process.terminate()  # SIGTERM: the graceful shutdown (1 s of grace, then going away)
            closed = await asyncio.gather(ended(socket, ERRORS["shutdown"]), ended(call, ERRORS["shutdown"]))
            assert closed[0].code == 1001
    finally:
        server.stop()
