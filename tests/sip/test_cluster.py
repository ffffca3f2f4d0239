"""A phone call is ended like any other session: an admin's "end session" or a revoked key, sent through Redis
from another process; and with authentication on, only an API key controls a call."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import openai
import pytest
from channels_redis.core import RedisChannelLayer

from realtime.node import cluster
from tests.sip.conftest import SECRET, sip_server, sip_sessions, wait_free
from tests.sip.test_control import incoming
from tests.support.polling import wait_for
from tests.support.server import LiveServer
from tests.support.services import redis_url


@pytest.fixture(scope="module")
def redis() -> str:
    return redis_url()


@pytest.fixture(scope="module")
def server(tmp_path_factory, webhook, redis) -> Iterator[LiveServer]:
    live = sip_server(
        tmp_path_factory.mktemp("sip-cluster"),
        S2S_SIP_WEBHOOK_URL=webhook.url,
        S2S_SIP_WEBHOOK_SECRET=SECRET,
        S2S_AUTH_REQUIRED="1",
        REDIS_URL=redis,
    )
    yield live
    live.stop()


@pytest.fixture(scope="module")
def api_key(server) -> str:
    server.api_key = server.manage("create_api_key", "operator").stdout.strip()
    return server.api_key


@pytest.fixture(autouse=True)
def client(server, api_key) -> openai.OpenAI:
    return openai.OpenAI(api_key=api_key, base_url=f"{server.http}/v1", webhook_secret=SECRET, max_retries=0)


def key_id(server: LiveServer) -> int:
    with sqlite3.connect(server.tmp_dir / "server.sqlite3") as db:
        return db.execute("SELECT id FROM realtime_apikey WHERE name = 'operator'").fetchone()[0]


def live_sip_session(server: LiveServer) -> str:
    return wait_for(
        lambda: next((row["id"] for row in sip_sessions(server) if row["end_reason"] == "active"), None),
        10,
        what="the call's session in the audit",
    )


def ended(server: LiveServer, session_id: str) -> str:
    def reason() -> str | None:
        row = next((row for row in sip_sessions(server) if row["id"] == session_id), None)
        return row["end_reason"] if row and row["end_reason"] != "active" else None

    return wait_for(reason, 15, what=f"{session_id} ended in the audit")


async def send(redis: str, group: str, message: dict) -> None:
    layer = RedisChannelLayer(hosts=[redis])
    await layer.group_send(group, message)
    await layer.flush()


async def test_an_admin_ending_the_session_from_another_process_hangs_up_the_call(
    server, phones, webhook, client, redis
):
    phone = phones()
    phone.dial(server.sip_uri)
    call_id = incoming(webhook, client)
    client.realtime.calls.accept(call_id, type="realtime")
    session_id = live_sip_session(server)
    await send(redis, cluster.session_group(session_id), {"type": cluster.END_SESSION, "reason": "test"})
    wait_for(phone.hung_up, 10, what="the BYE at the phone")
    assert wait_free(server, 2, timeout=10) == 2
    assert ended(server, session_id) == "admin_ended"


async def test_revoking_the_key_that_accepted_the_call_hangs_it_up(server, phones, webhook, client, redis):
    phone = phones()
    phone.dial(server.sip_uri)
    call_id = incoming(webhook, client)
    client.realtime.calls.accept(call_id, type="realtime")
    session_id = live_sip_session(server)
    await send(redis, cluster.key_group(key_id(server)), {"type": cluster.KEY_REVOKED})
    wait_for(phone.hung_up, 10, what="the BYE at the phone")
    assert wait_free(server, 2, timeout=10) == 2
    assert ended(server, session_id) == "admin_ended"


def test_with_authentication_on_only_an_api_key_controls_a_call(server, phones, webhook, client):
    phone = phones()
    phone.dial(server.sip_uri)
    call_id = incoming(webhook, client)
    stranger = openai.OpenAI(api_key="sk-not-a-key", base_url=f"{server.http}/v1", max_retries=0)
    for attempt in (
        lambda: stranger.realtime.calls.accept(call_id, type="realtime"),
        lambda: stranger.realtime.calls.reject(call_id),
        lambda: stranger.realtime.calls.refer(call_id, target_uri="sip:a@127.0.0.1"),
        lambda: stranger.realtime.calls.hangup(call_id),
    ):
        with pytest.raises(openai.AuthenticationError):
            attempt()
    assert wait_free(server, 1) == 1  # still ringing
    client.realtime.calls.hangup(call_id)
    assert wait_free(server, 2) == 2
