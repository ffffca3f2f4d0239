"""One opening for every transport (``open_session``), the session's mailbox, and the typed transport interface,
on the in-memory test transport (tests/support/transport.py) and the in-memory channel layer."""

from __future__ import annotations

import asyncio
import threading

import pytest
from channels.layers import get_channel_layer

from pipelines import messages as m
from realtime.access.auth import Principal
from realtime.access.owner import Caller, Owner
from realtime.live.transport import ControlAnswer, Refusal, ServerEvent
from realtime.node import cluster, runtime
from tests.support.client import Closed, text_item, types

pytestmark = pytest.mark.django_db(transaction=True)

KEY = Principal("api_key", "tests", api_key_id=4242)  # a transport that authenticated otherwise (as SIP will)


async def until_free(pool, count: int) -> None:
    for _ in range(100):
        if pool.free_units() == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{pool.free_units()} free units, not {count}")


async def closed_with(client) -> Closed:
    with pytest.raises(Closed) as closed:
        await client.until("never", timeout=5)
    return closed.value


def in_groups(channel: str) -> list[str]:
    return [group for group, members in get_channel_layer().groups.items() if channel in members]


async def left_all_groups(channel: str) -> bool:
    """Whether ``channel`` is in no group within a second (a session leaves them after its close)."""
    for _ in range(20):
        if not in_groups(channel):
            return True
        await asyncio.sleep(0.05)
    return False


# --- the opening -------------------------------------------------------------------------------


async def test_a_full_pool_refuses_with_1008_and_all_session_slots_are_in_use(direct, loopback_pool):
    await direct()
    await direct()
    third = await direct(expect_session=False)
    error = await third.error()
    assert error["code"] == "session_limit_reached"
    assert (await closed_with(third)).code == 1008 and third.transport.closed[1] == "All session slots are in use"
    assert loopback_pool.free_units() == 0


async def test_without_credentials_nothing_is_claimed_when_authentication_is_on(direct, loopback_pool, settings):
    settings.S2S_AUTH_REQUIRED = True
    refused = await direct(expect_session=False)  # no scope, no principal: no credentials at all
    assert (await refused.error())["code"] == "invalid_api_key"
    assert (await closed_with(refused)).code == 1008
    assert loopback_pool.free_units() == 2
    trusted = await direct(principal=KEY)  # a transport that authenticated otherwise
    assert trusted.transport.core.opening.principal == "api_key:tests"


@pytest.mark.parametrize("step", ["prepare", "mailbox", "start"])
async def test_a_failure_at_any_step_of_the_opening_leaks_no_unit(direct, loopback_pool, monkeypatch, step):
    async def fail(*args, **kwargs):
        raise RuntimeError(f"{step} failed")

    request = {}
    if step == "prepare":
        request["prepare"] = fail
    else:
        target = "realtime.live.mailbox.Mailbox.open" if step == "mailbox" else "realtime.live.core.SessionCore.start"
        monkeypatch.setattr(target, fail)
    with pytest.raises(RuntimeError):
        await direct(**request)
    assert loopback_pool.free_units() == 2
    assert not runtime.current().sessions


async def test_a_refusal_from_the_transports_own_checks_claims_nothing_and_is_answered(direct, loopback_pool):
    async def bad_offer(principal):
        raise Refusal("invalid_offer", "No audio.", 1008, "Bad offer", http_status=400, param="sdp")

    refused = await direct(prepare=bad_offer, expect_session=False)
    error = await refused.error()
    assert (error["code"], error["param"]) == ("invalid_offer", "sdp")
    assert loopback_pool.free_units() == 2


