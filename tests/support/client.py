"""A small Realtime client for tests: send events, wait for event types, collect what came.

It wraps either Channels' ``WebsocketCommunicator`` (the ASGI app in-process)
or a ``websockets`` connection (a real server). Every wait is bounded; a
timeout raises ``AssertionError`` listing the event types seen, so a failing
test says what arrived instead.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import numpy as np

from tests.support import conformance
from tests.support.speech import pcm16_chunks

Event = dict[str, Any]
Match = str | Iterable[str] | Callable[[Event], bool]

DEFAULT_TIMEOUT = 10.0


class Closed(Exception):
    """The server closed the socket."""

    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"closed with {code} {reason!r}")
        self.code, self.reason = code, reason


def _matcher(match: Match) -> Callable[[Event], bool]:
    if callable(match):
        return match
    types = {match} if isinstance(match, str) else set(match)
    return lambda event: event.get("type") in types


class RealtimeClient:
    """Speaks JSON events over a transport given as two coroutines: ``recv(timeout)`` and ``send(text)``.

    ``recv(timeout)`` returns the next text frame, ``None`` when nothing came in
    time, and raises :class:`Closed` when the server closed the socket. Every event
    received is validated against the openai SDK's types (``beta``: the beta ones).
    """

    def __init__(
        self, recv: Callable[[float], Awaitable[str | None]], send: Callable[[str], Awaitable[None]], beta: bool = False
    ) -> None:
        self._recv, self._send = recv, send
        self.beta = beta
        self.received: list[Event] = []  # everything, in order, for checks over the whole session
        self._sent = 0

    # --- transports -------------------------------------------------------

    @classmethod
    def over_communicator(cls, comm: Any, beta: bool = False) -> RealtimeClient:
        """Wraps a connected ``WebsocketCommunicator`` without ever cancelling its application on a timeout."""

        async def recv(timeout: float) -> str | None:
            deadline = time.monotonic() + timeout
            while True:
                if comm.future.done():
                    comm.future.result()  # re-raises the application's exception, if any
                try:
                    message = comm.output_queue.get_nowait()
                except asyncio.QueueEmpty:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    getter = asyncio.ensure_future(comm.output_queue.get())
                    done, _ = await asyncio.wait(
                        {getter, comm.future}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                    )
                    if getter not in done:
                        getter.cancel()
                        try:
                            await getter
                        except asyncio.CancelledError:
                            pass
                        else:  # it completed while being cancelled: keep the message
                            message = getter.result()
                            return cls._communicator_text(message)
                        continue
                    message = getter.result()
                return cls._communicator_text(message)

        async def send(text: str) -> None:
            await comm.send_to(text_data=text)

        return cls(recv, send, beta)

    @staticmethod
    def _communicator_text(message: dict[str, Any]) -> str:
        if message["type"] == "websocket.close":
            raise Closed(message.get("code"), message.get("reason") or "")
        assert message["type"] == "websocket.send", message
        return message["text"]

    @classmethod
    def over_websocket(cls, ws: Any, beta: bool = False) -> RealtimeClient:
        """Wraps a ``websockets`` (asyncio) client connection."""
        from websockets.exceptions import ConnectionClosed

        async def recv(timeout: float) -> str | None:
            try:
                return await asyncio.wait_for(ws.recv(), timeout)
            except TimeoutError:
                return None
            except ConnectionClosed as exc:
                rcvd = exc.rcvd
                raise Closed(rcvd.code if rcvd else None, rcvd.reason if rcvd else "") from None

        async def send(text: str) -> None:
            await ws.send(text)

        return cls(recv, send, beta)

    # --- sending ------------------------------------------------------------

    async def send(self, event_type: str, **fields: Any) -> str:
        """Sends an event with a fresh ``event_id`` and returns that id."""
        self._sent += 1
        event_id = f"evt_test_{self._sent}"
        await self._send(json.dumps({"type": event_type, "event_id": event_id, **fields}))
        return event_id

    async def send_raw(self, text: str) -> None:
        await self._send(text)

    async def update_session(self, **session: Any) -> Event:
        await self.send("session.update", session={"type": "realtime", **session})
        return await self.until("session.updated")

    async def append(self, samples: np.ndarray, chunk_ms: int = 20, pace: float = 0.0) -> int:
        """Appends 24 kHz float samples as PCM16 chunks; ``pace`` > 0 sleeps that share of real time per chunk."""
        chunks = pcm16_chunks(samples, chunk_ms)
        for chunk in chunks:
            await self.send("input_audio_buffer.append", audio=chunk)
            if pace:
                await asyncio.sleep(chunk_ms / 1000 * pace)
        return len(chunks)

    async def append_bytes(self, data: bytes, chunk_bytes: int) -> None:
        for at in range(0, len(data), chunk_bytes):
            await self.send("input_audio_buffer.append", audio=base64.b64encode(data[at : at + chunk_bytes]).decode())

    async def say_text(self, text: str, **response: Any) -> None:
        """Adds a user text item and asks for a response."""
        await self.send(
            "conversation.item.create",
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        )
        await self.send("response.create", **({"response": response} if response else {}))

    # --- receiving ----------------------------------------------------------

    async def recv(self, timeout: float = DEFAULT_TIMEOUT) -> Event | None:
        """The next event, or None when nothing came within ``timeout``."""
        text = await self._recv(timeout)
        if text is None:
            return None
        event = conformance.decode(text, self.beta)
        self.received.append(event)
        return event

    async def until(self, match: Match, timeout: float = DEFAULT_TIMEOUT) -> Event:
        """Receives until an event matches; returns it (what came before is in ``received``)."""
        return (await self.collect(match, timeout))[-1]

    async def collect(self, match: Match, timeout: float = DEFAULT_TIMEOUT) -> list[Event]:
        """Every event up to and including the first that matches."""
        matches = _matcher(match)
        deadline = time.monotonic() + timeout
        events: list[Event] = []
        while True:
            left = deadline - time.monotonic()
            event = await self.recv(left) if left > 0 else None
            if event is None:
                raise AssertionError(f"no {match!r} within {timeout}s; got {[e['type'] for e in events]}")
            events.append(event)
            if matches(event):
                return events

    async def drain(self, quiet_s: float = 0.3, limit_s: float = 10.0) -> list[Event]:
        """Every event until none comes for ``quiet_s`` (at most ``limit_s`` in all)."""
        events: list[Event] = []
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            event = await self.recv(min(quiet_s, max(0.0, deadline - time.monotonic())))
            if event is None:
                break
            events.append(event)
        return events

    async def error(self, timeout: float = DEFAULT_TIMEOUT) -> Event:
        """The next ``error`` event's ``error`` object."""
        return (await self.until("error", timeout))["error"]

    async def closed(self, timeout: float = DEFAULT_TIMEOUT) -> Closed:
        """Receives until the server closes the socket; returns the close."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                left = deadline - time.monotonic()
                if left <= 0 or await self.recv(left) is None:
                    raise AssertionError(f"the socket was not closed within {timeout}s")
            except Closed as close:
                return close


def types(events: Iterable[Event]) -> list[str]:
    return [event["type"] for event in events]


def audio_bytes(events: Iterable[Event], delta_type: str = "response.output_audio.delta") -> bytes:
    """The audio of every delta of ``delta_type``, joined."""
    return b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == delta_type)


def text_item(text: str, role: str = "user") -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}
