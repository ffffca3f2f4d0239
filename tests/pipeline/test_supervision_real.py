"""A supervisor on a live session with the real default models (issue 51): the caller is the openai Python SDK,
the supervisor a raw WebSocket on ``/v1/realtime?call_id=SESSION&mode=supervise``. It hears the caller as they
speak (within 500 ms), whispers an instruction that changes the next answer and reaches no caller event, takes
the call over (the agent stays silent; the caller hears the supervisor, as Whisper transcribes what the caller
received) and hands it back (the agent answers again). The protocol with FAKE stages: tests/core/test_supervision.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import websockets
from openai import AsyncOpenAI

from pipelines import audio
from pipelines.backends.faster_whisper_stt import WhisperEngine
from tests.support.server import LiveServer
from tests.support.speech import pcm16_chunks, silence, spoken
from tests.support.supervisor import check_supervisor_event

SESSION = {
    "type": "realtime",
    "output_modalities": ["audio"],
    "audio": {"input": {"transcription": {"model": "whisper-1"}, "turn_detection": {"type": "server_vad"}}},
}
QUESTION = "What is the capital of France?"
# What the default LM (Qwen2.5-Coder 0.5B) follows: a fact to tell. Asked without it, it makes one up ("at 10:00 AM").
SHOP_QUESTION = "When does the shop close today?"
WHISPER = "Tell the caller that the shop closes at nine tonight."
SUPERVISOR_SAYS = "Hello, this is your supervisor speaking. I will take care of your order myself."


@dataclass
class Heard:
    """Every event a side got, with when it came."""

    events: list[dict[str, Any]] = field(default_factory=list)
    at: list[float] = field(default_factory=list)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    async def until(self, kind: str, timeout: float = 60.0, after: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [e for e in self.events[after:] if e["type"] == kind]
            if found:
                return found[0]
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {kind} in {timeout} s: {[e['type'] for e in self.events[after:]][-30:]}")


async def read_into(receive: Any, heard: Heard) -> None:
    while True:
        event = await receive()
        heard.events.append(event)
        heard.at.append(time.monotonic())


@pytest.fixture
async def call(real_server: LiveServer) -> AsyncIterator[tuple[Any, Heard, str]]:
    """The caller: the openai SDK's GA client, its session set for server VAD and transcripts."""
    client = AsyncOpenAI(api_key="auth-is-off", base_url=f"{real_server.http}/v1")
    async with client.realtime.connect(model="gpt-realtime") as connection:
        created = await connection.recv()
        assert created.type == "session.created"
        await connection.session.update(session=SESSION)  # type: ignore[arg-type]
        heard = Heard()

        async def receive() -> dict[str, Any]:
            return (await connection.recv()).model_dump(exclude_unset=True)

        reader = asyncio.create_task(read_into(receive, heard))
        await heard.until("session.updated")
        try:
            yield connection, heard, created.session.id  # type: ignore[union-attr]
        finally:
            reader.cancel()


@pytest.fixture
async def boss(real_server: LiveServer, call) -> AsyncIterator[tuple[websockets.ClientConnection, Heard]]:
    """The supervisor, on the caller's session."""
    _, _, session_id = call
    url = f"{real_server.ws}?call_id={session_id}&mode=supervise"
    async with websockets.connect(url, max_size=None, open_timeout=20) as socket:
        heard = Heard()

        async def receive() -> dict[str, Any]:
            event = json.loads(await socket.recv())
            if event["type"].startswith("supervisor."):
                check_supervisor_event(event)
            return event

        reader = asyncio.create_task(read_into(receive, heard))
        assert (await heard.until("supervisor.state", 10))["state"] == "listening"
        try:
            yield socket, heard
        finally:
            reader.cancel()


async def say(connection: Any, samples: np.ndarray, lead_s: float = 0.5, tail_s: float = 1.2) -> list[float]:
    """The caller speaks at real-time pace in 20 ms chunks; returns when each chunk went."""
    sent: list[float] = []
    chunks = pcm16_chunks(silence(lead_s)) + pcm16_chunks(samples) + pcm16_chunks(silence(tail_s))
    start = time.monotonic()
    for n, chunk in enumerate(chunks, start=1):
        await connection.input_audio_buffer.append(audio=chunk)
        sent.append(time.monotonic())
        await asyncio.sleep(max(0.0, start + n * 0.02 - time.monotonic()))
    return sent


