"""What a transport and the session core say to each other: typed objects, never wire dictionaries.

A transport (the WebSocket consumer, a WebRTC call, a SIP call, the tests' in-memory one)
implements :class:`Transport`; one that plays the reply itself implements :class:`PlaysAudio`
too. It opens its session with :func:`realtime.protocol.core.open_session` and a
:class:`realtime.protocol.core.OpenRequest`, which raises :class:`Refusal` when no session
can start. Nothing here knows the records, the credentials or the node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pipelines import messages as m
from realtime.protocol.events import encode_audio, error_event

Event = dict[str, Any]

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_POLICY = 1008
CLOSE_INTERNAL = 1011
CLOSE_TRY_AGAIN = 1013


@dataclass(frozen=True)
class ServerEvent:
    """One server event, shaped for the client (GA or beta), made at the core's boundary.

    An audio delta carries its audio as :class:`pipelines.messages.AudioOut` (bytes in the
    session's output format); only :meth:`to_wire` turns it into the base64 ``delta``.
    """

    type: str
    payload: dict[str, Any]
    audio: m.AudioOut | None = None

    @classmethod
    def of(cls, event: Event) -> ServerEvent:
        payload = dict(event)
        kind = payload.pop("type")
        audio = payload.pop("audio") if isinstance(payload.get("audio"), m.AudioOut) else None
        return cls(kind, payload, audio)

    def to_wire(self) -> Event:
        """The event as JSON-ready data (what a WebSocket or a data channel sends)."""
        wire = {"type": self.type, **self.payload}
        if self.audio is not None:
            wire["delta"] = encode_audio(self.audio.data)
        return wire


class Transport(Protocol):
    """What the session needs from whatever carries it."""

    async def send_event(self, event: ServerEvent) -> None:
        """Sends one server event (serialise it with ``event.to_wire()``)."""

    async def close(self, code: int, reason: str) -> None:
        """Closes the connection from the server's side (the ``error`` that says why went out already)."""


@dataclass(frozen=True)
class ClearedReply:
    """What :meth:`PlaysAudio.clear_reply` cut off: the reply that was playing (``item_id`` None: none was,
    ``response_id`` is then the latest reply's) and how much of it was heard."""

    response_id: str
    item_id: str | None = None
    played_ms: int = 0


@runtime_checkable
class PlaysAudio(Protocol):
    """A transport that plays the reply itself (WebRTC, SIP): the server owns the output audio buffer.

    The core hands it the reply's audio instead of ``response.output_audio.delta`` events,
    says when a reply has no more audio, and on barge-in or ``output_audio_buffer.clear``
    asks it to stop; the transport tells the core when playout starts and stops
    (:meth:`SessionCore.output_audio_started`, :meth:`SessionCore.output_audio_stopped`).
    """

    @property
    def playing(self) -> str | None:
        """The response whose audio is playing or queued, if any."""

    def play_audio(self, item_id: str, audio: m.AudioOut, audio_format: str) -> None:
        """Queues the next piece of a reply (``audio_format``: a Realtime format, e.g. ``audio/pcm``)."""

    def end_reply(self, response_id: str) -> None:
        """No more audio comes for ``response_id``: play out what is queued, then stop."""

    def clear_reply(self) -> ClearedReply:
        """Stops the reply at once and drops what is queued."""


@dataclass(eq=False)
class Refusal(Exception):
    """Why no session could start, with all a transport needs to answer it.

    A WebSocket sends :meth:`event` and closes with ``close_code``/``reason``; an HTTP
    transport answers ``http_status`` with the same error object.
    """

    code: str
    message: str
    close_code: int
    reason: str
    error_type: str = "invalid_request_error"
    http_status: int = 503
    param: str | None = None

    def event(self) -> ServerEvent:
        return ServerEvent.of(error_event(self.code, self.message, self.param, None, self.error_type))
