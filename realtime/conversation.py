"""Conversation and response state of one Realtime session, as the client sees it.

The consumer hands client requests and pipeline output here; this module keeps
the items and responses and says which server events to send and which
messages to pass to the pipeline. It knows nothing of sockets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines import audio, messages as m
from pipelines.ids import new_id
from realtime.events import EventError, check_type, decode_audio, encode_audio, optional, require, server_event
from realtime.session import SessionConfig, parse_ga_format, parse_max_tokens, parse_modalities

Event = dict[str, Any]


@dataclass
class ResponseState:
    id: str
    out_of_band: bool
    metadata: Any = None
    conversation_id: str | None = None
    modalities: tuple[str, ...] = ("audio",)
    output_format: str = audio.PCM
    voice: str = "alloy"
    item_id: str = ""
    status: str = "in_progress"
    reason: str | None = None
    text: str = ""
    audio_bytes: int = 0
    # (sentence, audio ms at which it starts) for truncation to what was heard
    spoken: list[tuple[str, int]] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)
    first_audio_at: float | None = None

    @property
    def audio_ms(self) -> int:
        return audio.duration_ms(self.audio_bytes, self.output_format)


@dataclass
class Port:
    """What the conversation may do to the pipeline: submit messages and cancel responses."""

    generation: int
    submit: Callable[[m.Downstream], None]
    cancel: Callable[[str], None]


class Conversation:
    def __init__(self, session: SessionConfig, port: Port, max_audio_bytes: int) -> None:
        self.session = session
        self.port = port
        self.max_audio_bytes = max_audio_bytes
        self.id = new_id("conv")
        self.items: dict[str, Event] = {}
        self.responses: dict[str, ResponseState] = {}
        self.pending: dict[str, ResponseState] = {}  # asked for, not yet started
        self.active: ResponseState | None = None
        self.finished: list[ResponseState] = []
        self.turns = 0
        self.errors = 0
        self.audio_in_bytes = 0
        self._committed_ms: dict[str, int] = {}  # audio length of committed turns awaiting their transcript
        # turn_detection.idle_timeout_ms: when (time.monotonic) to prompt a silent user, if nothing happens first
        self.idle_due: float | None = None

    # --- client requests ----------------------------------------------------

    def append_audio(self, event: Event) -> list[Event]:
        data = decode_audio(require(event, "audio", str), "audio", self.max_audio_bytes)
        self.audio_in_bytes += len(data)
        self.port.submit(m.AudioIn(generation=self.port.generation, data=data, audio_format=self.session.input_format))
        return []

    def commit_audio(self, event: Event) -> list[Event]:
        self.idle_due = None
        self.port.submit(m.CommitAudio(generation=self.port.generation, item_id=new_id("item")))
        return []

    def clear_audio(self, event: Event) -> list[Event]:
        self.port.submit(m.ClearAudio(generation=self.port.generation))
        return []

    def create_item(self, event: Event) -> list[Event]:
        self.idle_due = None
        item = require(event, "item", dict)
        previous = optional(event, "previous_item_id", str)
        if previous not in (None, "root") and previous not in self.items:
            raise EventError("item_not_found", f"Item with id '{previous}' not found.", "previous_item_id")
        stored, history, audio_data = self._parse_item(item)
        self._store(stored, previous)
        if history is not None:
            self.port.submit(m.AddItem(generation=self.port.generation, item=history,
                                       previous_item_id=None if previous in (None, "root") else previous))
        if audio_data is not None:
            self.port.submit(m.AudioItem(generation=self.port.generation, item_id=stored["id"], data=audio_data,
                                         audio_format=self.session.input_format))
        return self._item_added(stored, previous)

    def retrieve_item(self, event: Event) -> list[Event]:
        item = self._item(require(event, "item_id", str))
        return [server_event("conversation.item.retrieved", item=item)]

    def delete_item(self, event: Event) -> list[Event]:
        item_id = require(event, "item_id", str)
        self._item(item_id)
        del self.items[item_id]
        self.port.submit(m.DeleteItem(generation=self.port.generation, item_id=item_id))
        return [server_event("conversation.item.deleted", item_id=item_id)]

    def truncate_item(self, event: Event) -> list[Event]:
        item_id = require(event, "item_id", str)
        content_index = require(event, "content_index", int)
        audio_end_ms = require(event, "audio_end_ms", int)
        item = self._item(item_id)
        response = next((r for r in self.finished + list(self.responses.values()) if r.item_id == item_id), None)
        if item.get("role") != "assistant" or response is None or "audio" not in response.modalities:
            raise EventError("invalid_value", "Only assistant messages with audio can be truncated.", "item_id")
        if content_index != 0:
            raise EventError("invalid_value", "Invalid 'content_index': the item has one content part (0).", "content_index")
        if audio_end_ms < 0 or audio_end_ms > response.audio_ms:
            raise EventError("invalid_value", f"Audio content of {response.audio_ms}ms is shorter than {audio_end_ms}ms.", "audio_end_ms")
        heard = heard_text(response, audio_end_ms)
        for part in item.get("content", []):
            if part.get("type") == "output_audio":
                part["transcript"] = heard
        self.port.submit(m.TruncateItem(generation=self.port.generation, item_id=item_id, text=heard))
        return [server_event("conversation.item.truncated", item_id=item_id, content_index=0, audio_end_ms=audio_end_ms)]

    def create_response(self, event: Event) -> list[Event]:
        params = optional(event, "response", dict, default={})
        out_of_band = optional(params, "conversation", str, "response.conversation", "auto") == "none"
        if self.active is not None or (self.pending and not out_of_band):
            raise EventError("conversation_already_has_active_response",
                             "Conversation already has an active response in progress. Wait until it is done, or cancel it.")
        settings = self.session.settings()
        modalities = tuple(settings.output_modalities)
        if params.get("output_modalities") is not None:
            modalities = tuple(parse_modalities(params["output_modalities"], "response.output_modalities"))
        elif params.get("modalities") is not None:
            modalities = tuple(parse_modalities(params["modalities"], "response.modalities", allow_both=True))
        max_tokens = settings.max_output_tokens
        for key in ("max_output_tokens", "max_response_output_tokens"):
            if params.get(key) is not None:
                value = parse_max_tokens(params[key], f"response.{key}")
                max_tokens = None if value == "inf" else int(value)
        audio_out = optional(optional(params, "audio", dict, default={}), "output", dict, "response.audio.output", {})
        voice = settings.voice
        if "voice" in audio_out or "voice" in params:
            voice = self.session.parse_voice(audio_out.get("voice", params.get("voice")), "response.audio.output.voice")
        output_format = settings.output_format
        if "format" in audio_out:
            output_format = parse_ga_format(audio_out["format"], "response.audio.output.format")
        extra_input = tuple(self._response_input(params.get("input"))) if "input" in params else ()
        temperature = optional(params, "temperature", (int, float), "response.temperature", settings.temperature)
        req = m.ResponseRequest(
            generation=self.port.generation, response_id=new_id("resp"),
            instructions=optional(params, "instructions", str, "response.instructions", settings.instructions),
            output_modalities=modalities, max_output_tokens=max_tokens, voice=voice, output_format=output_format,
            temperature=float(temperature), out_of_band=out_of_band, extra_input=extra_input,
        )
        self.pending[req.response_id] = ResponseState(req.response_id, out_of_band, metadata=params.get("metadata"))
        self.port.submit(req)
        return []

    def cancel_response(self, event: Event) -> list[Event]:
        wanted = optional(event, "response_id", str)
        target = self.active
        if wanted is not None:
            target = self.responses.get(wanted)
            if target is None and wanted in self.pending:
                target = self.pending[wanted]
        if target is None or target.status != "in_progress":
            raise EventError("response_cancel_not_active", "Cancellation failed: no active response found.", "response_id")
        self._cancel(target, "client_cancelled")
        return []

    # --- pipeline output ----------------------------------------------------

    def on_output(self, msg: m.Outbound) -> list[Event]:
        handler = getattr(self, "_on_" + type(msg).__name__, None)
        return handler(msg) if handler else []

    def _on_SpeechStarted(self, msg: m.SpeechStarted) -> list[Event]:
        self.idle_due = None
        td = self.session.turn_detection or {}
        if self.active is not None and self.active.status == "in_progress" and td.get("interrupt_response", True):
            self._cancel(self.active, "turn_detected")
        return [server_event("input_audio_buffer.speech_started", audio_start_ms=msg.audio_start_ms, item_id=msg.item_id)]

    def _on_SpeechStopped(self, msg: m.SpeechStopped) -> list[Event]:
        return [server_event("input_audio_buffer.speech_stopped", audio_end_ms=msg.audio_end_ms, item_id=msg.item_id)]

    def _on_AudioCommitted(self, msg: m.AudioCommitted) -> list[Event]:
        self._committed_ms[msg.item_id] = msg.duration_ms
        previous = self._last_item_id()
        item = {"id": msg.item_id, "object": "realtime.item", "type": "message", "status": "completed", "role": "user",
                "content": [{"type": "input_audio", "transcript": None}]}
        self._store(item, previous)
        return [server_event("input_audio_buffer.committed", previous_item_id=previous, item_id=msg.item_id),
                *self._item_added(item, previous)]

    def _on_AudioCleared(self, msg: m.AudioCleared) -> list[Event]:
        return [server_event("input_audio_buffer.cleared")]

    def _on_TranscriptDelta(self, msg: m.TranscriptDelta) -> list[Event]:
        if self.session.transcription is None:
            return []
        return [server_event("conversation.item.input_audio_transcription.delta", item_id=msg.item_id,
                             content_index=0, delta=msg.delta)]

    def _on_TranscriptCompleted(self, msg: m.TranscriptCompleted) -> list[Event]:
        self.turns += 1
        seconds = self._committed_ms.pop(msg.item_id, 0) / 1000
        item = self.items.get(msg.item_id)
        if item is not None:
            for part in item["content"]:
                if part.get("type") == "input_audio":
                    part["transcript"] = msg.transcript
        if self.session.transcription is None:
            return []
        return [server_event("conversation.item.input_audio_transcription.completed", item_id=msg.item_id,
                             content_index=0, transcript=msg.transcript,
                             usage={"type": "duration", "seconds": seconds})]

    def _on_TranscriptFailed(self, msg: m.TranscriptFailed) -> list[Event]:
        self.errors += 1
        return [server_event("conversation.item.input_audio_transcription.failed", item_id=msg.item_id, content_index=0,
                             error={"type": "transcription_error", "code": "transcription_failed", "message": msg.message, "param": None})]

    def _on_ResponseStarted(self, msg: m.ResponseStarted) -> list[Event]:
        state = self.pending.pop(msg.response_id, None) or ResponseState(msg.response_id, msg.out_of_band)
        state.item_id, state.modalities = msg.item_id, msg.output_modalities
        state.output_format, state.voice = msg.output_format, msg.voice
        state.conversation_id = None if msg.out_of_band else self.id
        self.responses[msg.response_id] = state
        if self.active is None:
            self.active = state
        self.idle_due = None
        item = self._assistant_item(state, "in_progress")
        events = [server_event("response.created", response=self._response_obj(state, []))]
        if not state.out_of_band:
            previous = self._last_item_id()
            self._store(item, previous)
            events += [server_event("conversation.item.added", previous_item_id=previous, item=item)]
        events += [
            server_event("response.output_item.added", response_id=state.id, output_index=0, item=item),
            server_event("response.content_part.added", response_id=state.id, item_id=state.item_id, output_index=0,
                         content_index=0, part=self._part(state, done=False)),
        ]
        return events

    def _on_TextDelta(self, msg: m.TextDelta) -> list[Event]:
        state = self.responses.get(msg.response_id)
        if state is None or state.status != "in_progress":
            return []
        state.text += msg.delta
        return [server_event("response.output_text.delta", response_id=state.id, item_id=state.item_id,
                             output_index=0, content_index=0, delta=msg.delta)]

    def _on_AudioOut(self, msg: m.AudioOut) -> list[Event]:
        state = self.responses.get(msg.response_id)
        if state is None or state.status != "in_progress":
            return []  # cancelled: nothing more reaches the client
        if state.first_audio_at is None:
            state.first_audio_at = time.monotonic()
        events = [server_event("response.output_audio.delta", response_id=state.id, item_id=state.item_id,
                               output_index=0, content_index=0, delta=encode_audio(msg.data))]
        if msg.transcript:
            delta = (" " if state.text else "") + msg.transcript
            state.spoken.append((msg.transcript, state.audio_ms))
            state.text += delta
            events.append(server_event("response.output_audio_transcript.delta", response_id=state.id,
                                       item_id=state.item_id, output_index=0, content_index=0, delta=delta))
        state.audio_bytes += len(msg.data)
        return events

    def _on_ResponseFinished(self, msg: m.ResponseFinished) -> list[Event]:
        state = self.responses.pop(msg.response_id, None)
        if state is None:
            return []
        if state.status == "in_progress":
            state.status, state.reason = msg.status, msg.reason
        if self.active is state:
            self.active = None
        self.finished.append(state)
        del self.finished[:-20]
        item_status = "completed" if state.status == "completed" else "incomplete"
        item = self._assistant_item(state, item_status)
        if not state.out_of_band and state.item_id in self.items:
            self.items[state.item_id] = item
        part = self._part(state, done=True)
        ids = {"response_id": state.id, "item_id": state.item_id, "output_index": 0, "content_index": 0}
        events: list[Event] = []
        if state.status == "failed":
            self.errors += 1
            events.append(server_event("error", error={"type": "server_error", "code": "response_failed",
                                                        "message": f"The response failed: {state.reason}", "param": None, "event_id": None}))
        if "audio" in state.modalities:
            events += [server_event("response.output_audio.done", **ids),
                       server_event("response.output_audio_transcript.done", **ids, transcript=state.text)]
        else:
            events.append(server_event("response.output_text.done", **ids, text=state.text))
        events += [
            server_event("response.content_part.done", **ids, part=part),
            server_event("response.output_item.done", response_id=state.id, output_index=0, item=item),
        ]
        if not state.out_of_band:
            events.append(server_event("conversation.item.done", previous_item_id=self._previous_of(state.item_id), item=item))
        usage = {"total_tokens": msg.input_tokens + msg.output_tokens, "input_tokens": msg.input_tokens,
                 "output_tokens": msg.output_tokens,
                 "input_token_details": {"text_tokens": msg.input_tokens, "audio_tokens": 0, "cached_tokens": 0},
                 "output_token_details": {"text_tokens": msg.output_tokens, "audio_tokens": 0}}
        events.append(server_event("response.done", response=self._response_obj(state, [item], usage)))
        self._arm_idle_timeout(state)
        return events

    def _arm_idle_timeout(self, state: ResponseState) -> None:
        """Counts ``idle_timeout_ms`` from when the response's audio has finished playing."""
        td = self.session.turn_detection or {}
        timeout_ms = td.get("idle_timeout_ms") if td.get("type") == "server_vad" else None
        if not timeout_ms or state.out_of_band or state.status != "completed":
            return
        self.idle_due = time.monotonic() + (state.audio_ms + timeout_ms) / 1000

    def idle_timeout(self) -> list[Event]:
        """The user stayed silent past ``idle_timeout_ms``: say so and prompt them with a response."""
        self.idle_due = None
        heard_ms = audio.duration_ms(self.audio_in_bytes, self.session.input_format)
        timeout_ms = (self.session.turn_detection or {}).get("idle_timeout_ms") or 0
        settings = self.session.settings()
        prompt = ("The user has been silent for a while. In one short sentence, "
                  "check whether they are still there or continue the conversation.")
        req = m.ResponseRequest(
            generation=self.port.generation, response_id=new_id("resp"),
            instructions=f"{settings.instructions}\n{prompt}".strip(), output_modalities=settings.output_modalities,
            max_output_tokens=settings.max_output_tokens, voice=settings.voice, output_format=settings.output_format,
            temperature=settings.temperature,
        )
        self.pending[req.response_id] = ResponseState(req.response_id, out_of_band=False)
        self.port.submit(req)
        return [server_event("input_audio_buffer.timeout_triggered", audio_start_ms=max(0, heard_ms - timeout_ms),
                             audio_end_ms=heard_ms, item_id=new_id("item"))]

    def _on_PipelineError(self, msg: m.PipelineError) -> list[Event]:
        self.errors += 1
        error_type = "invalid_request_error" if msg.code.startswith("input_audio_buffer") else "server_error"
        return [server_event("error", error={"type": error_type, "code": msg.code, "message": msg.message,
                                              "param": None, "event_id": None})]

    # --- helpers --------------------------------------------------------------

    def _cancel(self, state: ResponseState, reason: str) -> None:
        state.status, state.reason = "cancelled", reason
        self.port.cancel(state.id)

    def _item(self, item_id: str) -> Event:
        if item_id not in self.items:
            raise EventError("item_not_found", f"Item with id '{item_id}' not found.", "item_id")
        return self.items[item_id]

    def _last_item_id(self) -> str | None:
        return next(reversed(self.items), None) if self.items else None

    def _previous_of(self, item_id: str) -> str | None:
        keys = list(self.items)
        at = keys.index(item_id) if item_id in keys else 0
        return keys[at - 1] if at > 0 else None

    def _store(self, item: Event, previous: str | None) -> None:
        if previous in (None, "root") or previous not in self.items:
            if previous == "root":
                self.items = {item["id"]: item, **self.items}
            else:
                self.items[item["id"]] = item
            return
        entries = list(self.items.items())
        at = [key for key, _ in entries].index(previous) + 1
        entries.insert(at, (item["id"], item))
        self.items = dict(entries)

    def _item_added(self, item: Event, previous: str | None) -> list[Event]:
        return [server_event("conversation.item.added", previous_item_id=previous, item=item),
                server_event("conversation.item.done", previous_item_id=previous, item=item)]

    def _part(self, state: ResponseState, done: bool) -> Event:
        if "audio" in state.modalities:
            return {"type": "output_audio", "transcript": state.text if done else ""}
        return {"type": "output_text", "text": state.text if done else ""}

    def _assistant_item(self, state: ResponseState, status: str) -> Event:
        content = [self._part(state, done=True)] if status != "in_progress" else []
        return {"id": state.item_id, "object": "realtime.item", "type": "message", "status": status,
                "role": "assistant", "content": content}

    def _response_obj(self, state: ResponseState, output: list[Event], usage: Event | None = None) -> Event:
        details = None
        if state.status == "cancelled":
            details = {"type": "cancelled", "reason": state.reason}
        elif state.status == "incomplete":
            details = {"type": "incomplete", "reason": state.reason}
        elif state.status == "failed":
            details = {"type": "failed", "error": {"type": "server_error", "code": "response_failed", "message": state.reason}}
        return {"object": "realtime.response", "id": state.id, "status": state.status, "status_details": details,
                "output": output, "conversation_id": state.conversation_id, "output_modalities": list(state.modalities),
                "max_output_tokens": self.session.max_output_tokens,
                "audio": {"output": {"format": {"type": state.output_format}, "voice": state.voice}},
                "usage": usage, "metadata": state.metadata}

    def _parse_item(self, item: Event) -> tuple[Event, m.HistoryItem | None, bytes | None]:
        """Validates a client item; returns (stored item, text for the LM, audio to transcribe)."""
        item_id = optional(item, "id", str, "item.id") or new_id("item")
        if item_id in self.items:
            raise EventError("invalid_value", f"Item with id '{item_id}' already exists.", "item.id")
        kind = optional(item, "type", str, "item.type", "message")
        if kind == "function_call_output":
            output = require(item, "output", str, "item.output")
            stored = {"id": item_id, "object": "realtime.item", "type": kind, "status": "completed",
                      "call_id": optional(item, "call_id", str, "item.call_id"), "output": output}
            return stored, m.HistoryItem(item_id, "user", f"Tool result: {output}"), None
        if kind != "message":
            raise EventError("invalid_value", f"Invalid value for 'item.type': '{kind}'. Supported: 'message', 'function_call_output'.", "item.type")
        role = require(item, "role", str, "item.role")
        if role not in ("user", "assistant", "system"):
            raise EventError("invalid_value", "Invalid value for 'item.role': expected 'user', 'assistant' or 'system'.", "item.role")
        content = require(item, "content", list, "item.content")
        parts, texts, audio_data = [], [], None
        for index, part in enumerate(content):
            param = f"item.content[{index}]"
            check_type(part, dict, param)
            ptype = require(part, "type", str, f"{param}.type")
            if ptype in ("input_text", "text", "output_text"):
                text = require(part, "text", str, f"{param}.text")
                texts.append(text)
                parts.append({"type": ptype if role != "assistant" else "output_text", "text": text})
            elif ptype == "input_audio" and role == "user":
                if audio_data is not None:
                    raise EventError("invalid_value", "Only one input_audio part per item is supported.", param)
                audio_data = decode_audio(require(part, "audio", str, f"{param}.audio"), f"{param}.audio", self.max_audio_bytes)
                parts.append({"type": "input_audio", "transcript": None})
            else:
                raise EventError("invalid_value", f"Invalid content type '{ptype}' for a {role} message.", f"{param}.type")
        stored = {"id": item_id, "object": "realtime.item", "type": "message", "status": "completed",
                  "role": role, "content": parts}
        history = m.HistoryItem(item_id, role, " ".join(texts)) if texts else None
        return stored, history, audio_data

    def _response_input(self, value: Any) -> list[m.HistoryItem]:
        check_type(value, list, "response.input")
        out = []
        for index, entry in enumerate(value):
            check_type(entry, dict, f"response.input[{index}]")
            if entry.get("type") == "item_reference":
                item = self._item(require(entry, "id", str, f"response.input[{index}].id"))
            else:
                item, _, _ = self._parse_item({**entry, "id": entry.get("id") or new_id("item")})
            text = " ".join(p.get("text") or p.get("transcript") or "" for p in item.get("content", []))
            out.append(m.HistoryItem(item["id"], item.get("role", "user"), text))
        return out


def heard_text(state: ResponseState, audio_end_ms: int) -> str:
    """The part of a spoken response the user heard: whole sentences, then words in proportion."""
    kept: list[str] = []
    starts = [start for _, start in state.spoken] + [state.audio_ms]
    for (sentence, start), end in zip(state.spoken, starts[1:]):
        if audio_end_ms >= end:
            kept.append(sentence)
        elif audio_end_ms > start:
            words = sentence.split()
            share = (audio_end_ms - start) / max(1, end - start)
            kept.append(" ".join(words[: int(len(words) * share)]))
            break
        else:
            break
    return " ".join(part for part in kept if part)
