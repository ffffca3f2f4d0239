"""The client events, one typed class each: it parses and validates its fields (each error names its ``param``)
and names the session core's method that carries it out (``handler``). ``REGISTRY`` holds them by ``type``.

Adding a client event is one class here, registered with ``@client_event``, and its handler on
``realtime.live.core.SessionCore`` (``tests/core/test_client_events.py`` checks that every handler exists).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, TypeVar

from realtime.protocol.client_items import ClientItem, parse_input, parse_item
from realtime.protocol.prompts import PromptLookup
from realtime.protocol.wire import EventError, decode_audio, loads, optional, require

Raw = dict[str, Any]
C = TypeVar("C", bound="type[ClientEvent]")


@dataclass(frozen=True, kw_only=True)
class ClientEvent:
    """A parsed client event: its ``type``, the client's ``event_id``, and (in a subclass) its typed fields."""

    type: ClassVar[str]
    handler: ClassVar[str]  # the name of the SessionCore method that carries it out
    event_id: str | None = None

    @classmethod
    def parse(cls, raw: Raw, max_audio_bytes: int) -> Self:
        """The event from its JSON object (``type`` and ``event_id`` already checked); raises :class:`EventError`."""
        return cls(event_id=raw.get("event_id"))

    def prompt_ref(self) -> Any:
        """The stored prompt reference the event names (``{"id": ...}``), read before the event is handled."""
        return None


REGISTRY: dict[str, type[ClientEvent]] = {}


def client_event(cls: C) -> C:
    """Registers an event class under its ``type``: the one table parsing and dispatch use."""
    if cls.type in REGISTRY:
        raise ValueError(f"two classes for the client event {cls.type!r}")
    REGISTRY[cls.type] = cls
    return cls


@dataclass(frozen=True, kw_only=True)
class SessionSettings(ClientEvent):
    """An event that carries session settings (``session``, an object), parsed alike: GA's ``session.update``
    and the beta's ``transcription_session.update``. Not an event of its own (not in ``REGISTRY``)."""

    session: Raw

    @classmethod
    def parse(cls, raw: Raw, max_audio_bytes: int) -> Self:
        return cls(event_id=raw.get("event_id"), session=require(raw, "session", dict))


@client_event
@dataclass(frozen=True, kw_only=True)
class SessionUpdate(SessionSettings):
    type = "session.update"
    handler = "on_session_update"
    prompts: PromptLookup | None = None  # the versions of the prompt ``session.prompt`` names, read by the core

    def prompt_ref(self) -> Any:
        return self.session.get("prompt")


@client_event
@dataclass(frozen=True, kw_only=True)
class InputAudioAppend(ClientEvent):
    type = "input_audio_buffer.append"
    handler = "on_input_audio_append"
    audio: bytes

    @classmethod
    def parse(cls, raw: Raw, max_audio_bytes: int) -> Self:
        audio = decode_audio(require(raw, "audio", str), "audio", max_audio_bytes)
        return cls(event_id=raw.get("event_id"), audio=audio)


@client_event
@dataclass(frozen=True, kw_only=True)
class InputAudioCommit(ClientEvent):
    type = "input_audio_buffer.commit"
    handler = "on_input_audio_commit"


@client_event
@dataclass(frozen=True, kw_only=True)
class InputAudioClear(ClientEvent):
    type = "input_audio_buffer.clear"
    handler = "on_input_audio_clear"


@client_event
@dataclass(frozen=True, kw_only=True)
class ItemCreate(ClientEvent):
    type = "conversation.item.create"
    handler = "on_item_create"
    item: ClientItem
    previous_item_id: str | None = None

    @classmethod
    def parse(cls, raw: Raw, max_audio_bytes: int) -> Self:
        previous = optional(raw, "previous_item_id", str)
        item = parse_item(require(raw, "item", dict), "item", max_audio_bytes)
        return cls(event_id=raw.get("event_id"), item=item, previous_item_id=previous)


@dataclass(frozen=True, kw_only=True)
class _ItemById(ClientEvent):
    item_id: str

    @classmethod
    def parse(cls, raw: Raw, max_audio_bytes: int) -> Self:
        return cls(event_id=raw.get("event_id"), item_id=require(raw, "item_id", str))


@client_event
@dataclass(frozen=True, kw_only=True)
class ItemRetrieve(_ItemById):
    type = "conversation.item.retrieve"
    handler = "on_item_retrieve"


