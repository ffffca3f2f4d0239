"""Kokoro voices with real parts (issue 55, ``make kokoro``): a voice-agent session that asks for ``af_heart`` is
answered in that voice, which Whisper hears back; a translation session into Spanish, from English speech, is
translated by the packaged LM and spoken by ``ef_dora``, and Whisper hears the Spanish words back; a target
language with no voice is refused, naming the languages there are. One server, the real default models."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Iterator

import numpy as np
import pytest
from openai import AsyncOpenAI

from pipelines import audio
from pipelines.kokoro_voices import installed_voices
from tests.pipeline.conftest import ask_in_text, connect
from tests.support.conformance import check_translation, decode
from tests.support.server import LiveServer
from tests.support.speech import pcm16_chunks, silence, spelled_alike, spoken

pytestmark = pytest.mark.real_models

# English phrases, and the Spanish words their translation must hold.
PHRASES = [("The cat is in the house.", {"gato", "casa"}), ("I have a black dog.", {"perro", "negro"})]


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    """The real default models and the Kokoro voices, one unit."""
    assert "af_heart" in installed_voices() and "ef_dora" in installed_voices(), "install Kokoro: make kokoro"
    server = LiveServer(tmp_path_factory.mktemp("kokoro"), env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "1"})
    server.start(ready_timeout=900)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def whisper():
    """The multilingual Whisper base, to hear the voices back."""
    from pipelines.backends.faster_whisper_stt import WhisperEngine

    return WhisperEngine("base", cpu_threads=2)


async def test_a_voice_agent_session_speaks_with_the_kokoro_voice_it_asks_for(server, whisper):
    ws = await connect(server)
    try:
        await ws.send(
            json.dumps(
                {"type": "session.update", "session": {"type": "realtime", "audio": {"output": {"voice": "af_heart"}}}}
            )
        )
        updated = decode(await asyncio.wait_for(ws.recv(), 20))
        assert updated["type"] == "session.updated", updated
        assert updated["session"]["audio"]["output"]["voice"] == "af_heart"
        turn = await ask_in_text(ws, "What is the capital of France? Answer in one short sentence.", timeout=180)
    finally:
        await ws.close()
    done = turn.first("response.done")["response"]
    said = done["output"][0]["content"][0]["transcript"]
    spoken_audio = audio.decode(turn.audio(), audio.PCM)
    assert len(spoken_audio) > audio.RATES[audio.PCM] // 2, said
    heard = whisper.transcribe(audio.resample(spoken_audio, audio.RATES[audio.PCM], audio.PIPELINE_RATE), "en")
    assert spelled_alike(heard, said) >= 0.7, (said, heard)


async def test_english_speech_is_translated_into_spanish_and_spoken_by_a_spanish_voice(server, whisper):
    speech = np.concatenate([silence(0.5)] + [np.concatenate([spoken(s), silence(1.0)]) for s, _ in PHRASES])
    client = AsyncOpenAI(api_key="sk-unused", base_url=f"{server.http}/v1")
    events: list[dict] = []
    async with client.realtime.translations.connect(model="gpt-realtime-translate") as connection:

        async def read() -> None:
            while True:
                event = check_translation(json.loads(await connection.recv_bytes()))
                events.append(event)
                if event["type"] == "session.closed":
                    return

        reader = asyncio.create_task(read())
        await connection.session.update(session={"audio": {"output": {"language": "es"}}})
        for chunk in pcm16_chunks(speech, chunk_ms=200):
            await connection.session.input_audio_buffer.append(audio=chunk)
            await asyncio.sleep(0.2)
        await connection.session.close()
        await asyncio.wait_for(reader, 300)
    updated = next(e for e in events if e["type"] == "session.updated")
    assert updated["session"]["audio"]["output"]["language"] == "es"
    spanish = "".join(e["delta"] for e in events if e["type"] == "session.output_transcript.delta")
    pcm = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "session.output_audio.delta")
    assert len(pcm) / 48000 > 1.0, spanish  # seconds of 24 kHz PCM16
    heard = whisper.hear(audio.resample(audio.decode(pcm, audio.PCM), 24000, audio.PIPELINE_RATE), "es").source
    for _, expected in PHRASES:
        assert expected <= words(spanish), spanish
    # The voice says the translation: Whisper hears its words back (base heard "perro" as "perron" once).
    assert PHRASES[0][1] <= words(heard) and spelled_alike(heard, spanish) >= 0.8, (spanish, heard)


async def test_a_target_language_with_no_voice_is_refused_naming_the_languages_there_are(server):
    client = AsyncOpenAI(api_key="sk-unused", base_url=f"{server.http}/v1")
    async with client.realtime.translations.connect(model="gpt-realtime-translate") as connection:
        assert check_translation(json.loads(await connection.recv_bytes()))["type"] == "session.created"
        await connection.session.update(session={"audio": {"output": {"language": "de"}}}, event_id="evt_de")
        error = check_translation(json.loads(await connection.recv_bytes()))
        assert error["type"] == "error" and error["error"]["event_id"] == "evt_de", error
        assert error["error"]["param"].endswith("audio.output.language"), error
        message = error["error"]["message"]
        assert "'de'" in message and all(code in message for code in ("en", "es", "fr", "it", "pt")), message
        await connection.session.update(session={"audio": {"output": {"language": "fr"}}})
        assert check_translation(json.loads(await connection.recv_bytes()))["type"] == "session.updated"
