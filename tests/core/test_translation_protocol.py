"""Translation sessions (``/v1/realtime/translations``) on the FAKE loopback pipeline: the protocol, the pool,
the records (issue 55). Every server event is checked against the openai SDK's translation types."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest
from channels.testing import WebsocketCommunicator

from realtime.live import translation
from realtime.models import RealtimeSession
from realtime.node import runtime
from s2s_project.asgi import application
from tests.support.conformance import check_translation
from tests.support.speech import pcm16_chunks, silence, tone

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/v1/realtime/translations?model=gpt-realtime-translate"


class Translating:
    """A translation client over the in-process ASGI application."""

    def __init__(self, comm: WebsocketCommunicator) -> None:
        self.comm = comm
        self.events: list[dict[str, Any]] = []

    async def send(self, **event: Any) -> None:
        await self.comm.send_to(text_data=json.dumps(event))

    async def next(self, timeout: float = 10) -> dict[str, Any]:
        event = check_translation(json.loads(await self.comm.receive_from(timeout=timeout)))
        self.events.append(event)
        return event

    async def until(self, kind: str, timeout: float = 10) -> dict[str, Any]:
        while (event := await self.next(timeout))["type"] != kind:
            pass
        return event

    async def speak(self, seconds: float, pause_s: float = 0.8) -> None:
        for chunk in pcm16_chunks(np.concatenate([tone(seconds), silence(pause_s)]), chunk_ms=200):
            await self.send(type="session.input_audio_buffer.append", audio=chunk)


@pytest.fixture
async def translate(loopback_pool):
    opened: list[WebsocketCommunicator] = []

    async def open_one(path: str = PATH) -> Translating:
        comm = WebsocketCommunicator(application, path, subprotocols=["realtime"])
        connected, _ = await comm.connect(timeout=10)
        assert connected
        opened.append(comm)
        return Translating(comm)

    yield open_one
    for comm in opened:
        await comm.disconnect()
    runtime.current().writer.flush(10)


async def test_a_translation_session_opens_with_its_settings_and_streams_phrase_by_phrase(translate):
    client = await translate()
    created = await client.next()
    assert created["type"] == "session.created"
    session = created["session"]
    assert session["type"] == "translation" and session["model"] == "gpt-realtime-translate"
    assert session["audio"]["output"]["language"] == "en"
    await client.speak(1.0)
    text = await client.until("session.output_transcript.delta")
    assert text["delta"].startswith("audio of 1.4")  # the FAKE translator: how long the phrase was (and its pause)
    audio = await client.until("session.output_audio.delta")
    assert audio["sample_rate"] == 24000 and audio["format"] == "pcm16" and base64.b64decode(audio["delta"])
    # while the first phrase is spoken, the speaker goes on: the next phrase is its own
    await client.speak(0.5)
    second = await client.until("session.output_transcript.delta")
    assert second["delta"].startswith("audio of ") and second["delta"] != text["delta"]  # 0.5 s, its lead, the pause
    assert not any(e["type"] == "session.input_transcript.delta" for e in client.events)  # not asked for


async def test_the_source_transcript_comes_when_audio_input_transcription_asks(translate):
    client = await translate()
    await client.until("session.created")
    await client.send(
        type="session.update",
        event_id="evt_1",
        session={"audio": {"input": {"transcription": {"model": "gpt-4o-transcribe"}}}},
    )
    updated = await client.until("session.updated")
    assert updated["session"]["audio"]["input"]["transcription"] == {"model": "gpt-4o-transcribe"}
    await client.speak(0.6)
    source = await client.until("session.input_transcript.delta")
    assert source["delta"].startswith("audio de ")
    await client.until("session.output_transcript.delta")


async def test_a_target_language_without_a_voice_is_refused_by_name_and_the_session_goes_on(translate):
    client = await translate()
    await client.until("session.created")
    await client.send(type="session.update", event_id="evt_fr", session={"audio": {"output": {"language": "fr"}}})
    error = (await client.until("error"))["error"]
    assert error["param"] == "session.audio.output.language" and error["event_id"] == "evt_fr"
    assert "en" in error["message"] and "'fr'" in error["message"]
    await client.speak(0.5)
    assert (await client.until("session.output_transcript.delta"))["delta"].startswith("audio of")


@pytest.mark.parametrize(
    ("event", "param"),
    [
        ({"type": "response.create"}, "type"),
        ({"type": "session.input_audio_buffer.append", "audio": "%%%"}, "audio"),
        ({"type": "session.update", "session": {"model": "gpt-realtime"}}, "session.model"),
        ({"type": "session.update", "session": {"instructions": "x"}}, "session.instructions"),
        (
            {"type": "session.update", "session": {"audio": {"input": {"noise_reduction": {"type": "loud"}}}}},
            "session.audio.input.noise_reduction.type",
        ),
    ],
)
async def test_bad_input_is_an_error_with_the_event_id_and_param_and_the_session_goes_on(translate, event, param):
    client = await translate()
    await client.until("session.created")
    await client.send(event_id="evt_bad", **event)
    error = (await client.until("error"))["error"]
    assert (error["event_id"], error["param"]) == ("evt_bad", param)
    await client.send(type="session.update", session={"audio": {"output": {"language": "en"}}})
    await client.until("session.updated")


async def test_session_close_flushes_the_last_phrase_then_says_closed(translate):
    client = await translate()
    await client.until("session.created")
    for chunk in pcm16_chunks(tone(0.7), chunk_ms=200):  # no pause after it: the close ends the phrase
        await client.send(type="session.input_audio_buffer.append", audio=chunk)
    await client.send(type="session.close")
    await client.until("session.closed")
    types = [e["type"] for e in client.events]
    assert "session.output_transcript.delta" in types and "session.output_audio.delta" in types
    assert types.index("session.output_audio.delta") < types.index("session.closed")


async def test_after_session_closed_the_unit_is_free_and_the_socket_is_the_clients_to_close(translate, loopback_pool):
    """OpenAI's SDKs close the socket on ``session.closed`` and call a server close crossing theirs abnormal
    (the Node SDK's ``finish()`` failed so in CI): the server ends the session at once and leaves the close to
    the client."""
    client = await translate()
    session_id = (await client.until("session.created"))["session"]["id"]
    await client.send(type="session.close")
    await client.until("session.closed")
    assert await client.comm.receive_nothing(timeout=0.5)  # no close from the server
    assert all(unit.state.value == "idle" for unit in loopback_pool.units)
    runtime.current().writer.flush(10)
    record = await RealtimeSession.objects.aget(id=session_id)
    assert (record.end_reason, record.close_code) == ("client_closed", 1000) and record.ended_at is not None


async def test_a_client_that_does_not_close_after_session_closed_is_closed_with_1000(translate, monkeypatch):
    monkeypatch.setattr(translation, "CLIENT_CLOSES_WITHIN_S", 0.3)
    client = await translate()
    await client.until("session.created")
    await client.send(type="session.close")
    await client.until("session.closed")
    closed = await client.comm.receive_output(timeout=5)
    assert closed["type"] == "websocket.close" and closed["code"] == 1000


async def test_a_translation_session_claims_a_unit_a_full_pool_refuses_and_the_record_says_translation(
    translate, loopback_pool
):
    first, second = await translate(), await translate()
    await first.until("session.created")
    await second.until("session.created")
    assert sum(unit.state.value == "busy" for unit in loopback_pool.units) == 2
    third = await translate()
    error = (await third.until("error"))["error"]
    assert error["code"] == "session_limit_reached"
    closed = await third.comm.receive_output(timeout=5)
    assert closed["code"] == 1008
    session_id = (first.events[0])["session"]["id"]
    await first.comm.disconnect()
    runtime.current().writer.flush(10)
    record = await RealtimeSession.objects.aget(id=session_id)
    assert record.model == "gpt-realtime-translate" and record.end_reason == "client_closed"
    assert record.engines.startswith("translation")


async def test_a_translation_session_needs_the_credentials_a_voice_session_needs(loopback_pool, settings):
    settings.S2S_AUTH_REQUIRED = True
    comm = WebsocketCommunicator(application, PATH, subprotocols=["realtime"])
    connected, _ = await comm.connect(timeout=10)
    assert connected
    client = Translating(comm)
    error = (await client.until("error"))["error"]
    assert error["code"] == "invalid_api_key"
    closed = await comm.receive_output(timeout=5)
    assert closed["type"] == "websocket.close" and closed["code"] == 1008
    assert all(unit.state.value == "idle" for unit in loopback_pool.units)  # nothing claimed before the check
    await comm.disconnect()
