"""A supervisor takes a WebRTC call over (issue 51): a real server (loopback profile, FAKE stages) and an aiortc
client as the caller. Once taken over, the supervisor's voice is the call's outgoing track (the caller's receiver
plays it), framed on the data channel as a response without audio deltas, as an answer is."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import numpy as np
import websockets

from pipelines import audio
from tests.support.client import types
from tests.support.speech import silence, tone


async def test_the_supervisors_voice_is_the_calls_outgoing_track(server, calls):
    call = calls(server)
    assert (await call.connect()).status == 201
    call_id = call.location.rsplit("/", 1)[1]
    await call.events.until("session.created")
    async with websockets.connect(f"{server.ws}?call_id={call_id}&mode=supervise", max_size=None) as boss:
        states = []
        while len(states) < 2:
            event = json.loads(await asyncio.wait_for(boss.recv(), 10))
            if event["type"] == "supervisor.state":
                states.append(event["state"])
                if len(states) == 1:
                    await boss.send(json.dumps({"type": "supervisor.take_over"}))
        assert states == ["listening", "taken_over"]
        started = time.monotonic()
        voice = audio.encode(np.concatenate([tone(1.0, freq=330.0), silence(1.2)]), audio.PCM)
        for n, at in enumerate(range(0, len(voice), 960), start=1):  # 20 ms chunks, at the pace of speech
            chunk = base64.b64encode(voice[at : at + 960]).decode()
            await boss.send(json.dumps({"type": "supervisor.audio.append", "audio": chunk}))
            await asyncio.sleep(max(0.0, started + n * 0.02 - time.monotonic()))
        done = await call.events.until("response.done", timeout=15)
        assert done["response"]["status"] == "completed"
        await call.events.until("output_audio_buffer.stopped", timeout=10)
    said = types(call.events.received)
    assert "response.output_audio.delta" not in said and "output_audio_buffer.started" in said
    heard = call.loud(since=started)
    assert len(heard) * 0.02 >= 0.8, f"the caller heard {len(heard) * 0.02:.2f} s of the supervisor's second"
