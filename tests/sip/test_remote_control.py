"""Call control from any process of the cluster: two real servers (daphne) on one Redis and one PostgreSQL database,
as behind a load balancer. A has the SIP listener and announces the call to the webhook; the operator's
``accept``, ``reject`` and ``refer`` (the openai SDK, unchanged) go to B, which holds nothing, and reach the call
on A through the channel layer with A's real answer (200, 400, 409, 404)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import openai
import pytest

from tests.sip.conftest import SECRET, free_units, loud_seconds, sip_server, wait_free
from tests.sip.test_control import incoming
from tests.support import services
from tests.support.polling import wait_for
from tests.support.server import LiveServer

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A fresh PostgreSQL database both servers share."""
    with services.private_database("s2s_sipctl") as url:
        yield url


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, webhook, database) -> Iterator[tuple[LiveServer, LiveServer]]:
    """(A, B): A holds the calls (SIP listener, webhook), B only serves HTTP; authentication on, one API key."""
    tmp = tmp_path_factory.mktemp("sip-remote-control")
    env = {"DATABASE_URL": database, "REDIS_URL": services.redis_url(), "S2S_AUTH_REQUIRED": "1"}
    setup = LiveServer(tmp, env)
    setup.manage("migrate", "--noinput")
    key = setup.manage("create_api_key", "operator").stdout.strip()
    servers: list[LiveServer] = []
    try:
        servers.append(
            sip_server(
                tmp,
                **env,
                S2S_NODE_NAME="sip-a",
                S2S_SIP_WEBHOOK_URL=webhook.url,
                S2S_SIP_WEBHOOK_SECRET=SECRET,
                S2S_SIP_ACCEPT_TIMEOUT_S="30",
            )
        )
        servers.append(LiveServer(tmp, {**env, "S2S_NODE_NAME": "sip-b"}).start(ready_timeout=180))
        for server in servers:
            server.api_key = key  # type: ignore[attr-defined]  (for /readyz, as conftest's free_units reads it)
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def a(cluster) -> LiveServer:
    return cluster[0]


@pytest.fixture
def via_b(cluster) -> openai.OpenAI:
    """The operator's client, pointed at B."""
    b = cluster[1]
    return openai.OpenAI(api_key=b.api_key, base_url=f"{b.http}/v1", webhook_secret=SECRET, max_retries=0)


def test_a_call_ringing_on_a_is_accepted_through_b_and_the_phone_hears_the_reply(a, via_b, phones, webhook):
    phone = phones()
    phone.dial(a.sip_uri)
    call_id = incoming(webhook, via_b)
    assert free_units(a) == 1  # ringing on A
    via_b.realtime.calls.accept(call_id, type="realtime", instructions="You answer the phone for a bakery.")
    wait_for(lambda: loud_seconds(*phone.heard()) >= 1.0, 30, what="the reply heard by the phone")
    with pytest.raises(openai.ConflictError) as again:  # A's answer, with its error body
        via_b.realtime.calls.accept(call_id, type="realtime")
    assert again.value.body["code"] == "invalid_call_state"
    assert "only a ringing call can be accepted" in again.value.body["message"]
    via_b.realtime.calls.hangup(call_id)
    wait_for(phone.hung_up, 10, what="the BYE at the phone")
    assert wait_free(a, 2) == 2


def test_a_call_rejected_through_b_gets_its_status_at_the_phone(a, via_b, phones, webhook):
    phone = phones()
    phone.dial(a.sip_uri)
    via_b.realtime.calls.reject(incoming(webhook, via_b), status_code=486)
    wait_for(lambda: "486 Busy Here" in phone.log(), 10, what="486 at the phone")
    assert wait_free(a, 2) == 2


def test_an_answered_call_is_referred_through_b_by_the_key_that_accepted_it_only(a, via_b, phones, webhook, cluster):
    phone = phones()
    phone.dial(a.sip_uri)
    call_id = incoming(webhook, via_b)
    with pytest.raises(openai.ConflictError) as ringing:  # only an answered call can be transferred
        via_b.realtime.calls.refer(call_id, target_uri="sip:agent@127.0.0.1:5999")
    assert ringing.value.body["code"] == "invalid_call_state"
    via_b.realtime.calls.accept(call_id, type="realtime")
    b = cluster[1]
    other_key = b.manage("create_api_key", f"another-{uuid.uuid4().hex[:6]}").stdout.strip()
    other = openai.OpenAI(api_key=other_key, base_url=f"{b.http}/v1", max_retries=0)
    with pytest.raises(openai.NotFoundError):  # the call is the accepting key's now, as for a hang-up
        other.realtime.calls.refer(call_id, target_uri="sip:thief@127.0.0.1:5999")
    via_b.realtime.calls.refer(call_id, target_uri="sip:agent@127.0.0.1:5999")
    wait_for(lambda: "sip:agent@127.0.0.1:5999" in phone.log(), 10, what="the REFER at the phone")
    assert "thief" not in phone.log()
    via_b.realtime.calls.hangup(call_id)
    assert wait_free(a, 2) == 2


def test_a_bad_session_sent_through_b_is_a_400_and_the_call_rings_on(a, via_b, phones, webhook):
    phone = phones()
    phone.dial(a.sip_uri)
    call_id = incoming(webhook, via_b)
    with pytest.raises(openai.BadRequestError) as bad_voice:  # checked on A, as locally
        via_b.realtime.calls.accept(call_id, type="realtime", audio={"output": {"voice": "no-such-voice"}})
    assert bad_voice.value.body["param"] and "voice" in bad_voice.value.body["message"]
    with pytest.raises(openai.BadRequestError) as bad_status:
        via_b.realtime.calls.reject(call_id, status_code=200)
    assert bad_status.value.body["param"] == "status_code"
    with pytest.raises(openai.BadRequestError) as huge:  # more than the channel layer carries: refused at B
        via_b.realtime.calls.reject(call_id, status_code=10**30)
    assert "out of range" in huge.value.body["message"]
    assert free_units(a) == 1  # still ringing
    via_b.realtime.calls.reject(call_id)
    wait_for(lambda: "603 Decline" in phone.log(), 10, what="603 at the phone")
    assert wait_free(a, 2) == 2


def test_an_unknown_call_through_b_is_a_404_and_a_stranger_a_401(cluster, via_b):
    with pytest.raises(openai.NotFoundError) as unknown:  # nobody answers within S2S_CALL_CONTROL_TIMEOUT_S
        via_b.realtime.calls.accept("rtc_nosuchcall", type="realtime")
    assert unknown.value.body["code"] == "call_not_found"
    stranger = openai.OpenAI(api_key="sk-not-a-key", base_url=f"{cluster[1].http}/v1", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.realtime.calls.accept("rtc_nosuchcall", type="realtime")
