"""Drives Realtime sessions for the audit tests: in process (WebsocketCommunicator) and over real sockets."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.conformance import decode
from tests.support.polling import wait_for  # noqa: F401  (the audit tests import it from here)
from tests.support.speech import pcm16_chunks, silence, tone

Event = dict[str, Any]


async def receive_until(comm: Any, kind: str, timeout: float = 10.0) -> tuple[Event, list[Event]]:
    """Reads events until one of type ``kind``; returns it and everything seen before it."""
    seen: list[Event] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no {kind} in {timeout}s; saw {[e['type'] for e in seen]}")
        event = decode(await comm.receive_from(timeout=left))
        if event["type"] == kind:
            return event, seen
        seen.append(event)


async def text_turn(comm: Any, text: str) -> Event:
    await comm.send_json_to(
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        }
    )
    await comm.send_json_to({"type": "response.create"})
    done, _ = await receive_until(comm, "response.done")
    return done


async def voice_turn(comm: Any) -> tuple[Event, list[Event]]:
    """Speaks a tone then silence (server VAD ends the turn); returns response.done and the events before it."""
    for chunk in pcm16_chunks(tone(0.6)) + pcm16_chunks(silence(0.9)):
        await comm.send_json_to({"type": "input_audio_buffer.append", "audio": chunk})
    return await receive_until(comm, "response.done", timeout=15)


def ws_connect(url: str) -> Any:
    from websockets.sync.client import connect

    return connect(url, subprotocols=["realtime"], open_timeout=10, close_timeout=5, max_size=None)


def ws_receive_until(ws: Any, kind: str, timeout: float = 10.0) -> Event:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no {kind} in {timeout}s")
        event = decode(ws.recv(timeout=left))
        if event["type"] == kind:
            return event


def ws_text_turn(ws: Any, text: str) -> Event:
    ws.send(
        json.dumps(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            }
        )
    )
    ws.send(json.dumps({"type": "response.create"}))
    return ws_receive_until(ws, "response.done", timeout=15)
