"""The wire format of the OpenAI Realtime API: parsing client events, shaping server events.

This is the one module that knows field names and the GA/beta differences.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from pipelines.ids import new_id

CLIENT_EVENT_TYPES = (
    "session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "conversation.item.create",
    "conversation.item.retrieve",
    "conversation.item.truncate",
    "conversation.item.delete",
    "response.create",
    "response.cancel",
    "output_audio_buffer.clear",
    "transcription_session.update",
)

# GA name -> beta name, for clients that connect with "OpenAI-Beta: realtime=v1".
BETA_EVENT_NAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}
# Beta clients get no separate "done" for items: "created" carries them.
BETA_DROPPED_EVENTS = {"conversation.item.done"}
BETA_CONTENT_TYPES = {"output_audio": "audio", "output_text": "text"}
GA_CONTENT_TYPES = {"audio": "output_audio", "text": "output_text"}


class EventError(Exception):
    """A client event that cannot be carried out; becomes an ``error`` event."""

    def __init__(self, code: str, message: str, param: str | None = None, error_type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.error_type = error_type
        self.event_id: str | None = None  # the client event's id, when parsing got that far


def error_event(code: str, message: str, param: str | None = None, event_id: str | None = None,
                error_type: str = "invalid_request_error") -> dict[str, Any]:
    return server_event("error", error={"type": error_type, "code": code, "message": message,
                                         "param": param, "event_id": event_id})


def server_event(event_type: str, **fields: Any) -> dict[str, Any]:
    return {"type": event_type, "event_id": new_id("event"), **fields}


def to_beta(event: dict[str, Any]) -> dict[str, Any] | None:
    """Renames a GA event for a beta client, or returns None when beta has no such event."""
    if event["type"] in BETA_DROPPED_EVENTS:
        return None
    event = dict(event, type=BETA_EVENT_NAMES.get(event["type"], event["type"]))
    for key in ("item", "part"):
        if key in event and isinstance(event[key], dict):
            event[key] = _beta_content(event[key])
    if "response" in event and isinstance(event["response"], dict):
        response = dict(event["response"])
        response["output"] = [_beta_content(item) for item in response.get("output", [])]
        if "output_modalities" in response:
            response["modalities"] = response.pop("output_modalities")
        event["response"] = response
    return event


def _beta_content(obj: dict[str, Any]) -> dict[str, Any]:
    obj = dict(obj)
    if obj.get("type") in BETA_CONTENT_TYPES:
        obj["type"] = BETA_CONTENT_TYPES[obj["type"]]
    if "content" in obj:
        obj["content"] = [_beta_content(part) for part in obj["content"]]
    return obj


# --- parsing ---------------------------------------------------------------


def parse(text: str | bytes | None) -> dict[str, Any]:
    """Parses one client frame into an event dict with a known ``type``."""
    if text is None:
        raise EventError("invalid_json", "Binary frames are not supported; send JSON text events.")
    try:
        event = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventError("invalid_json", f"The event is not valid JSON: {exc}") from None
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
        if kind not in CLIENT_EVENT_TYPES:
            supported = ", ".join(f"'{t}'" for t in CLIENT_EVENT_TYPES)
            raise EventError("invalid_value", f"Invalid value: '{kind[:100]}'. Supported values are: {supported}.", "type")
    except EventError as exc:
        exc.event_id = event_id  # an unknown or untyped event is still answered with its id
        raise
    return event


def require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], param: str | None = None) -> Any:
    param = param or key
    if key not in obj or obj[key] is None:
        raise EventError("missing_required_parameter", f"Missing required parameter: '{param}'.", param)
    return check_type(obj[key], kind, param)


def optional(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], param: str | None = None, default: Any = None) -> Any:
    if key not in obj or obj[key] is None:
        return default
    return check_type(obj[key], kind, param or key)


def check_type(value: Any, kind: type | tuple[type, ...], param: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds)
    if not ok:
        names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise EventError("invalid_type", f"Invalid type for '{param}': expected {names}, got {_TYPE_NAMES.get(type(value), type(value).__name__)}.", param)
    return value


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", dict: "an object",
               list: "an array", type(None): "null"}


def decode_audio(value: Any, param: str = "audio", max_bytes: int | None = None) -> bytes:
    check_type(value, str, param)
    if max_bytes is not None and len(value) > max_bytes * 4 // 3 + 4:
        raise EventError("audio_too_large", f"'{param}' is larger than the limit of {max_bytes} bytes per event.", param)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise EventError("invalid_base64", f"Invalid '{param}': expected base64-encoded audio bytes.", param) from None


def encode_audio(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
