"""Transcription sessions (GA ``session.type: "transcription"`` and beta ``transcription_session.update``).

VAD and STT only: turns are committed and transcribed, nothing answers. The pipeline is the FAKE
loopback profile (its STT says "audio of N seconds"); tests/pipeline/test_transcription_session.py
runs the same with the real faster-whisper.
"""

from __future__ import annotations

import pytest

from tests.support.client import types
from tests.support.speech import silence, tone

pytestmark = pytest.mark.django_db(transaction=True)

LOGPROBS = "item.input_audio_transcription.logprobs"
VAD = {"type": "server_vad", "silence_duration_ms": 200}


async def speak_a_turn(client) -> list[dict]:
    await client.append(silence(0.3))
    await client.append(tone(1.0))
    await client.append(silence(0.5))
    events = await client.collect("conversation.item.input_audio_transcription.completed")
    return events + await client.drain(0.5)


async def test_a_ga_transcription_session_transcribes_turns_and_never_answers(connect):
    client = await connect()
    await client.send(
        "session.update",
        session={
            "type": "transcription",
            "include": [LOGPROBS],
            "audio": {
                "input": {
                    "transcription": {"model": "gpt-4o-transcribe", "language": "en", "prompt": "Tones."},
                    "turn_detection": VAD,
                    "noise_reduction": {"type": "near_field"},
                }
            },
        },
    )
    session = (await client.until("session.updated"))["session"]
    assert session["type"] == "transcription"
    assert session["audio"]["input"]["transcription"] == {
        "model": "gpt-4o-transcribe",
        "language": "en",
        "prompt": "Tones.",
    }
    assert session["include"] == [LOGPROBS] and "output_modalities" not in session
    events = await speak_a_turn(client)
    kinds = types(events)
    assert [k for k in kinds if k.startswith("input_audio_buffer.")] == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
    ]
    assert not [k for k in kinds if k.startswith("response.")]
    completed = events[kinds.index("conversation.item.input_audio_transcription.completed")]
    assert completed["transcript"].startswith("audio of 1.")
    assert [entry["token"] for entry in completed["logprobs"]] == [" " + w for w in completed["transcript"].split()]
    assert all(
        entry["logprob"] <= 0 and entry["bytes"] == list(entry["token"].encode()) for entry in completed["logprobs"]
    )
    delta = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.delta")
    assert "".join(entry["token"] for entry in delta["logprobs"]).strip() == delta["delta"].strip()


async def test_a_transcription_session_refuses_responses_and_goes_on(connect):
    client = await connect()
    await client.update_session(type="transcription", audio={"input": {"turn_detection": VAD}})
    event_id = await client.send("response.create")
    error = await client.error()
    assert (error["event_id"], error["param"]) == (event_id, "type")
    completed = await speak_a_turn(client)
    assert "conversation.item.input_audio_transcription.completed" in types(completed)
    assert "logprobs" not in completed[types(completed).index("conversation.item.input_audio_transcription.completed")]


async def test_intent_transcription_opens_a_transcription_session(connect):
    client = await connect("/v1/realtime?intent=transcription")
    assert client.created["session"]["type"] == "transcription"
    await client.update_session(type="transcription", audio={"input": {"turn_detection": VAD}})
    assert "response.created" not in types(await speak_a_turn(client))


async def test_a_transcription_session_takes_only_its_own_keys(connect):
    client = await connect()
    event_id = await client.send("session.update", session={"type": "transcription", "instructions": "Answer."})
    error = await client.error()
    assert (error["code"], error["param"], error["event_id"]) == ("unknown_parameter", "session.instructions", event_id)


async def test_a_beta_client_makes_a_transcription_session_with_transcription_session_update(connect):
    client = await connect(headers=[(b"openai-beta", b"realtime=v1")])
    await client.send(
        "transcription_session.update",
        session={
            "input_audio_transcription": {"model": "whisper-1", "language": "en"},
            "include": [LOGPROBS],
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 200},
            "input_audio_noise_reduction": {"type": "far_field"},
        },
    )
    session = (await client.until("transcription_session.updated"))["session"]
    assert session["input_audio_transcription"] == {"model": "whisper-1", "language": "en"}
    assert session["input_audio_format"] == "pcm16" and session["modalities"] == ["text"]
    events = await speak_a_turn(client)
    kinds = types(events)
    assert "conversation.item.created" in kinds and not [k for k in kinds if k.startswith("response.")]
    completed = events[kinds.index("conversation.item.input_audio_transcription.completed")]
    assert completed["logprobs"]
    event_id = await client.send("transcription_session.update", session={"voice": "ash"})
    error = await client.error()
    assert (error["param"], error["event_id"]) == ("session.voice", event_id)


async def test_transcription_session_update_is_a_beta_event(connect):
    client = await connect()
    event_id = await client.send("transcription_session.update", session={})
    assert (await client.error())["event_id"] == event_id


@pytest.mark.parametrize("model", ["whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe"])
async def test_openai_transcription_model_names_are_served_by_the_configured_stt(connect, model):
    client = await connect()
    session = (
        await client.update_session(
            audio={"input": {"transcription": {"model": model}, "turn_detection": VAD}}, output_modalities=["text"]
        )
    )["session"]
    assert session["audio"]["input"]["transcription"]["model"] == model
    assert await speak_a_turn(client)  # transcribed by the fake STT all the same


async def test_a_transcription_that_fails_is_reported_for_its_item_and_the_session_goes_on(
    connect, broken_stt, monkeypatch
):
    client = await connect()
    await client.update_session(type="transcription", audio={"input": {"turn_detection": VAD}})
    await client.append(silence(0.3))
    await client.append(tone(1.0))
    await client.append(silence(0.5))
    events = await client.collect("conversation.item.input_audio_transcription.failed")
    committed = next(e for e in events if e["type"] == "input_audio_buffer.committed")
    failed = events[-1]
    assert failed["item_id"] == committed["item_id"] and failed["content_index"] == 0
    assert failed["error"]["type"] == "transcription_error" and "out of order" in failed["error"]["message"]
    monkeypatch.undo()
    assert "conversation.item.input_audio_transcription.completed" in types(await speak_a_turn(client))