@client_event
@dataclass(frozen=True, kw_only=True)
class ItemTruncate(ClientEvent):
    type = "conversation.item.truncate"
    handler = "on_item_truncate"
    item_id: str
    content_index: int
    audio_end_ms: int

    @classmethod
    def parse(cls, raw: Raw, max_audio_bytes: int) -> Self:
        return cls(
            event_id=raw.get("event_id"),
            item_id=require(raw, "item_id", str),
            content_index=require(raw, "content_index", int),
            audio_end_ms=require(raw, "audio_end_ms", int),
        )


@client_event
@dataclass(frozen=True, kw_only=True)
class ItemDelete(_ItemById):
    type = "conversation.item.delete"
    handler = "on_item_delete"


@client_event
@dataclass(frozen=True, kw_only=True)
class ResponseCreate(ClientEvent):
    type = "response.create"
    handler = "on_response_create"
    response: Raw = field(default_factory=dict)  # ``input`` parsed into items and references
    prompts: PromptLookup | None = None  # the versions of the prompt ``response.prompt`` names, read by the core

    @classmethod
    def parse(cls, raw: Raw, max_audio_bytes: int) -> Self:
        params = optional(raw, "response", dict, default={})
        if "input" in params and params["input"] is not None:
            params = dict(params, input=parse_input(params["input"], "response.input", max_audio_bytes))
        return cls(event_id=raw.get("event_id"), response=params)

    def prompt_ref(self) -> Any:
        return self.response.get("prompt")


@client_event
@dataclass(frozen=True, kw_only=True)
class ResponseCancel(ClientEvent):
    type = "response.cancel"
    handler = "on_response_cancel"
    response_id: str | None = None

    @classmethod
    def parse(cls, raw: Raw, max_audio_bytes: int) -> Self:
        return cls(event_id=raw.get("event_id"), response_id=optional(raw, "response_id", str))


@client_event
@dataclass(frozen=True, kw_only=True)
class OutputAudioClear(ClientEvent):
    type = "output_audio_buffer.clear"
    handler = "on_output_audio_clear"


@client_event
@dataclass(frozen=True, kw_only=True)
class TranscriptionSessionUpdate(SessionSettings):
    """The beta way to make a session a transcription session (GA: ``session.update`` with ``type``)."""

    type = "transcription_session.update"
    handler = "on_transcription_session_update"


CLIENT_EVENT_TYPES = tuple(REGISTRY)
# A supervisor's event (realtime.protocol.supervisor_events) sent on a caller's or a follower's connection.
SUPERVISOR_ONLY = (
    "'{}' is a supervisor's event: it is accepted only on a supervise connection "
    "(/v1/realtime?call_id=ID&mode=supervise, by a supervisor)."
)


def parse_event(text: str | bytes | None, max_audio_bytes: int) -> ClientEvent:
    """Parses and validates one client frame; raises :class:`EventError` (with the client's ``event_id``)."""
    raw = parse(text)
    try:
        return REGISTRY[raw["type"]].parse(raw, max_audio_bytes)
    except EventError as exc:
        exc.event_id = raw.get("event_id")
        raise


def parse(text: str | bytes | None) -> dict[str, Any]:
    """Parses one client frame into an event dict with a known ``type``."""
    if text is None:
        raise EventError("invalid_json", "Binary frames are not supported; send JSON text events.")
    event = loads(text)
    if not isinstance(event, dict):
        raise EventError("invalid_type", "An event must be a JSON object.")
    event_id = event.get("event_id")
    if event_id is not None and not isinstance(event_id, str):
        raise EventError("invalid_type", "Invalid type for 'event_id': expected a string.", "event_id")
    try:
        kind = event.get("type")
        if kind is None:
            raise EventError("missing_required_parameter", "Missing required parameter: 'type'.", "type")
        if not isinstance(kind, str):
            raise EventError("invalid_type", "Invalid type for 'type': expected a string.", "type")
        if kind not in REGISTRY and kind.startswith("supervisor."):
            raise EventError("invalid_value", SUPERVISOR_ONLY.format(kind[:100]), "type")
        if kind not in REGISTRY:
            supported = ", ".join(f"'{t}'" for t in REGISTRY)
            raise EventError(
                "invalid_value", f"Invalid value: '{kind[:100]}'. Supported values are: {supported}.", "type"
            )
    except EventError as exc:
        exc.event_id = event_id  # an unknown or untyped event is still answered with its id
        raise
    return event
