"""The wire format of the OpenAI Realtime API: parsing client events, shaping server events.

This is the one module that knows field names and the GA/beta differences.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
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
# Beta clients get no separate "done" for items ("created" carries them), and beta has no idle timeout
# event (the committed item and the response that follow it say what happened).
BETA_DROPPED_EVENTS = {"conversation.item.done", "input_audio_buffer.timeout_triggered"}
BETA_CONTENT_TYPES = {"output_audio": "audio", "output_text": "text"}
GA_CONTENT_TYPES = {"audio": "output_audio", "text": "output_text"}


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


def error_event(
    code: str,
    message: str,
    param: str | None = None,
    event_id: str | None = None,
    error_type: str = "invalid_request_error",
) -> dict[str, Any]:
    return server_event(
        "error", error={"type": error_type, "code": code, "message": message, "param": param, "event_id": event_id}
    )


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


@dataclass(frozen=True)
class ContentPart:
    """One part of a client message: text, or audio to transcribe."""

    type: str
    text: str | None = None
    audio: bytes | None = None


@dataclass(frozen=True)
class ClientItem:
    """A conversation item sent by the client, validated."""

    id: str | None
    type: str  # message | function_call | function_call_output
    role: str = "user"
    content: tuple[ContentPart, ...] = ()
    call_id: str | None = None
    output: str | None = None  # function_call_output: the result
    name: str | None = None  # function_call: the function called
    arguments: str | None = None  # function_call: its arguments, JSON text
    approval_request_id: str | None = None  # mcp_approval_response: the request it answers
    approve: bool | None = None  # mcp_approval_response: whether the call may run
    reason: str | None = None  # mcp_approval_response: why (optional)

    @property
    def text(self) -> str:
        return " ".join(part.text for part in self.content if part.text)

    @property
    def audio(self) -> bytes | None:
        return next((part.audio for part in self.content if part.audio is not None), None)


@dataclass(frozen=True)
class ItemReference:
    """``{"type": "item_reference", "id": ...}`` in a response's ``input``."""

    id: str


@dataclass(frozen=True)
class ClientEvent:
    """A parsed client event: ``type``, the client's ``event_id``, and the fields of that type, typed."""

    type: str
    event_id: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None


def parse_event(text: str | bytes | None, max_audio_bytes: int) -> ClientEvent:
    """Parses and validates one client frame; raises :class:`EventError` (with the client's ``event_id``)."""
    raw = parse(text)
    event_id = raw.get("event_id")
    try:
        return ClientEvent(raw["type"], event_id, _FIELDS[raw["type"]](raw, max_audio_bytes))
    except EventError as exc:
        exc.event_id = event_id
        raise


