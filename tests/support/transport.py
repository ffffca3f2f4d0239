"""The smallest honest transport: a session behind two in-memory queues, for protocol tests.

It does what every transport does and nothing else: opens its session with
:func:`realtime.live.core.open_session`, answers a :class:`Refusal` (its error, then
the close), hands each client frame to ``core.receive``, sends what the core hands it
(``ServerEvent.to_wire()`` as JSON text) and closes when told. No socket, no ASGI app:
what a protocol test sees is the session core alone. ``PlayingTransport`` also plays
the reply itself (:class:`realtime.live.transport.PlaysAudio`), as WebRTC and SIP do,
and keeps the audio it was handed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pipelines import messages as m
from realtime.live.core import SessionCore, open_session
from realtime.live.opening import OpenRequest
from realtime.live.transport import ClearedReply, Refusal, ServerEvent
from realtime.models import EndReason, TransportKind
from realtime.node import runtime
from tests.support.client import Closed, RealtimeClient

CLOSE_NORMAL = 1000


class MemoryTransport:
    """One session; ``client`` is a :class:`RealtimeClient` speaking to it."""

    def __init__(self) -> None:
        self.core: SessionCore | None = None
        self.closed: tuple[int, str] | None = None
        self.sent: list[ServerEvent] = []  # what the core handed over, typed
        self._frames: asyncio.Queue[str | None] = asyncio.Queue()
        self.client = RealtimeClient(self._recv, self._send)

    async def open(self, beta: bool = False, **request: Any) -> MemoryTransport:
        """Opens the session (``request``: the fields of :class:`OpenRequest`); a refusal is answered as a
        WebSocket answers it, so the client reads the error, then the close."""
        self.client.beta = beta
        request.setdefault("transport", TransportKind.WEBSOCKET)  # the records know no kind for tests
        try:
            self.core = await open_session(runtime.current(), self, OpenRequest(beta=beta, **request))
        except Refusal as refusal:
            await self.send_event(refusal.event())
            await self.close(refusal.close_code, refusal.reason)
        return self

    async def disconnect(self) -> None:
        """The client goes away."""
        if self.core is not None:
            await self.core.end(EndReason.CLIENT_CLOSED, CLOSE_NORMAL)

    # --- the transport (realtime.live.transport.Transport) ----------------------------

    async def send_event(self, event: ServerEvent) -> None:
        self.sent.append(event)
        self._frames.put_nowait(json.dumps(event.to_wire()))

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)
        self._frames.put_nowait(None)

    # --- the client's side ----------------------------------------------------------------

    async def _recv(self, timeout: float) -> str | None:
        try:
            frame = await asyncio.wait_for(self._frames.get(), timeout)
        except TimeoutError:
            return None
        if frame is None:
            self._frames.put_nowait(None)  # closed stays closed
            raise Closed(*(self.closed or (None, "")))
        return frame

    async def _send(self, text: str) -> None:
        if self.closed is not None or self.core is None:
            raise Closed(*(self.closed or (None, "")))
        await self.core.receive(text, len(text))


class PlayingTransport(MemoryTransport):
    """A memory transport that plays the reply itself: it is handed the audio, never an audio delta."""

    def __init__(self) -> None:
        super().__init__()
        self.played: list[tuple[str, m.AudioOut, str]] = []  # (item id, audio, format) as handed over
        self.queued: list[str] = []  # responses with audio not yet played out, in order
        self.ended_replies: list[str] = []
        self.cleared: set[str] = set()  # replies cut off: what else of them comes is not played

    @property
    def playing(self) -> str | None:
        return self.queued[0] if self.queued else None

    def play_audio(self, item_id: str, audio: m.AudioOut, audio_format: str) -> None:
        if audio.response_id in self.cleared:
            return
        self.played.append((item_id, audio, audio_format))
        if audio.response_id not in self.queued:
            self.queued.append(audio.response_id)
            if self.core is not None and len(self.queued) == 1:
                self.core.output_audio_started(audio.response_id)

    def end_reply(self, response_id: str) -> None:
        """Plays it out at once (no clock here): the reply stops as soon as it is complete."""
        self.ended_replies.append(response_id)
        if response_id in self.queued:
            self.queued.remove(response_id)
            if self.core is not None:
                self.core.output_audio_stopped(response_id)

    def clear_reply(self) -> ClearedReply:
        if not self.queued:
            return ClearedReply(self.played[-1][1].response_id if self.played else "")
        response_id = self.queued[0]
        self.cleared.update(self.queued)
        self.queued = []
        item_id = next(item for item, audio, _ in self.played if audio.response_id == response_id)
        played = sum(len(audio.data) for _, audio, _ in self.played if audio.response_id == response_id)
        return ClearedReply(response_id, item_id, played // 48)  # 24 kHz PCM16: 48 bytes a ms