async def test_output_a_unit_gives_before_the_session_object_exists_reaches_the_client(direct, loopback_pool):
    claim = loopback_pool.claim

    def claim_and_speak(sink, session_id, count_refusal=True):
        lease = claim(sink, session_id, count_refusal)
        said = threading.Thread(target=sink, args=(m.SpeechStarted(0, "item_early", 0),))  # a stage thread
        said.start()
        said.join()
        return lease

    loopback_pool.claim = claim_and_speak
    try:
        client = await direct(expect_session=False)
    finally:
        loopback_pool.claim = claim
    started = await client.until("input_audio_buffer.speech_started")
    assert started["item_id"] == "item_early"


# --- the mailbox: admin, revocation, hang-up ---------------------------------------------------


async def test_the_mailbox_joins_the_session_key_and_call_groups_and_leaves_them_at_the_end(direct, loopback_pool):
    client = await direct(principal=KEY, call_id="rtc_test1")
    core = client.transport.core
    assert sorted(in_groups(core.mailbox.channel)) == sorted(
        [cluster.session_group(core.id), cluster.key_group(4242), cluster.call_group("rtc_test1")]
    )
    assert runtime.current().calls["rtc_test1"] is core
    await client.transport.disconnect()
    assert await left_all_groups(core.mailbox.channel)
    assert "rtc_test1" not in runtime.current().calls
    await until_free(loopback_pool, 2)


@pytest.mark.parametrize(
    ("group", "message", "code"),
    [
        (lambda core: cluster.session_group(core.id), {"type": cluster.END_SESSION}, "session_ended_by_admin"),
        (lambda core: cluster.key_group(4242), {"type": cluster.KEY_REVOKED}, "invalid_api_key"),
    ],
)
async def test_an_admin_end_or_a_revoked_key_ends_the_session_with_an_error_and_1008(
    direct, loopback_pool, group, message, code
):
    client = await direct(principal=KEY)
    core = client.transport.core
    await get_channel_layer().group_send(group(core), {"type": "no.such.message"})  # dropped, the session goes on
    await get_channel_layer().group_send(group(core), message)
    assert (await client.error(timeout=5))["code"] == code
    assert (await closed_with(client)).code == 1008
    await until_free(loopback_pool, 2)
    assert await left_all_groups(core.mailbox.channel)


async def test_a_hang_up_from_elsewhere_needs_the_credential_that_opened_the_call(direct, loopback_pool):
    client = await direct(principal=KEY, call_id="rtc_test2")
    core = client.transport.core
    core.owner = Owner("digest-of-the-secret", 7)
    another = await cluster.control_elsewhere("rtc_test2", "hangup", {}, Caller("digest-of-another", 8).as_message(), 5)
    nobody = await cluster.control_elsewhere("rtc_test2", "hangup", {}, {"credential": "", "api_key_id": None}, 5)
    assert (
        another == nobody == ControlAnswer.not_found("rtc_test2").as_message() | {"type": cluster.CALL_CONTROL_ANSWER}
    )
    await client.update_session(instructions="still here")
    owner = await cluster.control_elsewhere("rtc_test2", "hangup", {}, Caller("digest-of-the-secret").as_message(), 5)
    assert owner is not None and owner["status"] == 200
    assert (await closed_with(client)).code == 1000
    await until_free(loopback_pool, 2)


async def test_a_call_control_request_from_elsewhere_is_answered_on_its_reply_channel(direct, loopback_pool):
    """The request/reply of accept, reject and refer across processes (here the in-memory layer): the holder
    answers what it would answer locally (a call that is not SIP: 404), a malformed request gets a 400, one
    without a reply channel is dropped, and nobody holding the call is no answer (the view's 404)."""
    client = await direct(principal=KEY, call_id="rtc_test3")
    answer = await cluster.control_elsewhere("rtc_test3", "accept", {}, Caller().as_message(), 5.0)
    assert answer is not None
    assert ControlAnswer.from_message(answer) == ControlAnswer.not_found("rtc_test3")
    layer = get_channel_layer()
    reply_to = await layer.new_channel()
    await layer.group_send(cluster.call_group("rtc_test3"), {"type": cluster.CALL_CONTROL, "reply_to": reply_to})
    malformed = await asyncio.wait_for(layer.receive(reply_to), 5)
    assert malformed["status"] == 400 and malformed["code"] == "invalid_request"
    await layer.group_send(cluster.call_group("rtc_test3"), {"type": cluster.CALL_CONTROL, "action": "accept"})
    again = await cluster.control_elsewhere("rtc_test3", "refer", {}, Caller().as_message(), 5.0)
    assert again is not None and again["status"] == 404  # the mailbox read on past the dropped one
    await client.update_session(instructions="still here")
    assert await cluster.control_elsewhere("rtc_nobody", "accept", {}, Caller().as_message(), 0.5) is None
    await client.transport.disconnect()
    await until_free(loopback_pool, 2)


