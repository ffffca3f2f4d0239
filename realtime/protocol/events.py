"""Server events as the client sees them: their envelope (``server_event``, ``error_event``), the shapes of
items, content parts and responses (GA names), and the renaming for beta clients (``to_beta``)."""

from __future__ import annotations

from typing import Any

from pipelines.ids import new_id
from realtime.protocol.client_items import ClientItem

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


SERVER_ERROR_CODES = frozenset(
    {"response_timeout"}
)  # a failed response's codes that are the server's, not the client's


def response_error(error_code: str | None) -> dict[str, Any]:
    """The ``type`` and ``code`` of a failed response's error: the client's to fix (``error_code``: a conversation
    too long for the context with truncation disabled), or the server's (None)."""
    if error_code in SERVER_ERROR_CODES:
        return {"type": "server_error", "code": error_code}
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
