"""OpenAI's GA SIP flow against a real server: the signed ``realtime.call.incoming`` webhook, then the openai SDK's
``realtime.calls.accept/reject/refer/hangup``, unchanged, with a real phone (baresip) calling."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator

import openai
import pytest

from tests.sip.conftest import SECRET, Webhook, a_tone, free_units, loud_seconds, sip_server, wait_free
from tests.support.polling import wait_for
from tests.support.server import LiveServer


@pytest.fixture(scope="module")
def server(tmp_path_factory, webhook) -> Iterator[LiveServer]:
    live = sip_server(
        tmp_path_factory.mktemp("sip-webhook"),
        S2S_SIP_WEBHOOK_URL=webhook.url,
        S2S_SIP_WEBHOOK_SECRET=SECRET,
        S2S_SIP_ACCEPT_TIMEOUT_S="6",
    )
    # A real key even with authentication off: a hang-up checks any bearer token it is sent (the SDK sends one).
    live.api_key = live.manage("create_api_key", "operator").stdout.strip()
    yield live
    live.stop()


@pytest.fixture
def client(server) -> openai.OpenAI:
    return openai.OpenAI(api_key=server.api_key, base_url=f"{server.http}/v1", webhook_secret=SECRET, max_retries=0)


def incoming(webhook: Webhook, client: openai.OpenAI) -> str:
    """The next call announced to the webhook, its signature checked by the SDK; returns its call_id."""
    headers, body = webhook.next()
    event = client.webhooks.unwrap(body, headers)
    assert event.type == "realtime.call.incoming"
    return event.data.call_id


def test_an_incoming_call_is_announced_signed_with_its_sip_headers_and_holds_a_unit_while_ringing(
    server, phones, webhook, client
):
    phone = phones()
    phone.dial(server.sip_uri)
    headers, body = webhook.next()
    event = client.webhooks.unwrap(body, headers)  # raises unless signed with the secret, within 5 minutes
    names = {header.name.lower(): header.value for header in event.data.sip_headers}
    assert "phone@127.0.0.1" in names["from"]
    assert "+15550001234" in names["to"]
    assert event.data.call_id.startswith("rtc_")
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.unwrap(body, headers, secret="whsec_" + base64.b64encode(b"another secret").decode())
    assert free_units(server) == 1  # claimed before it is answered
    client.realtime.calls.hangup(event.data.call_id)
    assert wait_free(server, 2) == 2


def test_an_accepted_call_answers_with_the_session_and_hangup_ends_it(server, phones, webhook, client):
    phone = phones()
    phone.dial(server.sip_uri)
    call_id = incoming(webhook, client)
    client.realtime.calls.accept(call_id, type="realtime", instructions="You answer the phone for a bakery.")
    wait_for(lambda: loud_seconds(*phone.heard()) >= 1.0, 30, what="the reply heard by the phone")
    client.realtime.calls.hangup(call_id)
    wait_for(phone.hung_up, 10, what="the BYE at the phone")
    assert wait_free(server, 2) == 2
    with pytest.raises(openai.NotFoundError):
        client.realtime.calls.hangup(call_id)


def test_a_rejected_call_gets_its_status_and_frees_the_unit(server, phones, webhook, client):
    phone = phones()
    phone.dial(server.sip_uri)
    client.realtime.calls.reject(incoming(webhook, client), status_code=486)
    wait_for(lambda: "486 Busy Here" in phone.log(), 10, what="486 at the phone")
    assert wait_free(server, 2) == 2


def test_a_call_declined_by_default_is_603(server, phones, webhook, client):
    phone = phones()
    phone.dial(server.sip_uri)
    client.realtime.calls.reject(incoming(webhook, client))
    wait_for(lambda: "603 Decline" in phone.log(), 10, what="603 at the phone")
    assert wait_free(server, 2) == 2


def test_a_caller_that_cancels_while_ringing_frees_the_unit(server, phones, webhook, client):
    phone = phones()
    phone.dial(server.sip_uri)
    call_id = incoming(webhook, client)
    assert free_units(server) == 1
    phone.hang_up()  # CANCEL: the call was never answered
    assert wait_free(server, 2) == 2
    with pytest.raises(openai.NotFoundError):
        client.realtime.calls.accept(call_id, type="realtime")


def test_a_call_nobody_accepts_is_declined_in_time_and_frees_the_unit(server, phones, webhook, client):
    phone = phones()
    phone.dial(server.sip_uri)
    incoming(webhook, client)
    wait_for(lambda: "480 Temporarily Unavailable" in phone.log(), 15, what="480 at the phone")
    assert wait_free(server, 2) == 2


def test_an_answered_call_is_transferred_with_refer(server, phones, webhook, client):
    phone = phones()
    phone.dial(server.sip_uri)
    call_id = incoming(webhook, client)
    with pytest.raises(openai.ConflictError):  # only an answered call can be transferred
        client.realtime.calls.refer(call_id, target_uri="sip:agent@127.0.0.1:5999")
    client.realtime.calls.accept(call_id, type="realtime")
    client.realtime.calls.refer(call_id, target_uri="sip:agent@127.0.0.1:5999")
    wait_for(lambda: "sip:agent@127.0.0.1:5999" in phone.log(), 10, what="the REFER at the phone")
    client.realtime.calls.hangup(call_id)
    assert wait_free(server, 2) == 2


def test_bad_control_requests_are_answered_with_errors_and_the_call_goes_on(server, phones, webhook, client):
    phone = phones()
    phone.dial(server.sip_uri)
    call_id = incoming(webhook, client)
    with pytest.raises(openai.BadRequestError) as bad_voice:
        client.realtime.calls.accept(call_id, type="realtime", audio={"output": {"voice": "no-such-voice"}})
    assert json.dumps(bad_voice.value.body)  # an OpenAI-style error object
    with pytest.raises(openai.BadRequestError):
        client.realtime.calls.refer(call_id, target_uri="http://example.com")
    with pytest.raises(openai.BadRequestError):
        client.realtime.calls.reject(call_id, status_code=200)
    with pytest.raises(openai.NotFoundError):
        client.realtime.calls.accept("rtc_nosuchcall", type="realtime")
    assert free_units(server) == 1  # still ringing
    client.realtime.calls.accept(call_id, type="realtime")
    wait_for(lambda: loud_seconds(*phone.heard()) >= 1.0, 30, what="the reply heard by the phone")
    client.realtime.calls.hangup(call_id)
    assert wait_free(server, 2) == 2


async def test_a_websocket_with_the_call_id_follows_the_call_steers_it_and_hears_dtmf(server, phones, webhook, client):
    phone = phones()
    phone.dial(server.sip_uri)
    call_id = await asyncio.to_thread(incoming, webhook, client)
    await asyncio.to_thread(client.realtime.calls.accept, call_id, type="realtime")
    sideband = openai.AsyncOpenAI(api_key=server.api_key, base_url=f"{server.http}/v1", max_retries=0)
    seen: list[str] = []
    async with sideband.realtime.connect(call_id=call_id) as connection:
        first = await asyncio.wait_for(connection.recv(), 10)
        assert first.type == "session.created"
        await connection.session.update(session={"type": "realtime", "instructions": "Say hello to the caller."})
        await asyncio.to_thread(phone.command, "sndcode", "5")  # an RFC 4733 key press from the phone
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not {"output_audio_buffer.stopped", "dtmf", "session.updated"} <= set(
            seen
        ):
            event = await asyncio.wait_for(connection.recv(), max(0.1, deadline - time.monotonic()))
            seen.append("dtmf" if event.type == "input_audio_buffer.dtmf_event_received" else event.type)
            if event.type == "input_audio_buffer.dtmf_event_received":
                assert event.event == "5"
    wanted = {"response.done", "dtmf", "session.updated", "output_audio_buffer.started", "output_audio_buffer.stopped"}
    assert wanted <= set(seen), seen
    assert "response.output_audio.delta" not in seen  # the audio rides RTP; the follower gets events only
    assert free_units(server) == 1  # closing the follower leaves the call up
    await asyncio.to_thread(client.realtime.calls.hangup, call_id)
    assert await asyncio.to_thread(wait_free, server, 2) == 2


async def test_the_follower_stops_the_reply_on_the_phone_with_output_audio_buffer_clear(
    server, phones, webhook, client, tmp_path
):
    phone = phones(a_tone(tmp_path, seconds=4.0))  # the loopback profile echoes 4 s back
    phone.dial(server.sip_uri)
    call_id = await asyncio.to_thread(incoming, webhook, client)
    await asyncio.to_thread(client.realtime.calls.accept, call_id, type="realtime")
    sideband = openai.AsyncOpenAI(api_key=server.api_key, base_url=f"{server.http}/v1", max_retries=0)
    seen: list[str] = []
    async with sideband.realtime.connect(call_id=call_id) as connection:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and "output_audio_buffer.cleared" not in seen:
            event = await asyncio.wait_for(connection.recv(), max(0.1, deadline - time.monotonic()))
            seen.append(event.type)
            if event.type == "output_audio_buffer.started":
                await asyncio.sleep(0.5)
                await connection.send({"type": "output_audio_buffer.clear"})
    assert "output_audio_buffer.cleared" in seen, seen
    await asyncio.sleep(1.0)
    heard = loud_seconds(*phone.heard())
    assert 0.2 < heard < 3.0  # the reply began, and stopped well before its 4 s
    await asyncio.to_thread(client.realtime.calls.hangup, call_id)
    assert await asyncio.to_thread(wait_free, server, 2) == 2
