"""A turn always ends and a response always comes or fails (issue 50), on the FAKE loopback pipeline: a stage
held up past the response's start bound fails the response with ``response_timeout`` and the session goes on;
sound that never pauses is committed at the longest turn's length; the record keeps the failed response and why the
unit was rebuilt (the stage that held its drain up), and the admin shows both."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client

from realtime.models import EndReason, RealtimeSession, ResponseRecord
from realtime.node import runtime
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


async def test_a_stage_that_holds_up_the_drain_is_named_in_the_record_with_the_failed_response_and_the_admin_shows_them(
    connect, stuck_stt, settings, loopback_pool, monkeypatch
):
    """Issue 50: the admin said "Errors 0, Responses: none" and the log alone said a unit "did not drain"."""
    settings.S2S_RESPONSE_START_TIMEOUT_S = 0.5
    for unit in loopback_pool.units:
        monkeypatch.setattr(unit, "_release_timeout_s", 0.5)
    client = await connect()
    session_id = client.created["session"]["id"]
    await client.update_session(audio={"input": {"turn_detection": None}})
    await client.append(tone(0.5))
    await client.send("input_audio_buffer.commit")  # its transcription blocks the STT stage past the session's end
    await client.send("response.create", response={"output_modalities": ["text"]})
    assert (await client.until("response.done", timeout=10))["response"]["status"] == "failed"
    await client.communicator.disconnect(timeout=10)

    def ended() -> RealtimeSession | None:
        runtime.current().writer.flush(10)
        return RealtimeSession.objects.exclude(end_reason=EndReason.ACTIVE).filter(id=session_id).first()

    for _ in range(100):
        if (record := await sync_to_async(ended)()) is not None:
            break
        await asyncio.sleep(0.1)
    assert record is not None
    assert record.unit_rebuild.startswith("did not drain in 0.5 s: stt busy with one "), record.unit_rebuild
    assert record.errors == 1
    failed = await ResponseRecord.objects.aget(session_id=session_id)
    assert failed.status == "failed" and "did not start within 0.5 s" in failed.reason
    unit = next(unit for unit in loopback_pool.units if unit.last_rebuild)
    assert unit.snapshot()["last_rebuild"] == record.unit_rebuild  # the slot board says the same

    def report() -> str:
        browser = Client()
        browser.force_login(User.objects.create_superuser("boss", "boss@example.com", "a-long-password"))
        return browser.get(f"/admin/realtime/realtimesession/{session_id}/change/").content.decode()

    page = await sync_to_async(report)()
    assert "Unit rebuilt" in page and "stt busy with one " in page
    assert "Errors" in page and "did not start within 0.5 s" in page
