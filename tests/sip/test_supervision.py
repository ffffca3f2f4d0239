"""A supervisor takes a phone call over (issue 51): baresip is the caller over G.711, the server the loopback
profile (FAKE stages), the supervisor a WebSocket on ``?call_id=CALL&mode=supervise``. It hears the caller's words
(``supervisor.input_audio.delta``), and the phone hears the supervisor as the call's outgoing RTP: the real Whisper
transcribes what the phone received."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time

import numpy as np
import websockets

from pipelines import audio
from pipelines.backends.faster_whisper_stt import WhisperEngine
from tests.sip.conftest import loud_seconds
from tests.support.baresip import write_wav
from tests.support.polling import wait_for
from tests.support.speech import pcm16_chunks, silence, spoken

CALLER_SAYS = "I would like to check on my order please."
SUPERVISOR_SAYS = "Hello, this is your supervisor speaking. Your order has shipped."


async def test_a_supervisor_takes_a_phone_call_over_and_the_phone_hears_the_supervisor(server, phones, tmp_path):
    caller = np.concatenate([silence(4.0, 8000), spoken(CALLER_SAYS, 8000), silence(40, 8000)])
    phone = phones(write_wav(tmp_path / "caller.wav", caller))
    known = set(re.findall(r"SIP call (rtc_\w+) answered", server.full_log()))
    phone.dial(server.sip_uri)
    found = wait_for(
        lambda: [c for c in re.findall(r"SIP call (rtc_\w+) answered", server.full_log()) if c not in known],
        15,
        what="the call answered",
    )
    async with websockets.connect(f"{server.ws}?call_id={found[-1]}&mode=supervise", max_size=None) as boss:
        events: list[dict] = []

        async def until(kind: str, timeout: float = 30.0, **fields: str) -> dict:
            deadline = time.monotonic() + timeout
            while True:
                event = json.loads(await asyncio.wait_for(boss.recv(), max(0.1, deadline - time.monotonic())))
                events.append(event)
                if event["type"] == kind and all(event.get(k) == v for k, v in fields.items()):
                    return event

        await until("supervisor.state", state="listening")
        await boss.send(json.dumps({"type": "supervisor.take_over"}))
        await until("supervisor.state", state="taken_over")
        # The caller speaks: the supervisor hears it; the agent, silenced, does not answer.
        await until("conversation.item.input_audio_transcription.completed", 30)
        heard = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "supervisor.input_audio.delta")
        assert loud_seconds(audio.decode(heard, audio.PCM), 24000) > 1.0
        assert "response.created" not in [e["type"] for e in events]
        # The supervisor speaks, at the pace of speech.
        start = time.monotonic()
        for n, chunk in enumerate(pcm16_chunks(np.concatenate([spoken(SUPERVISOR_SAYS), silence(1.5)])), start=1):
            await boss.send(json.dumps({"type": "supervisor.audio.append", "audio": chunk}))
            await asyncio.sleep(max(0.0, start + n * 0.02 - time.monotonic()))
        done = await until("response.done", 30)
        assert done["response"]["status"] == "completed"
        await asyncio.sleep(1.0)  # the last RTP packets reach the phone
    received, rate = phone.heard()
    since = int((4.0 + len(spoken(CALLER_SAYS, 8000)) / 8000) * rate)
    assert loud_seconds(received[since:], rate) > 1.0, f"the phone heard {loud_seconds(received, rate)} s in all"
    samples = audio.resample(received.astype(np.float32), rate, audio.PIPELINE_RATE)
    words = (await asyncio.to_thread(WhisperEngine().transcribe, samples)).lower()
    assert "supervisor" in words and "order" in words, words  # through G.711, "shipped" is heard as it can be
    phone.hang_up()
