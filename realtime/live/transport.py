"""What a transport and the session core say to each other: typed objects, never wire dictionaries.

A transport (the WebSocket consumer, a WebRTC call, a SIP call, the tests' in-memory one)
implements :class:`Transport`; one that plays the reply itself implements :class:`PlaysAudio`
too, and one the operator controls by its call id (a SIP call: accept, reject, refer) implements
:class:`Controlled`. It opens its session with :func:`realtime.live.core.open_session` and a
:class:`realtime.live.core.OpenRequest`, which raises :class:`Refusal` when no session
can start. Nothing here knows the records, the credentials or the node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pipelines import messages as m
from realtime.protocol.events import error_event
from realtime.protocol.wire import encode_audio

if TYPE_CHECKING:
    from realtime.access.owner import Caller

Event = dict[str, Any]

CALL_NOT_FOUND = "No live call with id '{}' that you may reach."  # unknown, or not the caller's


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


@runtime_checkable
class ClosedByClient(Protocol):
    """A transport whose client closes it after the session's last event: a WebSocket. OpenAI's SDKs close
    theirs on ``session.closed`` and call a server's close that crosses theirs abnormal (the server, seeing
    the client's close after sending its own, drops the connection before its close frame is out)."""

    async def close_unless_closed(self, code: int, reason: str, grace_s: float) -> None:
        """Closes from the server's side unless the client has closed within ``grace_s``."""


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


@dataclass(frozen=True)
class ControlAnswer:
    """The answer to one control request (accept, reject, refer), wherever the call is held: an HTTP status,
    and for a refusal the API's error (``code``, ``message``, ``param``). It crosses processes as a small dict
    (:meth:`as_message`)."""

    status: int
    code: str = ""
    message: str = ""
    param: str | None = None

    @classmethod
    def not_found(cls, call_id: str) -> ControlAnswer:
        """The one answer for a call that does not exist and for one the caller may not reach (the owner rule)."""
        return cls(404, "call_not_found", CALL_NOT_FOUND.format(call_id[:100]), "call_id")

    def as_message(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.code, "message": self.message, "param": self.param}

    @classmethod
    def from_message(cls, message: Any) -> ControlAnswer:
        """What another process answered; anything malformed is a 502 (it answered, but not as a server does)."""
        status = message.get("status") if isinstance(message, dict) else None
        if not isinstance(status, int) or isinstance(status, bool) or not 200 <= status <= 599:
            return cls(502, "server_error", "The server holding the call answered the control request wrongly.")
        param = message.get("param")
        return cls(
            status,
            str(message.get("code") or ""),
            str(message.get("message") or ""),
            param if isinstance(param, str) else None,
        )


@runtime_checkable
class Controlled(Protocol):
    """A transport the operator controls by its call id (a SIP call): ``accept``, ``reject``, ``refer``.

    The core hands it each request, from an HTTP view on this process or from another process through the
    session's mailbox (``call.control``), so both are decided by the same code; ``caller`` is who asks, already
    authenticated where the request arrived."""

    async def control(self, action: str, body: dict[str, Any], caller: Caller) -> ControlAnswer:
        """Runs ``action`` with the request's JSON ``body``; never raises for the caller's mistakes."""


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
