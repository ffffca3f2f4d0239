"""The agent calls out with the real default models (issue 52): baresip answers on its own, the agent speaks first
after ``response.create`` on the sideband (``/v1/realtime?call_id=``), and what baresip received over G.711, kept
as a WAV, is transcribed by the real faster-whisper: the callee heard the sentence the agent said."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from pipelines.audio import resample
from tests.sip.conftest import loud_seconds, sip_server, wait_free
from tests.sip.test_outbound import dial, hang_up, status_becomes
from tests.support.baresip import write_wav
from tests.support.polling import wait_for
from tests.support.server import LiveServer
from tests.support.speech import silence, spelled_alike

INSTRUCTIONS = (
    "You are calling Sam from the dental clinic to remind him of his appointment tomorrow at ten. "
    "When the call starts, greet Sam and say why you are calling, in one short sentence."
)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    live = sip_server(
        tmp_path_factory.mktemp("sip-outbound-real"),
        S2S_PIPELINE="real",
        S2S_POOL_SIZE="1",
        S2S_AUTH_REQUIRED="1",
        S2S_SIP_OUTBOUND_ALLOW="sip:*@127.0.0.1:*",
    )
    live.keys = {"alice": live.manage("create_api_key", "alice").stdout.strip()}  # type: ignore[attr-defined]
    live.api_key = live.keys["alice"]  # type: ignore[attr-defined]
    yield live
    live.stop()


@pytest.fixture(scope="module")
def whisper():
    from pipelines.backends.faster_whisper_stt import WhisperEngine

    return WhisperEngine(cpu_threads=2)


async def first_sentence(server: LiveServer, call_id: str) -> str:
    """Follows the call, asks for the agent's first words once answered, and returns their transcript."""
    key = server.api_key  # type: ignore[attr-defined]
    sideband = openai.AsyncOpenAI(api_key=key, base_url=f"{server.http}/v1", max_retries=0)
    said, stopped = "", False
    async with sideband.realtime.connect(call_id=call_id) as connection:
        assert (await asyncio.wait_for(connection.recv(), 10)).type == "session.created"
        await asyncio.to_thread(status_becomes, server, call_id, "answered", 20)
        await connection.send({"type": "response.create"})
        deadline = time.monotonic() + 180
        while not (said and stopped) and time.monotonic() < deadline:
            event = await asyncio.wait_for(connection.recv(), max(0.1, deadline - time.monotonic()))
            if event.type == "response.output_audio_transcript.done":
                said = event.transcript
            stopped = stopped or event.type == "output_audio_buffer.stopped"
    assert said and stopped, (said, stopped)
    return said


async def test_baresip_hears_the_agents_first_sentence_transcribed_by_faster_whisper(server, phones, whisper, tmp_path):
    quiet = write_wav(tmp_path / "quiet.wav", silence(120, 8000))  # the callee says nothing: the agent speaks first
    phone = phones(quiet, account=";answermode=auto")
    session = {"type": "realtime", "instructions": INSTRUCTIONS}
    answer = await asyncio.to_thread(dial, server, {"to": f"sip:phone@127.0.0.1:{phone.sip_port}"}, None, session)
    assert answer.status == 201, answer.body
    call_id = json.loads(answer.body)["id"]
    said = await first_sentence(server, call_id)
    await asyncio.to_thread(wait_for, lambda: loud_seconds(*phone.heard()) >= 1.0, 20, what="the sentence heard")
    await asyncio.sleep(1.0)  # the last frames through baresip's jitter buffer into its dump
    received, rate = phone.heard()
    kept = write_wav(Path(tmp_path) / "received.wav", received, rate)  # what baresip received, kept with the test
    heard = whisper.transcribe(resample(received, rate, 16000))
    assert spelled_alike(heard, said) >= 0.6, (said, heard, kept)
    assert (await asyncio.to_thread(hang_up, server, call_id)).status == 204
    await asyncio.to_thread(wait_for, phone.hung_up, 10, what="the BYE at the callee")
    assert await asyncio.to_thread(wait_free, server, 1) == 1