def _audio_append(e: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    return {"audio": decode_audio(require(e, "audio", str), "audio", max_bytes)}


def _item_create(e: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    previous = optional(e, "previous_item_id", str)
    return {"item": parse_item(require(e, "item", dict), "item", max_bytes), "previous_item_id": previous}


def _item_id(e: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    return {"item_id": require(e, "item_id", str)}


def _item_truncate(e: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    return {
        "item_id": require(e, "item_id", str),
        "content_index": require(e, "content_index", int),
        "audio_end_ms": require(e, "audio_end_ms", int),
    }


def _response_create(e: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    params = optional(e, "response", dict, default={})
    if "input" in params and params["input"] is not None:
        params = dict(params, input=parse_input(params["input"], "response.input", max_bytes))
    return {"response": params}


def _response_cancel(e: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    return {"response_id": optional(e, "response_id", str)}


def _session_update(e: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    return {"session": require(e, "session", dict)}


def _nothing(e: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    return {}


_FIELDS = {
    "session.update": _session_update,
    "transcription_session.update": _session_update,
    "input_audio_buffer.append": _audio_append,
    "input_audio_buffer.commit": _nothing,
    "input_audio_buffer.clear": _nothing,
    "conversation.item.create": _item_create,
    "conversation.item.retrieve": _item_id,
    "conversation.item.delete": _item_id,
    "conversation.item.truncate": _item_truncate,
    "response.create": _response_create,
    "response.cancel": _response_cancel,
    "output_audio_buffer.clear": _nothing,
}


def parse_item(item: dict[str, Any], param: str, max_audio_bytes: int) -> ClientItem:
    item_id = optional(item, "id", str, f"{param}.id")
    kind = optional(item, "type", str, f"{param}.type", "message")
    if kind == "function_call_output":
        return ClientItem(
            item_id,
            kind,
            call_id=require(item, "call_id", str, f"{param}.call_id"),
            output=require(item, "output", str, f"{param}.output"),
        )
    if kind == "function_call":
        return ClientItem(
            item_id,
            kind,
            call_id=optional(item, "call_id", str, f"{param}.call_id") or new_id("call"),
            name=require(item, "name", str, f"{param}.name"),
            arguments=require(item, "arguments", str, f"{param}.arguments"),
        )
    if kind == "mcp_approval_response":
        return ClientItem(
            item_id,
            kind,
            approval_request_id=require(item, "approval_request_id", str, f"{param}.approval_request_id"),
            approve=require(item, "approve", bool, f"{param}.approve"),
            reason=optional(item, "reason", str, f"{param}.reason"),
        )
    if kind != "message":
        raise EventError(
            "invalid_value",
            f"Invalid value for '{param}.type': '{kind}'. Supported: 'message', "
            "'function_call', 'function_call_output', 'mcp_approval_response'.",
            f"{param}.type",
        )
    role = require(item, "role", str, f"{param}.role")
    if role not in ("user", "assistant", "system"):
        raise EventError(
            "invalid_value",
            f"Invalid value for '{param}.role': expected 'user', 'assistant' or 'system'.",
            f"{param}.role",
        )
    parts: list[ContentPart] = []
    allowed = CONTENT_TYPES[role]
    for index, part in enumerate(require(item, "content", list, f"{param}.content")):
        where = f"{param}.content[{index}]"
        check_type(part, dict, where)
        ptype = require(part, "type", str, f"{where}.type")
        if ptype not in allowed:
            supported = " and ".join(f"'{t}'" for t in allowed if t != "text")
            raise EventError(
                "invalid_value",
                f"Invalid value: '{ptype[:100]}'. Supported values for a {role} message's content are: {supported}.",
                f"{where}.type",
            )
        if ptype == "input_image":
            raise EventError(
                "invalid_value",
                "Invalid value: 'input_image'. This server's models read text and hear audio; they cannot see images.",
                f"{where}.type",
            )
        if ptype == "input_audio":
            if any(p.audio is not None for p in parts):
                raise EventError("invalid_value", "Only one input_audio part per item is supported.", where)
            data = decode_audio(require(part, "audio", str, f"{where}.audio"), f"{where}.audio", max_audio_bytes)
            parts.append(ContentPart("input_audio", audio=data))
        else:
            text = require(part, "text", str, f"{where}.text")
            parts.append(ContentPart("output_text" if role == "assistant" else ptype, text=text))
    return ClientItem(item_id, "message", role, tuple(parts))


# The content a client may give a message, by role (the SDK's item types). An assistant's "text" is the
# beta's name for output_text; a user's "text" is refused, as the API does.
CONTENT_TYPES = {
    "user": ("input_text", "input_audio", "input_image"),
    "system": ("input_text",),
    "assistant": ("output_text", "text"),
}


MAX_PROMPT_VARIABLES = 64


def parse_prompt(value: Any, param: str) -> dict[str, Any]:
    """A stored prompt reference as the SDK types it (``ResponsePrompt``): ``id``, optional ``version`` and
    ``variables``, text only here (images and files: no model here reads them)."""
    check_type(value, dict, param)
    for key in value:
        if key not in ("id", "version", "variables"):
            raise EventError("unknown_parameter", f"Unknown parameter: '{param}.{key}'.", f"{param}.{key}")
    ref: dict[str, Any] = {"id": require(value, "id", str, f"{param}.id")}
    if value.get("version") is not None:
        ref["version"] = check_type(value["version"], str, f"{param}.version")
    variables = optional(value, "variables", dict, f"{param}.variables")
    if variables is not None:
        if len(variables) > MAX_PROMPT_VARIABLES:
            raise EventError(
                "object_above_max_properties",
                f"Invalid '{param}.variables': at most {MAX_PROMPT_VARIABLES} variables.",
                f"{param}.variables",
            )
        ref["variables"] = {
            name: _prompt_variable(entry, f"{param}.variables.{name}") for name, entry in variables.items()
        }
    return ref


def _prompt_variable(value: Any, param: str) -> str | dict[str, str]:
    check_type(value, (str, dict), param)
    if isinstance(value, str):
        return value
    kind = require(value, "type", str, f"{param}.type")
    if kind in ("input_image", "input_file"):
        raise EventError(
            "invalid_value",
            f"Invalid '{param}': this server's models read text only; an {kind} variable cannot be used.",
            f"{param}.type",
        )
    if kind != "input_text":
        raise EventError(
            "invalid_value",
            f"Invalid value for '{param}.type': '{kind[:100]}'. Supported: 'input_text'.",
            f"{param}.type",
        )
    for key in value:
        if key not in ("type", "text"):
            raise EventError("unknown_parameter", f"Unknown parameter: '{param}.{key}'.", f"{param}.{key}")
    return {"type": "input_text", "text": require(value, "text", str, f"{param}.text")}


def parse_input(value: Any, param: str, max_audio_bytes: int) -> tuple[ClientItem | ItemReference, ...]:
    """A response's ``input``: items given inline, or references to items of the conversation."""
    check_type(value, list, param)
    out: list[ClientItem | ItemReference] = []
    for index, entry in enumerate(value):
        where = f"{param}[{index}]"
        check_type(entry, dict, where)
        if entry.get("type") == "item_reference":
            out.append(ItemReference(require(entry, "id", str, f"{where}.id")))
        else:
            out.append(parse_item(entry, where, max_audio_bytes))
    return tuple(out)


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
        if kind not in CLIENT_EVENT_TYPES:
            supported = ", ".join(f"'{t}'" for t in CLIENT_EVENT_TYPES)
            raise EventError(
                "invalid_value", f"Invalid value: '{kind[:100]}'. Supported values are: {supported}.", "type"
            )
    except EventError as exc:
        exc.event_id = event_id  # an unknown or untyped event is still answered with its id
        raise
    return event


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
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds)
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


# --- server shapes ---------------------------------------------------------------
# Items and responses as the client sees them (``realtime.item``, ``realtime.response``), GA names.


def stored_item(item: ClientItem, item_id: str) -> dict[str, Any]:
    """The conversation's copy of a client item, as ``conversation.item.retrieve`` returns it."""
    if item.type == "function_call_output":
        return {
            "id": item_id,
            "object": "realtime.item",
            "type": item.type,
            "status": "completed",
            "call_id": item.call_id,
            "output": item.output,
        }
    if item.type == "function_call":
        return function_call_item(item_id, item.call_id or "", item.name or "", item.arguments or "", "completed")
    if item.type == "mcp_approval_response":
        return {
            "id": item_id,
            "type": item.type,
            "approval_request_id": item.approval_request_id,
            "approve": item.approve,
            "reason": item.reason,
        }
    parts = [
        {"type": "input_audio", "transcript": None}
        if part.audio is not None
        else {"type": part.type, "text": part.text}
        for part in item.content
    ]
    return message_item(item_id, item.role, "completed", parts)


def message_item(item_id: str, role: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "status": status,
        "role": role,
        "content": content,
    }


def user_audio_item(item_id: str, transcript: str | None) -> dict[str, Any]:
    """A user message of committed input audio (``transcript`` None: not transcribed yet)."""
    return message_item(item_id, "user", "completed", [{"type": "input_audio", "transcript": transcript}])


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str = "", status: str = "in_progress"
) -> dict[str, Any]:
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def mcp_call_item(
    item_id: str, server_label: str, name: str, arguments: str, approval_request_id: str | None = None
) -> dict[str, Any]:
    """An ``mcp_call`` item, before it has run (``output`` and ``error`` come when it has)."""
    return {
        "id": item_id,
        "type": "mcp_call",
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
        "approval_request_id": approval_request_id,
        "output": None,
        "error": None,
    }


def mcp_approval_request_item(item_id: str, server_label: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "mcp_approval_request",
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
    }


def content_part(modalities: tuple[str, ...], text: str) -> dict[str, Any]:
    """An assistant message's one part: the transcript of its audio, or its text."""
    if "audio" in modalities:
        return {"type": "output_audio", "transcript": text}
    return {"type": "output_text", "text": text}


def event_part(part: dict[str, Any]) -> dict[str, Any]:
    """A content part as ``response.content_part.added``/``done`` carry it: type ``text`` or ``audio``.

    Items say ``output_text``/``output_audio``; the content-part events use the short names (the SDK's ``Part``),
    the same ones beta items have.
    """
    return {**part, "type": BETA_CONTENT_TYPES.get(part["type"], part["type"])}


def response_error(error_code: str | None) -> dict[str, Any]:
    """The ``type`` and ``code`` of a failed response's error: the client's to fix (``error_code``: a conversation
    too long for the context with truncation disabled), or the server's (None)."""
    if error_code is not None:
        return {"type": "invalid_request_error", "code": error_code}
    return {"type": "server_error", "code": "response_failed"}


def status_details(status: str, reason: str | None, error_code: str | None) -> dict[str, Any] | None:
    """A response's ``status_details``: why it is not (or not yet) ``completed``."""
    match status:
        case "cancelled" | "incomplete":
            return {"type": status, "reason": reason}
        case "failed":
            return {"type": "failed", "error": {**response_error(error_code), "message": reason}}
        case _:
            return None


def usage(input_tokens: int, output_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """A response's token counts (every token is text: the pipeline reads transcripts, not audio)."""
    return {
        "total_tokens": input_tokens + output_tokens,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "input_token_details": {"text_tokens": input_tokens, "audio_tokens": 0, "cached_tokens": cached_tokens},
        "output_token_details": {"text_tokens": output_tokens, "audio_tokens": 0},
    }


def logprobs(words: tuple[tuple[str, float], ...]) -> list[dict[str, Any]]:
    """A transcript's ``logprobs``: one entry per word (see the STT backend)."""
    return [{"token": word, "logprob": logprob, "bytes": list(word.encode("utf-8"))} for word, logprob in words]
