"""Per-session limits: each has its own error code, and only session length and idle time end the session."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest

from realtime.protocol.limits import InputBuffer, TokenBucket
from tests.security.conftest import close_code, connect, next_event, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


async def open_session(comm_settings=None):
    comm, _ = await connect()
    assert (await next_event(comm))["type"] == "session.created"
    return comm


async def still_usable(comm) -> None:
    await comm.send_to(text_data=json.dumps({"type": "conversation.item.retrieve", "item_id": "nope", "event_id": "x"}))
    event = await next_event(comm)
    assert event["type"] == "error" and event["error"]["code"] == "item_not_found"


async def test_an_event_over_the_size_limit_gets_event_too_large_and_the_session_goes_on(loopback_pool, settings):
    settings.S2S_MAX_EVENT_BYTES = 4096
    comm = await open_session()
    big = json.dumps(
        {
            "type": "conversation.item.create",
            "item": {  # 100 kB: over 4096 * 4/3 + 64 KiB
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "a" * 100_000}],
            },
        }
    )
    await comm.send_to(text_data=big)
    event = await next_event(comm)
    assert event["error"]["code"] == "event_too_large"
    await still_usable(comm)
    await comm.disconnect()


async def test_too_many_events_per_second_get_rate_limit_exceeded_once_a_second_and_the_session_goes_on(
    loopback_pool, settings
):
    settings.S2S_MAX_EVENTS_PER_SECOND = 5
    settings.S2S_EVENTS_BURST = 5
    comm = await open_session()
    clear = json.dumps({"type": "input_audio_buffer.clear"})
    for _ in range(30):
        await comm.send_to(text_data=clear)
    events = []
    while not await comm.receive_nothing(timeout=0.3):
        events.append(await next_event(comm))
    limited = [e for e in events if e["type"] == "error" and e["error"]["code"] == "rate_limit_exceeded"]
    assert len(limited) == 1 and limited[0]["error"]["type"] == "rate_limit_error"
    assert sum(e["type"] == "input_audio_buffer.cleared" for e in events) == 5
    await asyncio.sleep(0.5)  # the bucket refills
    await still_usable(comm)
    await comm.disconnect()


async def test_a_manual_input_buffer_over_its_limit_drops_the_chunk_with_input_audio_buffer_full(
    loopback_pool, settings
):
    settings.S2S_MAX_INPUT_BUFFER_SECONDS = 1
    comm = await open_session()
    await comm.send_to(
        text_data=json.dumps(
            {"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}}}
        )
    )
    await wait_for(comm, "session.updated")
    chunk = base64.b64encode(b"\x00\x10" * 12_000).decode()  # 500 ms at 24 kHz
    for _ in range(3):
        await comm.send_to(text_data=json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
    event = await next_event(comm)
    assert event["type"] == "error" and event["error"]["code"] == "input_audio_buffer_full"
    await comm.send_to(text_data=json.dumps({"type": "input_audio_buffer.commit"}))
    committed, _ = await wait_for(comm, "input_audio_buffer.committed")
    await comm.send_to(text_data=json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))  # room again
    assert await comm.receive_nothing(timeout=0.5) or (await next_event(comm))["type"] != "error"
    await comm.disconnect()


async def test_the_session_ends_with_session_expired_and_1008_at_its_maximum_length(loopback_pool, settings):
    settings.S2S_MAX_SESSION_SECONDS = 1
    comm = await open_session()
    event = await next_event(comm, timeout=5)
    assert event["type"] == "error" and event["error"]["code"] == "session_expired"
    assert await close_code(comm) == 1008
    for _ in range(50):
        if loopback_pool.free_units() == 2:
            break
        await asyncio.sleep(0.1)
    assert loopback_pool.free_units() == 2


async def test_expires_at_is_when_the_maximum_length_ends_the_session(loopback_pool, settings):
    settings.S2S_MAX_SESSION_SECONDS = 90
    comm, _ = await connect()
    created = await next_event(comm)
    session = created["session"]
    assert 89 <= session["expires_at"] - time.time() <= 91, session["expires_at"]
    await comm.send_to(text_data=json.dumps({"type": "session.update", "session": {"type": "realtime"}}))
    updated, _ = await wait_for(comm, "session.updated")
    assert updated["session"]["expires_at"] == session["expires_at"]
    await comm.disconnect()


async def test_an_idle_session_ends_with_session_idle_timeout_but_activity_keeps_it(loopback_pool, settings):
    settings.S2S_IDLE_TIMEOUT_S = 1
    comm = await open_session()
    for _ in range(4):  # 2 s of activity, every half second
        await asyncio.sleep(0.5)
        await comm.send_to(text_data=json.dumps({"type": "input_audio_buffer.clear"}))
        assert (await next_event(comm))["type"] == "input_audio_buffer.cleared"
    event = await next_event(comm, timeout=5)
    assert event["type"] == "error" and event["error"]["code"] == "session_idle_timeout"
    assert await close_code(comm) == 1008


def test_the_token_bucket_allows_the_burst_then_the_rate():
    now = [0.0]
    bucket = TokenBucket(rate=10, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] += 0.1
    assert bucket.take() and not bucket.take()
    assert bucket.dropped == 2


def test_with_server_vad_only_a_spoken_turn_counts_against_the_input_buffer():
    buffer = InputBuffer(max_ms=1000)
    for _ in range(100):
        buffer.check(500, server_vad=True)
        buffer.add(500, server_vad=True)  # silence: the VAD keeps none of it
    buffer.speech_started()
    buffer.add(900, server_vad=True)
    with pytest.raises(Exception) as raised:
        buffer.check(200, server_vad=True)
    assert raised.value.code == "input_audio_buffer_full"
    buffer.emptied()
    buffer.check(200, server_vad=False)
