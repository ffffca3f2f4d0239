"""A real server with the default models, shared by the real-pipeline tests of this folder."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import websockets

from tests.support.conformance import decode
from tests.support.server import LiveServer
from tests.support.speech import pcm16_chunks, silence, spoken


@pytest.fixture(scope="module")
def real_server(tmp_path_factory) -> Iterator[LiveServer]:
    """``manage.py serve`` with the real default models (Silero, Whisper, the LM of pipelines/config.py, Piper),
    2 units."""
    server = LiveServer(tmp_path_factory.mktemp("real"), env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "2"})
    server.start(ready_timeout=900)
    yield server
    server.stop()


@dataclass
class Turn:
    """What a client saw of one spoken turn."""

    events: list[dict[str, Any]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    speech_end_at: float = 0.0

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def first(self, kind: str) -> dict[str, Any]:
        return next(e for e in self.events if e["type"] == kind)

    def index(self, kind: str) -> int:
        return self.types().index(kind)

    def audio(self) -> bytes:
        import base64

        return b"".join(base64.b64decode(e["delta"]) for e in self.events if e["type"] == "response.output_audio.delta")


async def connect(server: LiveServer, retry_s: float = 10.0) -> websockets.ClientConnection:
    """Opens a session; while the units of the previous test are still draining, tries again."""
    deadline = time.monotonic() + retry_s
    while True:
        ws = await websockets.connect(server.ws, max_size=None, open_timeout=20)
        created = decode(await asyncio.wait_for(ws.recv(), 20))
        if created["type"] == "session.created":
            return ws
        await ws.close()
        assert created["error"]["code"] == "session_limit_reached" and time.monotonic() < deadline, created
        await asyncio.sleep(0.1)


async def speak(
    ws: websockets.ClientConnection,
    samples: np.ndarray,
    lead_s: float = 0.6,
    tail_s: float = 1.5,
    until: str = "response.done",
    timeout: float = 120.0,
) -> Turn:
    """Streams speech at real-time pace in 20 ms chunks and collects events until ``until``."""
    turn = Turn()
    lead, body, tail = pcm16_chunks(silence(lead_s)), pcm16_chunks(samples), pcm16_chunks(silence(tail_s))

    async def send() -> None:
        start = time.monotonic()
        for n, chunk in enumerate(lead + body + tail, start=1):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            if n == len(lead) + len(body):
                turn.speech_end_at = time.monotonic()
            await asyncio.sleep(max(0.0, start + n * 0.02 - time.monotonic()))

    sender = asyncio.create_task(send())
    try:
        await collect(ws, turn, until, timeout)
    finally:
        await sender
    return turn


async def collect(ws: websockets.ClientConnection, turn: Turn, until: str, timeout: float) -> Turn:
    deadline = time.monotonic() + timeout
    while True:
        event = decode(await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic())))
        turn.events.append(event)
        turn.arrivals.append(time.monotonic())
        if event["type"] == until:
            return turn


async def ask_in_text(ws: websockets.ClientConnection, text: str, timeout: float, response: dict | None = None) -> Turn:
    """A typed user message, then ``response.create`` (with ``response`` settings); the turn up to response.done."""
    await ws.send(
        json.dumps(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            }
        )
    )
    await ws.send(json.dumps({"type": "response.create", **({"response": response} if response else {})}))
    return await collect(ws, Turn(), "response.done", timeout=timeout)


def question(text: str) -> np.ndarray:
    return spoken(text)
