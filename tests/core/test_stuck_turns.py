"""A turn always ends and a response always comes or fails (issue 50), on the FAKE loopback pipeline: a stage
held up past the response's start bound fails the response with ``response_timeout`` and the session goes on;
sound that never pauses is committed at the longest turn's length."""

from __future__ import annotations

import threading

import pytest

from tests.support.speech import silence, tone

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stuck_stt(loopback_pool, monkeypatch) -> threading.Event:
    """Every unit's FAKE transcriber blocks until the returned event is set (a stage stuck on one turn)."""
    mended = threading.Event()
    for unit in loopback_pool.units:
        stt = next(stage for stage in unit.stages() if stage.name == "stt")
        transcribe = stt.transcriber.transcribe

        def stuck(*args, _transcribe=transcribe, **kwargs):
            mended.wait(30)
            return _transcribe(*args, **kwargs)

        monkeypatch.setattr(stt.transcriber, "transcribe", stuck)
    yield mended
    mended.set()


async def test_a_response_held_up_by_a_stuck_stage_fails_with_response_timeout_and_the_session_goes_on(
    connect, stuck_stt, settings, loopback_pool
):
    settings.S2S_RESPONSE_START_TIMEOUT_S = 0.5
    client = await connect()
    await client.update_session(audio={"input": {"turn_detection": None}})
    await client.append(tone(0.5))
    await client.send("input_audio_buffer.commit")  # its transcription blocks the STT stage
    asked = await client.send("response.create", response={"output_modalities": ["text"]})
    error = await client.until("error", timeout=10)
    assert (error["error"]["code"], error["error"]["type"]) == ("response_timeout", "server_error")
    assert error["error"]["event_id"] == asked
    done = await client.until("response.done", timeout=10)
    assert done["response"]["status"] == "failed"
    stuck_stt.set()  # the stage gets going again: the late request is dropped, the session answers the next one
    await client.say_text("hello again", output_modalities=["text"])
    done = await client.until("response.done", timeout=10)
    assert done["response"]["status"] == "completed"
    assert done["response"]["output"][0]["content"][0]["text"] == "You said: hello again."


async def test_sound_that_never_pauses_is_committed_and_answered_at_the_longest_turns_length(
    connect, loopback_pool, monkeypatch
):
    for unit in loopback_pool.units:
        vad = next(stage for stage in unit.stages() if stage.name == "vad")
        monkeypatch.setattr(vad, "max_turn_ms", 1000)
    client = await connect()
    await client.update_session(audio={"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}})
    await client.append(silence(0.2))
    await client.append(tone(2.5))  # no pause: two turns of the longest length, the rest still open
    committed = await client.until("input_audio_buffer.committed", timeout=10)
    assert committed["item_id"]
    done = await client.until("response.done", timeout=10)
    assert done["response"]["status"] in ("completed", "cancelled")
