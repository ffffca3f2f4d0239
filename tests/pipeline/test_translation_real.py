"""Translation sessions with real parts (issue 55): the openai SDKs' own translation clients, Python's
(``client.realtime.translations.connect``) and Node's (``OpenAIRealtimeTranslationWS``), against ``manage.py serve``
on https/wss with the real default models, Spanish speech from espeak-ng translated into English by the packaged
multilingual Whisper base and spoken by the Piper voice; a target language with no voice refused; a full pool
refused. Every event the server sends is checked against the SDK's translation types."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import websockets
from openai import AsyncOpenAI

from pipelines import audio
from tests.clients.conftest import make_certs, tls_env
from tests.support.conformance import check_translation
from tests.support.server import LiveServer
from tests.support.speech import pcm16_chunks, silence

pytestmark = pytest.mark.real_models  # espeak-ng (make system-deps) speaks the Spanish input

# Sentences espeak-ng's Spanish voice says clearly enough for Whisper base, and the English words each must give.
PHRASES = [
    # The clearest first: the session keeps the language its first phrase was heard in, and on one machine Whisper
    # base heard "El gato está en la casa." first as English and kept English for every phrase after it.
    ("Buenos días, ¿dónde está el hospital?", {"good", "morning"}),
    ("Yo tengo un perro negro.", {"have", "black"}),
    ("El gato está en la casa.", {"house"}),
]


CLIENTS = Path(__file__).resolve().parents[1] / "clients"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    """The real default models, one unit (a second session finds the pool full), on https/wss: the Node SDK dials
    nothing else. Python's clients here trust the test's authority through ``SSL_CERT_FILE``."""
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    env = {"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "1", **tls_env(certs)}
    server = LiveServer(tmp_path_factory.mktemp("translate"), env=env, ca_file=certs.ca)
    before = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = str(certs.ca)
    server.start(ready_timeout=900)
    yield server
    server.stop()
    if before is None:
        os.environ.pop("SSL_CERT_FILE", None)
    else:
        os.environ["SSL_CERT_FILE"] = before


def spanish_speech(folder: Path) -> np.ndarray:
    """The test's Spanish: half a second of silence, then each phrase and a second's pause after it."""
    return np.concatenate([silence(0.5)] + [np.concatenate([espeak(s, folder), silence(1.0)]) for s, _ in PHRASES])


def espeak(text: str, folder: Path, voice: str = "es") -> np.ndarray:
    """``text`` spoken by espeak-ng, float32 at 24 kHz."""
    path = folder / "phrase.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(path), text], check=True)
    samples, rate = sf.read(path, dtype="float32")
    return audio.resample(samples, rate, 24000)


def words(text: str) -> set[str]:
    return {w.strip(".,!?;:\"'").lower() for w in text.split()}


async def test_the_sdks_translation_client_translates_spanish_speech_into_english_phrase_by_phrase(server, tmp_path):
    speech = spanish_speech(tmp_path)
    client = AsyncOpenAI(api_key="sk-unused", base_url=f"{server.http}/v1")
    events: list[dict] = []
    first_audio_at: float | None = None
    async with client.realtime.translations.connect(model="gpt-realtime-translate") as connection:

        async def read() -> None:
            nonlocal first_audio_at
            while True:
                event = check_translation(json.loads(await connection.recv_bytes()))
                events.append(event)
                if event["type"] == "session.output_audio.delta" and first_audio_at is None:
                    first_audio_at = time.monotonic()
                if event["type"] == "session.closed":
                    return

        reader = asyncio.create_task(read())
        await connection.session.update(
            session={"audio": {"input": {"transcription": {"model": "whisper-1"}}, "output": {"language": "en"}}}
        )
        for chunk in pcm16_chunks(speech, chunk_ms=200):  # as a microphone sends it, in real time
            await connection.session.input_audio_buffer.append(audio=chunk)
            await asyncio.sleep(0.2)
        await connection.session.close()
        await asyncio.wait_for(reader, 120)
    types = [e["type"] for e in events]
    assert types[0] == "session.created" and "session.updated" in types, types
    english = "".join(e["delta"] for e in events if e["type"] == "session.output_transcript.delta")
    spanish = "".join(e["delta"] for e in events if e["type"] == "session.input_transcript.delta")
    heard = words(english)
    for _, expected in PHRASES:
        assert expected <= heard, (english, spanish)
    assert {"buenos", "tengo"} <= words(spanish), spanish
    spoken = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "session.output_audio.delta")
    assert len(spoken) / 48000 > 1.0  # seconds of 24 kHz PCM16: the translation spoken
    # phrase by phrase: each phrase its own delta, in order of where it ended in the input (on a busy machine the
    # first may come only after the last was sent, so the time it came is not asserted)
    elapsed = [e["elapsed_ms"] for e in events if e["type"] == "session.output_transcript.delta"]
    assert len(elapsed) == len(PHRASES) and elapsed == sorted(elapsed) and len(set(elapsed)) == len(PHRASES), elapsed
    assert first_audio_at is not None
    assert types[-1] == "session.closed"


async def test_a_target_language_with_no_voice_is_refused_and_the_session_goes_on(server):
    client = AsyncOpenAI(api_key="sk-unused", base_url=f"{server.http}/v1")
    async with client.realtime.translations.connect(model="gpt-realtime-translate") as connection:
        created = check_translation(json.loads(await connection.recv_bytes()))
        assert created["session"]["audio"]["output"]["language"] == "en"
        await connection.session.update(session={"audio": {"output": {"language": "ja"}}}, event_id="evt_ja")
        error = check_translation(json.loads(await connection.recv_bytes()))
        assert error["type"] == "error", error
        assert error["error"]["param"] == "session.audio.output.language" and error["error"]["event_id"] == "evt_ja"
        assert "'ja'" in error["error"]["message"] and "en" in error["error"]["message"]
        await connection.session.update(session={"audio": {"output": {"language": "en"}}})
        assert check_translation(json.loads(await connection.recv_bytes()))["type"] == "session.updated"


async def test_a_translation_session_holds_its_unit_and_a_full_pool_refuses_with_1008(server):
    client = AsyncOpenAI(api_key="sk-unused", base_url=f"{server.http}/v1")
    async with client.realtime.translations.connect(model="gpt-realtime-translate") as connection:
        assert check_translation(json.loads(await connection.recv_bytes()))["type"] == "session.created"
        async with websockets.connect(f"{server.ws}/translations?model=gpt-realtime-translate") as other:
            error = check_translation(json.loads(await other.recv()))
            assert error["error"]["code"] == "session_limit_reached"
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await other.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        async with websockets.connect(f"{server.ws}?model=gpt-realtime") as voice:
            assert json.loads(await voice.recv())["error"]["code"] == "session_limit_reached"  # one pool for both


def test_the_node_sdks_translation_client_translates_spanish_speech_into_english(server, tmp_path):
    """``OpenAIRealtimeTranslationWS`` of the pinned npm ``openai`` (tests/clients/package-lock.json), unchanged."""
    assert shutil.which("node") and shutil.which("npm"), "node and npm are needed (apt-get install npm)"
    if not (CLIENTS / "node_modules" / "openai").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=CLIENTS, check=True, timeout=600)
    pcm = tmp_path / "speech.pcm"
    pcm.write_bytes(audio.encode(spanish_speech(tmp_path), audio.PCM))
    result = subprocess.run(
        ["node", str(CLIENTS / "openai_node_translate.mjs"), f"{server.http}/v1", "sk-unused", str(pcm)],
        cwd=CLIENTS,
        env={**os.environ, "NODE_EXTRA_CA_CERTS": os.environ["SSL_CERT_FILE"]},
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = result.stdout.strip().splitlines()
    assert lines, f"node printed nothing (exit {result.returncode}):\n{result.stderr[-3000:]}"
    report = json.loads(lines[-1])
    assert result.returncode == 0 and not report["errors"], report
    assert report["url"].startswith(f"wss://127.0.0.1:{server.port}/v1/realtime/translations?model="), report
    assert report["types"][0] == "session.created" and report["types"][-1] == "session.closed", report
    heard = words(report["translation"])
    for _, expected in PHRASES:
        assert expected <= heard, report
    assert {"buenos", "tengo"} <= words(report["source"]), report
    assert report["audio_bytes"] / 48000 > 1.0, report  # seconds of translated speech
    assert len(report["elapsed"]) == len(PHRASES) and report["elapsed"] == sorted(report["elapsed"]), report
