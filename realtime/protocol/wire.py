"""The primitives of reading a client's JSON: one error type with the ``param`` it names, typed reads of fields,
base64 audio. Every parser of the protocol (events, items, the session's fields) is built on these."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any


class EventError(Exception):
    """A client event that cannot be carried out; becomes an ``error`` event."""

    def __init__(
        self, code: str, message: str, param: str | None = None, error_type: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.error_type = error_type
        self.event_id: str | None = None  # the client event's id, when parsing got that far


def loads(text: str | bytes) -> Any:
    """``json.loads`` for untrusted text: bad JSON and nesting too deep to parse are both ``invalid_json``."""
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventError("invalid_json", f"The event is not valid JSON: {exc}") from None
    except RecursionError:
        raise EventError("invalid_json", "The event is not valid JSON: it is nested too deeply.") from None


def require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], param: str | None = None) -> Any:
    param = param or key
    if key not in obj or obj[key] is None:
        raise EventError("missing_required_parameter", f"Missing required parameter: '{param}'.", param)
    return check_type(obj[key], kind, param)


def optional(
    obj: dict[str, Any], key: str, kind: type | tuple[type, ...], param: str | None = None, default: Any = None
) -> Any:
    if key not in obj or obj[key] is None:
        return default
    return check_type(obj[key], kind, param or key)


def check_type(value: Any, kind: type | tuple[type, ...], param: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = False if isinstance(value, bool) and bool not in kinds else isinstance(value, kinds)
    if not ok:
        names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise EventError(
            "invalid_type",
            f"Invalid type for '{param}': expected {names}, got {_TYPE_NAMES.get(type(value), type(value).__name__)}.",
            param,
        )
    return value


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    dict: "an object",
    list: "an array",
    type(None): "null",
}


def decode_audio(value: Any, param: str = "audio", max_bytes: int | None = None) -> bytes:
    check_type(value, str, param)
    if max_bytes is not None and len(value) > max_bytes * 4 // 3 + 4:
        raise EventError(
            "audio_too_large", f"'{param}' is larger than the limit of {max_bytes} bytes per event.", param
        )
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise EventError("invalid_base64", f"Invalid '{param}': expected base64-encoded audio bytes.", param) from None


def encode_audio(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