async def supervisor_says(socket: websockets.ClientConnection, samples: np.ndarray, tail_s: float = 1.5) -> None:
    start = time.monotonic()
    for n, chunk in enumerate(pcm16_chunks(np.concatenate([samples, silence(tail_s)])), start=1):
        await socket.send(json.dumps({"type": "supervisor.audio.append", "audio": chunk}))
        await asyncio.sleep(max(0.0, start + n * 0.02 - time.monotonic()))


async def state(heard: Heard, wanted: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(e["state"] == wanted for e in heard.of("supervisor.state")):
        assert time.monotonic() < deadline, f"no supervisor.state {wanted}: {heard.of('supervisor.state')}"
        await asyncio.sleep(0.05)


def pcm(events: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in events)


async def test_a_supervisor_hears_the_caller_live_and_a_whisper_steers_the_next_answer(call, boss):
    connection, caller, _ = call
    socket, supervisor = boss
    await socket.send(json.dumps({"type": "supervisor.whisper", "text": WHISPER}))
    await supervisor.until("supervisor.whisper.added", 10)
    sent = await say(connection, spoken(SHOP_QUESTION))
    done = await caller.until("response.done", 120)
    assert done["response"]["status"] == "completed", done
    await supervisor.until("response.done", 10)
    for _ in range(50):  # the caller's last chunks may reach the server after the answer is done
        if len(supervisor.of("supervisor.input_audio.delta")) >= len(sent):
            break
        await asyncio.sleep(0.1)
    # Listening: the caller's audio, all of it, each chunk within half a second of its sending.
    deltas = [(e, at) for e, at in zip(supervisor.events, supervisor.at) if e["type"] == "supervisor.input_audio.delta"]
    assert pcm([e for e, _ in deltas]) == b"".join(
        base64.b64decode(c) for c in pcm16_chunks(np.concatenate([silence(0.5), spoken(SHOP_QUESTION), silence(1.2)]))
    )
    latency = sorted(at - went for (_, at), went in zip(deltas, sent))
    p50, p95 = latency[len(latency) // 2], latency[int(len(latency) * 0.95)]
    print(f"listen latency over {len(latency)} chunks: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")
    assert p95 < 0.5
    heard = supervisor.of("conversation.item.input_audio_transcription.completed")
    assert heard and "shop" in heard[-1]["transcript"].lower()
    assert pcm(supervisor.of("response.output_audio.delta")) == pcm(caller.of("response.output_audio.delta"))
    # The whisper steered the answer, and no caller event carries it.
    answer = caller.of("response.output_audio_transcript.done")[-1]["transcript"]
    assert "nine" in answer.lower(), answer
    said = json.dumps(caller.events)
    assert WHISPER not in said and "supervisor" not in said.lower()


async def test_a_supervisor_takes_the_call_over_is_heard_by_the_caller_and_hands_it_back(call, boss):
    connection, caller, _ = call
    socket, supervisor = boss
    await socket.send(json.dumps({"type": "supervisor.take_over"}))
    await state(supervisor, "taken_over")
    # The caller's turn is transcribed, not answered.
    mark = len(caller.events)
    await say(connection, spoken(QUESTION))
    await caller.until("conversation.item.input_audio_transcription.completed", 60, after=mark)
    await asyncio.sleep(3.0)
    assert not [e for e in caller.events[mark:] if e["type"] == "response.created"]
    # The supervisor speaks; the caller gets it as a response, and hears it.
    mark = len(caller.events)
    await supervisor_says(socket, spoken(SUPERVISOR_SAYS))
    done = await caller.until("response.done", 60, after=mark)
    assert done["response"]["status"] == "completed"
    received = pcm([e for e in caller.events[mark:] if e["type"] == "response.output_audio.delta"])
    assert len(received) > 2 * 24000  # over a second of it
    samples = audio.resample(audio.decode(received, audio.PCM), 24000, audio.PIPELINE_RATE)
    words = (await asyncio.to_thread(WhisperEngine().transcribe, samples)).lower()
    assert "supervisor" in words and "order" in words, words
    item = done["response"]["output"][0]
    assert item["role"] == "assistant" and "supervisor" in item["content"][0]["transcript"].lower(), item
    # Handed back, the agent answers the next turn, knowing what was said.
    await socket.send(json.dumps({"type": "supervisor.hand_back"}))
    mark = len(caller.events)
    await say(connection, spoken(QUESTION))
    answer = await caller.until("response.done", 120, after=mark)
    assert answer["response"]["status"] == "completed"
    assert [e for e in caller.events[mark:] if e["type"] == "response.output_audio.delta"]
    states = [e["state"] for e in supervisor.of("supervisor.state")]
    assert states[-2:] == ["taken_over", "listening"], states
