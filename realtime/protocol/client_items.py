"""The items and references a client sends (in ``conversation.item.create`` and a response's ``input``), and a
stored prompt reference: parsed and validated, each error naming its ``param``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipelines.ids import new_id
from realtime.protocol.wire import EventError, check_type, decode_audio, optional, require


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
