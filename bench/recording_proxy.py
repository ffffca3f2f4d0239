"""A WebSocket proxy that records what passes: each connection's events, timed by one clock, on their way in and
out. Benchmarks put it between their clients and the server, so that clients of any kind (other processes,
other libraries) are timed alike at the server's door, and the client events the server got can be read back."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import websockets

from tests.support.server import free_port


@dataclass
class Capture:
    """One connection's events as they passed the proxy: (monotonic time, "client" or "server", event)."""

    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)

    def note(self, side: str, text: str | bytes) -> None:
        at = time.monotonic()
        event = json.loads(text)
        if event.get("type") == "input_audio_buffer.append":
            event = {"type": "input_audio_buffer.append", "bytes": len(base64.b64decode(event.get("audio", "")))}
        elif event.get("type") == "response.output_audio.delta":
            event = {k: v for k, v in event.items() if k != "delta"}
        self.events.append((at, side, event))

    def count(self, side: str, kind: str) -> int:
        return sum(1 for _, s, e in self.events if s == side and e["type"] == kind)


class RecordingProxy:
    """A WebSocket proxy in a thread of its own: every connection to it is forwarded to ``upstream`` (same path
    and query) and captured."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.removesuffix("/v1/realtime")
        self.port = free_port()
        self.captures: list[Capture] = []
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Future[None] | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    def start(self) -> RecordingProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set_result, None)
        self._thread.join(10)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = self._loop.create_future()
        async with websockets.serve(self._forward, "127.0.0.1", self.port, max_size=None, compression=None):
            self._ready.set()
            await self._stop

    async def _forward(self, client: Any) -> None:
        capture = Capture()
        self.captures.append(capture)
        headers = {k: v for k in ("Authorization", "OpenAI-Beta") if (v := client.request.headers.get(k))}
        async with websockets.connect(
            self.upstream + client.request.path, additional_headers=headers, max_size=None, compression=None
        ) as server:

            async def pump(source: Any, sink: Any, side: str) -> None:
                try:
                    async for message in source:
                        capture.note(side, message)
                        await sink.send(message)
                finally:
                    await sink.close()

            await asyncio.gather(pump(client, server, "client"), pump(server, client, "server"), return_exceptions=True)


def speech_end(capture: Capture, speech_end_bytes: int) -> float | None:
    """When the client had sent the speech's last audio (the first ``speech_end_bytes`` of its appends)."""
    appended = 0
    for at, side, event in capture.events:
        if side == "client" and event["type"] == "input_audio_buffer.append":
            appended += event["bytes"]
            if appended >= speech_end_bytes:
                return at
    return None


def timeline(capture: Capture, speech_end_bytes: int) -> list[str]:
    """The connection's events but the audio, each with its time from the end of speech (ms): what to read when a
    client is slower (``--captures``)."""
    end, lines, deltas = speech_end(capture, speech_end_bytes), [], set()
    for at, side, event in capture.events:
        kind = event["type"]
        if kind == "input_audio_buffer.append":
            continue
        if kind == "response.output_audio.delta":
            if event.get("response_id") in deltas:
                continue
            deltas.add(event.get("response_id"))
        detail = {
            "conversation.item.create": lambda e: e["item"]["type"] + " " + str(e["item"].get("role", "")),
            "conversation.item.added": lambda e: e["item"]["type"],
            "response.create": lambda e: json.dumps(e.get("response", {}))[:200],
            "response.created": lambda e: e["response"]["id"],
            "response.done": lambda e: e["response"]["id"] + " " + e["response"]["status"],
            "response.output_audio.delta": lambda e: e.get("response_id", "") + " (first)",
            "session.update": lambda e: json.dumps(e.get("session", {}))[:1500],
            "error": lambda e: e["error"].get("message", ""),
        }.get(kind, lambda e: "")(event)
        lines.append(f"{(at - (end or at)) * 1000:+8.0f} {side:6} {kind} {detail}")
    return lines
