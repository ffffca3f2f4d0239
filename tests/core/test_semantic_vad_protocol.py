"""``semantic_vad`` over the real ASGI application on the loopback profile (FAKE stages).

The loopback profile has no turn model: a pause of 200 ms ends the turn there. What
the real Smart Turn decides is tested in tests/pipeline/test_turn_taking.py.
"""

from __future__ import annotations

import time

import pytest

from tests.support.client import text_item, types
from tests.support.speech import silence, tone

pytestmark = pytest.mark.django_db(transaction=True)


def semantic(**fields) -> dict:
    return {"audio": {"input": {"turn_detection": {"type": "semantic_vad", **fields}}}}


async def test_semantic_vad_is_echoed_with_its_eagerness_and_idle_timeout(connect):
    client = await connect()
    updated = await client.update_session(**semantic(eagerness="high", idle_timeout_ms=5000, create_response=False))
    detection = updated["session"]["audio"]["input"]["turn_detection"]
    assert detection == {
        "type": "semantic_vad",
        "eagerness": "high",
        "create_response": False,
        "interrupt_response": True,
        "idle_timeout_ms": 5000,
    }


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"eagerness": "eager"}, "session.audio.input.turn_detection.eagerness"),
        ({"idle_timeout_ms": 10}, "session.audio.input.turn_detection.idle_timeout_ms"),
    ],
)
async def test_a_bad_semantic_vad_field_is_an_error_and_the_session_goes_on(connect, fields, param):
    client = await connect()
    await client.send("session.update", event_id="evt_bad", session={"type": "realtime", **semantic(**fields)})
    error = await client.error()
    assert (error["code"], error["param"], error["event_id"]) == ("invalid_value", param, "evt_bad")
    updated = await client.update_session(**semantic())
    assert updated["session"]["audio"]["input"]["turn_detection"]["eagerness"] == "auto"


async def test_a_semantic_vad_turn_is_cut_and_answered(connect):
    client = await connect()
    await client.update_session(**semantic())
    await client.append(silence(0.2))
    await client.append(tone(0.6))
    await client.append(silence(0.6))
    events = await client.collect("response.done", timeout=10)
    kinds = types(events)
    assert (
        kinds.index("input_audio_buffer.speech_started")
        < kinds.index("input_audio_buffer.speech_stopped")
        < kinds.index("input_audio_buffer.committed")
        < kinds.index("response.created")
    )


async def test_a_silent_user_is_prompted_after_idle_timeout_ms_with_semantic_vad(connect):
    client = await connect()
    await client.update_session(**semantic(idle_timeout_ms=1000))
    await client.send("conversation.item.create", item=text_item("hello"))
    await client.send("response.create", response={"output_modalities": ["text"]})
    await client.until("response.done")
    done_at = time.monotonic()
    await client.until("input_audio_buffer.timeout_triggered", timeout=10)
    assert time.monotonic() - done_at >= 1.0 - 0.05
    prompted = await client.until("response.done", timeout=10)
    assert prompted["response"]["status"] == "completed"
