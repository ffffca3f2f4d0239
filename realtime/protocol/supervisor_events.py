"""What a supervisor sends on a supervise connection (``/v1/realtime?call_id=ID&mode=supervise``, issue 51): one
typed class per event, parsed and validated with the ``param`` each error names, and the name of the session's
method that carries it out. ``SUPERVISOR_EVENTS`` holds them by ``type``; the server events a supervisor gets
are named here too. Pure: no sockets, no records.

- ``supervisor.whisper`` ``{"text"}``: a note the agent reads from its next answer on; the caller never hears it.
- ``supervisor.take_over``: the agent stops and stays silent; the supervisor speaks to the caller.
- ``supervisor.audio.append`` ``{"audio"}``: the supervisor's voice (base64 PCM16, 24 kHz, mono), taken over only.
- ``supervisor.hand_back``: the agent answers again from the next turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self, TypeVar

from realtime.protocol.client_events import ClientEvent, Raw
from realtime.protocol.wire import EventError, decode_audio, loads, require

PREFIX = "supervisor."
MAX_WHISPER_CHARS = 2000

# The server events only supervisors get.
INPUT_AUDIO_DELTA = "supervisor.input_audio.delta"  # the caller's audio as it arrives (PCM16, 24 kHz, mono)
STATE = "supervisor.state"  # "listening" | "taken_over", and by whom: on connect and on every change
WHISPER_ADDED = "supervisor.whisper.added"  # a whisper the agent now reads (its item id and text)
LISTENING, TAKEN_OVER = "listening", "taken_over"

S = TypeVar("S", bound="type[SupervisorEvent]")
SUPERVISOR_EVENTS: dict[str, type[SupervisorEvent]] = {}


@dataclass(frozen=True, kw_only=True)
class SupervisorEvent(ClientEvent):
    """A supervisor's event; ``handler`` names the session's method, called with the supervisor's seat."""


def supervisor_event(cls: S) -> S:
    if cls.type in SUPERVISOR_EVENTS:
        raise ValueError(f"two classes for the supervisor event {cls.type!r}")
    SUPERVISOR_EVENTS[cls.type] = cls
    return cls


@supervisor_event
@dataclass(frozen=True, kw_only=True)
class Whisper(SupervisorEvent):
    type = "supervisor.whisper"
    handler = "on_supervisor_whisper"
    text: str

    @classmethod
    def parse(cls, raw: Raw, max_audio_bytes: int) -> Self:
        text = require(raw, "text", str).strip()
        if not text:
            raise EventError("invalid_value", "A whisper needs some text: 'text' is empty.", "text")
        if len(text) > MAX_WHISPER_CHARS:
            raise EventError(
                "string_above_max_length",
                f"Invalid 'text': a whisper is at most {MAX_WHISPER_CHARS} characters, got {len(text)}.",
                "text",
            )
        return cls(event_id=raw.get("event_id"), text=text)


@supervisor_event
@dataclass(frozen=True, kw_only=True)
class TakeOver(SupervisorEvent):
    type = "supervisor.take_over"
    handler = "on_supervisor_take_over"


@supervisor_event
@dataclass(frozen=True, kw_only=True)
class HandBack(SupervisorEvent):
    type = "supervisor.hand_back"
    handler = "on_supervisor_hand_back"


@supervisor_event
@dataclass(frozen=True, kw_only=True)
class AudioAppend(SupervisorEvent):
    type = "supervisor.audio.append"
    handler = "on_supervisor_audio_append"
    audio: bytes

    @classmethod
    def parse(cls, raw: Raw, max_audio_bytes: int) -> Self:
        audio = decode_audio(require(raw, "audio", str), "audio", max_audio_bytes)
        if len(audio) % 2:
            raise EventError("invalid_value", "Invalid 'audio': PCM16 has an even number of bytes.", "audio")
        return cls(event_id=raw.get("event_id"), audio=audio)


SUPERVISOR_EVENT_TYPES: tuple[str, ...] = tuple(SUPERVISOR_EVENTS)


def parse_supervisor_event(text: str | bytes | None, max_audio_bytes: int) -> SupervisorEvent:
    """Parses one frame of a supervise connection; raises :class:`EventError` (with the event's id): not JSON,
    not an object, or not a supervisor event (a supervise connection sends nothing else)."""
    if text is None:
        raise EventError("invalid_json", "Binary frames are not supported; send JSON text events.")
    raw: Any = loads(text)
    if not isinstance(raw, dict):
        raise EventError("invalid_type", "An event must be a JSON object.")
    event_id = raw.get("event_id")
    if event_id is not None and not isinstance(event_id, str):
        raise EventError("invalid_type", "Invalid type for 'event_id': expected a string.", "event_id")
    kind = raw.get("type")
    try:
        if kind not in SUPERVISOR_EVENTS:
            supported = ", ".join(f"'{name}'" for name in SUPERVISOR_EVENTS)
            shown = kind[:100] if isinstance(kind, str) else kind
            raise EventError(
                "invalid_value",
                f"Invalid value: '{shown}'. A supervise connection sends only these events: {supported}.",
                "type",
            )
        return SUPERVISOR_EVENTS[kind].parse(raw, max_audio_bytes)
    except EventError as exc:
        exc.event_id = event_id if isinstance(event_id, str) else None
        raise