def test_a_control_answer_that_is_not_one_is_a_502():
    assert ControlAnswer.from_message({"status": 409, "code": "invalid_call_state", "message": "no"}).status == 409
    for wrong in (None, "200", {"status": True}, {"status": "200"}, {"status": 42}, {"code": "x"}):
        assert ControlAnswer.from_message(wrong).status == 502


# --- the typed interface: a transport that plays the reply ---------------------------------------


async def test_a_transport_that_plays_the_reply_is_handed_its_audio_never_an_audio_delta(direct):
    client = await direct(playing=True)
    transport = client.transport
    await client.say_text("hello sound")
    events = await client.collect("output_audio_buffer.stopped")
    assert "response.output_audio.delta" not in types(events)
    assert "response.output_audio.delta" not in [event.type for event in transport.sent]
    item_id, audio, fmt = transport.played[0]
    assert isinstance(audio, m.AudioOut) and fmt == "audio/pcm"
    assert item_id == next(e["item_id"] for e in events if e["type"] == "response.output_audio_transcript.delta")
    assert sum(len(a.data) for _, a, _ in transport.played) == 240 * 48  # 4 words of 60 ms, 24 kHz PCM16
    done = next(e for e in events if e["type"] == "response.done")
    assert transport.ended_replies[0] == done["response"]["id"]
    assert types(events).index("output_audio_buffer.started") < types(events).index("output_audio_buffer.stopped")


async def test_output_audio_buffer_clear_stops_a_playing_reply_and_truncates_it_to_what_was_played(direct):
    client = await direct(playing=True)
    await client.send("conversation.item.create", item=text_item("slow answer with many words"))
    await client.send("response.create")
    await client.until("output_audio_buffer.started", timeout=10)
    await client.send("output_audio_buffer.clear")
    cleared = await client.until("output_audio_buffer.cleared")
    truncated = await client.until("conversation.item.truncated")
    assert cleared["response_id"] and truncated["audio_end_ms"] > 0
    assert client.transport.playing is None


def test_a_server_event_is_serialised_with_its_audio_as_base64_only_on_the_wire():
    event = ServerEvent.of(
        {
            "type": "response.output_audio.delta",
            "event_id": "event_1",
            "item_id": "item_1",
            "audio": m.AudioOut(0, "r", b"\x01\x02"),
        }
    )
    assert event.type == "response.output_audio.delta" and event.audio.data == b"\x01\x02"
    assert "audio" not in event.payload
    assert event.to_wire() == {
        "type": "response.output_audio.delta",
        "event_id": "event_1",
        "item_id": "item_1",
        "delta": "AQI=",
    }


async def test_without_a_channel_layer_the_session_still_runs(direct, loopback_pool, monkeypatch):
    monkeypatch.setattr("realtime.live.mailbox.get_channel_layer", lambda: None)
    client = await direct()
    assert client.transport.core.mailbox.groups == ()
    await client.send("conversation.item.create", item=text_item("hello"))
    await client.send("response.create", response={"output_modalities": ["text"]})
    assert (await client.until("response.done"))["response"]["status"] == "completed"
    await client.transport.disconnect()
    await until_free(loopback_pool, 2)
