"""Conversation and response state of one Realtime session, as the client sees it.

The consumer hands client requests and pipeline output here; this module keeps
the items and responses and says which server events to send and which
messages to pass to the pipeline. It knows nothing of sockets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pipelines import audio, messages as m
from pipelines.ids import new_id
from realtime.protocol.clips import Clips
from realtime.protocol.events import ClientItem, EventError, ItemReference, encode_audio, server_event
from realtime.protocol.mcp.config import HostedTool, McpServer
from realtime.protocol.session import ResponseOptions, SessionConfig

Event = dict[str, Any]


@dataclass
class ResponseState:
    id: str
    out_of_band: bool
    metadata: Any = None
    max_output_tokens: int | str = "inf"  # the response's own limit, as response.max_output_tokens shows it
    event_id: str | None = None  # the client's response.create, for an error about the response
    conversation_id: str | None = None
    modalities: tuple[str, ...] = ("audio",)
    output_format: str = audio.PCM
    voice: str = "alloy"
    item_id: str = ""
    status: str = "in_progress"
    reason: str | None = None
    error_code: str | None = None  # failed: the API's code (None: a server error)
    text: str = ""
    audio_bytes: int = 0
    # (sentence, audio ms at which it starts) for truncation to what was heard
    spoken: list[tuple[str, int]] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)
    first_audio_at: float | None = None
    # The output items in order (the assistant message and function calls), as response.done lists them.
    output: list[Event] = field(default_factory=list)
    message_index: int | None = None  # where the message is in ``output``, once text or audio came
    calls: dict[str, int] = field(default_factory=dict)  # call item id -> its index in ``output``
    # The MCP tools the response may call, by name (the server runs them), and the approved calls it runs first.
    mcp: dict[str, HostedTool] = field(default_factory=dict)
    approved: list[ApprovalRequest] = field(default_factory=list)

    @property
    def audio_ms(self) -> int:
        return audio.duration_ms(self.audio_bytes, self.output_format)


@dataclass(frozen=True)
class ApprovalRequest:
    """A call of an MCP tool that waits for the client's ``mcp_approval_response`` (the item's id is ``id``)."""

    id: str
    call_id: str
    tool: HostedTool
    arguments: str


@dataclass(frozen=True)
class Caps:
    """How much conversation one session may hold: items, text per item, text in all.

    Only client requests are refused when a cap is reached (with an ``error``; the
    session goes on); what the server itself adds (transcripts, answers) is counted.
    """

    max_items: int = 4096
    max_item_bytes: int = 256 * 1024
    max_total_bytes: int = 8 * 1024 * 1024
    # User audio kept for ``conversation.item.retrieve`` (16 kHz float32, 64 KB a second): past it, the
    # oldest items' audio is let go (they are retrieved with their transcript, without audio). 8 MiB is about
    # two minutes: the longest item's audio, as base64 PCM at 24 kHz, stays well within the send buffer.
    max_audio_bytes: int = 8 * 1024 * 1024


def text_bytes(text: str | None) -> int:
    return len(text.encode("utf-8", "surrogatepass")) if text else 0


@dataclass
class Port:
    """What the conversation may do to the pipeline: submit messages and cancel responses."""

    generation: int
    submit: Callable[[m.Downstream], None]
    cancel: Callable[[str, str], None]  # (response id, reason)


class Conversation:
    def __init__(self, session: SessionConfig, port: Port, caps: Caps | None = None) -> None:
        self.session = session
        self.port = port
        self.caps = caps or Caps()
        self.text_bytes = 0  # UTF-8 bytes of text in all items
        self._sizes: dict[str, int] = {}
        # user item id -> its audio: (bytes, their format; None: the pipeline's 16 kHz float32)
        self._audio: dict[str, tuple[bytes, str | None]] = {}
        self.audio_bytes = 0
        self.id = new_id("conv")
        self.items: dict[str, Event] = {}
        self.responses: dict[str, ResponseState] = {}
        self.pending: dict[str, ResponseState] = {}  # asked for, not yet started
        self.active: ResponseState | None = None
        self.finished: list[ResponseState] = []
        self.turns = 0
        self.errors = 0
        self.audio_in_seconds = 0.0
        self._committed_ms: dict[str, int] = {}  # audio length of committed turns awaiting their transcript
        self.clips = Clips()  # responses waiting for the transcripts of their inline input audio
        # turn_detection.idle_timeout_ms: when (time.monotonic) to prompt a silent user, if nothing happens first
        self.idle_due: float | None = None
        self.approval_requests: dict[str, ApprovalRequest] = {}  # asked, not yet answered
        self.approved: dict[str, ApprovalRequest] = {}  # approved, to run in the next response
        # Responses with MCP servers of their own wait for their tools: ``list_tools`` (set by the session's MCP
        # side) lists them and calls ``release_response``.
        self.held: dict[str, m.ResponseRequest] = {}
        self.list_tools: Callable[[str, tuple[McpServer, ...]], list[Event]] | None = None
        self.on_cancel: Callable[[str], None] | None = None  # a response was cancelled: stop its MCP calls

    # --- client requests ----------------------------------------------------

    def append_audio(self, data: bytes, audio_format: str | None = None) -> list[Event]:
        """Input audio in the session's input format (or ``audio_format``: a media track's, whatever the
        session says)."""
        audio_format = audio_format or self.session.input_format
        self.audio_in_seconds += len(data) // audio.BYTES_PER_SAMPLE[audio_format] / audio.RATES[audio_format]
        self.port.submit(m.AudioIn(generation=self.port.generation, data=data, audio_format=audio_format))
        return []

    def commit_audio(self, event_id: str | None = None) -> list[Event]:
        self.idle_due = None
        self.port.submit(m.CommitAudio(generation=self.port.generation, item_id=new_id("item"), event_id=event_id))
        return []

    def clear_audio(self) -> list[Event]:
        self.port.submit(m.ClearAudio(generation=self.port.generation))
        return []

    def create_item(self, item: ClientItem, previous: str | None) -> list[Event]:
        self.idle_due = None
        if previous not in (None, m.ROOT) and previous not in self.items:
            raise EventError("item_not_found", f"Item with id '{previous}' not found.", "previous_item_id")
        if item.id is not None and item.id in self.items:
            raise EventError("invalid_value", f"Item with id '{item.id}' already exists.", "item.id")
        if item.type == "function_call_output" and not any(
            stored.get("type") == "function_call" and stored.get("call_id") == item.call_id
            for stored in self.items.values()
        ):
            raise EventError(
                "invalid_value",
                f"Tool call ID '{item.call_id}' not found in conversation: a "
                "function_call_output answers a function_call item of this conversation.",
                "item.call_id",
            )
        size = self._check_item(item, "item")
        if len(self.items) >= self.caps.max_items:
            raise EventError(
                "conversation_too_large",
                f"The conversation holds {len(self.items)} items, the limit is "
                f"{self.caps.max_items}: delete items (conversation.item.delete) before adding more.",
                "item",
            )
        if self.text_bytes + size > self.caps.max_total_bytes:
            raise EventError(
                "conversation_too_large",
                f"The conversation holds {self.text_bytes} bytes of text; with "
                f"this item it would pass the limit of {self.caps.max_total_bytes}. Delete items "
                "(conversation.item.delete) before adding more.",
                "item",
            )
        if item.type == "mcp_approval_response":
            self._answer_approval(item)
        stored = stored_item(item, item.id or new_id("item"))
        self._store(stored, previous)
        self._account(stored["id"], size)
        if item.type == "mcp_approval_response" and not item.approve:
            request = self.approval_requests.pop(item.approval_request_id or "")
            reason = f" ({item.reason})" if item.reason else ""
            self.port.submit(
                m.AddItem(
                    generation=self.port.generation,
                    item=m.FunctionCallOutputItem(
                        stored["id"],
                        request.call_id,
                        f"The user declined to run {request.tool.name}{reason}. Answer without it.",
                    ),
                    previous_item_id=previous,
                )
            )
        if (history := history_item(stored["id"], item)) is not None:
            self.port.submit(m.AddItem(generation=self.port.generation, item=history, previous_item_id=previous))
        if item.audio is not None:
            self._keep_audio(stored["id"], item.audio, self.session.input_format)
            self._committed_ms[stored["id"]] = audio.duration_ms(len(item.audio), self.session.input_format)
            self.port.submit(
                m.AudioItem(
                    generation=self.port.generation,
                    item_id=stored["id"],
                    data=item.audio,
                    audio_format=self.session.input_format,
                )
            )
        return self._item_added(stored)

    def _answer_approval(self, item: ClientItem) -> None:
        request = self.approval_requests.get(item.approval_request_id or "")
        if request is None:
            raise EventError(
                "item_not_found",
                f"No MCP approval request with id '{item.approval_request_id}' waits for an answer.",
                "item.approval_request_id",
            )
        if item.approve:
            self.approved[request.id] = self.approval_requests.pop(request.id)

    def retrieve_item(self, item_id: str) -> list[Event]:
        """The item; a user audio item with its audio (base64, in the session's input format) while it is kept."""
        item = self._item(item_id)
        if item_id in self._audio:
            data, fmt = self._audio[item_id]
            wanted = self.session.input_format
            data = (
                audio.from_pipeline(data, wanted)
                if fmt is None
                else (
                    data
                    if fmt == wanted
                    else audio.encode(
                        audio.resample(audio.decode(data, fmt), audio.RATES[fmt], audio.RATES[wanted]), wanted
                    )
                )
            )
            item = {
                **item,
                "content": [
                    {**part, "audio": encode_audio(data)} if part.get("type") == "input_audio" else part
                    for part in item["content"]
                ],
            }
        return [server_event("conversation.item.retrieved", item=item)]

    def _keep_audio(self, item_id: str, data: bytes, audio_format: str | None) -> None:
        """Keeps a user item's audio for retrieval; the oldest go when the session's audio cap is passed."""
        if not data or len(data) > self.caps.max_audio_bytes:
            return
        self._audio[item_id] = (data, audio_format)
        self.audio_bytes += len(data)
        while self.audio_bytes > self.caps.max_audio_bytes:
            self._drop_audio(next(iter(self._audio)))

    def _drop_audio(self, item_id: str) -> None:
        data, _ = self._audio.pop(item_id, (b"", None))
        self.audio_bytes -= len(data)

    def delete_item(self, item_id: str) -> list[Event]:
        self._item(item_id)
        del self.items[item_id]
        self._drop_audio(item_id)
        self._account(item_id, 0)
        self.port.submit(m.DeleteItem(generation=self.port.generation, item_id=item_id))
        return [server_event("conversation.item.deleted", item_id=item_id)]

    def truncate_item(self, item_id: str, content_index: int, audio_end_ms: int) -> list[Event]:
        item = self._item(item_id)
        response = next((r for r in self.finished + list(self.responses.values()) if r.item_id == item_id), None)
        if item.get("role") != "assistant" or response is None or "audio" not in response.modalities:
            raise EventError("invalid_value", "Only assistant messages with audio can be truncated.", "item_id")
        if content_index != 0:
            raise EventError(
                "invalid_value", "Invalid 'content_index': the item has one content part (0).", "content_index"
            )
        if audio_end_ms < 0 or audio_end_ms > response.audio_ms:
            raise EventError(
                "invalid_value",
                f"Audio content of {response.audio_ms}ms is shorter than {audio_end_ms}ms.",
                "audio_end_ms",
            )
        heard = heard_text(response, audio_end_ms)
        for part in item.get("content", []):
            if part.get("type") == "output_audio":
                part["transcript"] = heard
        self._account(item_id, text_bytes(heard))
        self.port.submit(m.TruncateItem(generation=self.port.generation, item_id=item_id, text=heard))
        return [
            server_event("conversation.item.truncated", item_id=item_id, content_index=0, audio_end_ms=audio_end_ms)
        ]

    def create_response(self, options: ResponseOptions, event_id: str | None = None) -> list[Event]:
        if self.session.transcription_only:
            raise EventError(
                "invalid_request_error",
                "A transcription session makes no responses: it transcribes the input audio only.",
                "type",
            )
        # Only one response at a time writes to the conversation; out-of-band ones may run beside it (queued
        # behind it on the unit's language model).
        running = [
            r
            for r in (*self.responses.values(), *self.pending.values())
            if not r.out_of_band and r.status == "in_progress"
        ]
        if running and not options.out_of_band:
            raise EventError(
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress: {running[0].id}. "
                "Wait until it is done, or cancel it.",
            )
        overrides = dict(options.overrides)
        clips: dict[str, bytes] = {}
        if options.input is not None:
            overrides["extra_input"], clips = self._response_input(options.input)
        if clips and options.mcp_servers:
            raise EventError(
                "invalid_value",
                "A response with its own MCP servers cannot also have input audio: "
                "offer the servers in session.update, or give the input as text.",
                "response.tools",
            )
        approved = [] if options.out_of_band else list(self.approved.values())
        self.approved = {} if approved else self.approved
        req = m.ResponseRequest.from_settings(
            self.session.settings(),
            self.port.generation,
            out_of_band=options.out_of_band,
            awaiting=bool(approved),
            **overrides,
        )
        if "tools" in overrides:  # the response's own functions, and the session's MCP tools beside them
            req = replace(req, tools=req.tools + self.session.hosted_functions())
        limit = overrides["max_output_tokens"] if "max_output_tokens" in overrides else self.session.max_output_tokens
        self.pending[req.response_id] = ResponseState(
            req.response_id,
            options.out_of_band,
            metadata=options.metadata,
            max_output_tokens="inf" if limit is None else limit,
            event_id=event_id,
            mcp=self._hosted(),
            approved=approved,
        )
        if options.mcp_servers and self.list_tools is not None:  # their tools first: see release_response
            self.held[req.response_id] = req
            return self.list_tools(req.response_id, options.mcp_servers)
        if clips:
            self.clips.hold(req, clips)
            for clip_id, data in clips.items():
                self.port.submit(
                    m.AudioItem(
                        generation=self.port.generation,
                        item_id=clip_id,
                        data=data,
                        audio_format=self.session.input_format,
                    )
                )
        else:
            self.port.submit(req)
        return []

    def release_response(self, response_id: str, tools: dict[str, HostedTool]) -> None:
        """A response held for its own MCP servers' listings starts, with their tools (those that listed)."""
        req = self.held.pop(response_id, None)
        if req is None:
            return
        taken = {tool.name for tool in req.tools}
        added = {name: tool for name, tool in tools.items() if name not in taken}
        if (state := self.pending.get(response_id)) is not None:
            state.mcp.update(added)
        self.port.submit(
            replace(
                req, tools=req.tools + tuple(tool.function() for tool in added.values()), hosted=req.hosted | set(added)
            )
        )

    def _hosted(self) -> dict[str, HostedTool]:
        return {tool.name: tool for tool in self.session.hosted_tools()}

    def cancel_response(self, wanted: str | None) -> list[Event]:
        target = self.active
        if wanted is not None:
            target = self.responses.get(wanted)
            if target is None and wanted in self.pending:
                target = self.pending[wanted]
        if target is None or target.status != "in_progress":
            raise EventError(
                "response_cancel_not_active", "Cancellation failed: no active response found.", "response_id"
            )
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
        return [
            server_event("input_audio_buffer.speech_started", audio_start_ms=msg.audio_start_ms, item_id=msg.item_id)
        ]

    def _on_SpeechStopped(self, msg: m.SpeechStopped) -> list[Event]:
        return [server_event("input_audio_buffer.speech_stopped", audio_end_ms=msg.audio_end_ms, item_id=msg.item_id)]

    def _on_AudioCommitted(self, msg: m.AudioCommitted) -> list[Event]:
        self._committed_ms[msg.item_id] = msg.duration_ms
        self._keep_audio(msg.item_id, msg.samples, None)
        previous = self._last_item_id()
        item = {
            "id": msg.item_id,
            "object": "realtime.item",
            "type": "message",
            "status": "completed",
            "role": "user",
            "content": [{"type": "input_audio", "transcript": None}],
        }
        self._store(item, None)
        return [
            server_event("input_audio_buffer.committed", previous_item_id=previous, item_id=msg.item_id),
            *self._item_added(item),
        ]

    def _on_AudioCleared(self, msg: m.AudioCleared) -> list[Event]:
        return [server_event("input_audio_buffer.cleared")]

    def _transcribing(self) -> bool:
        return self.session.transcription is not None or self.session.transcription_only

    def _on_TranscriptDelta(self, msg: m.TranscriptDelta) -> list[Event]:
        if not self._transcribing() or self.clips.owns(msg.item_id):
            return []
        return [
            server_event(
                "conversation.item.input_audio_transcription.delta",
                item_id=msg.item_id,
                content_index=0,
                delta=msg.delta,
                **self._logprobs(msg.logprobs),
            )
        ]

    def _on_TranscriptCompleted(self, msg: m.TranscriptCompleted) -> list[Event]:
        if self.clips.owns(msg.item_id):
            self._clip_transcribed(msg.item_id, msg.transcript)
            return []
        self.turns += 1
        seconds = self._committed_ms.pop(msg.item_id, 0) / 1000
        item = self.items.get(msg.item_id)
        if item is not None:
            for part in item["content"]:
                if part.get("type") == "input_audio":
                    part["transcript"] = msg.transcript
            self._account(msg.item_id, text_bytes(msg.transcript))
        if not self._transcribing():
            return []
        return [
            server_event(
                "conversation.item.input_audio_transcription.completed",
                item_id=msg.item_id,
                content_index=0,
                transcript=msg.transcript,
                usage={"type": "duration", "seconds": seconds},
                **self._logprobs(msg.logprobs),
            )
        ]

    def _logprobs(self, words: m.WordLogprobs | None) -> Event:
        """``logprobs`` when the session's ``include`` asks for them: one entry per word (see the STT backend)."""
        if not self.session.logprobs or words is None:
            return {}
        return {
            "logprobs": [
                {"token": word, "logprob": logprob, "bytes": list(word.encode("utf-8"))} for word, logprob in words
            ]
        }

    def _on_TranscriptFailed(self, msg: m.TranscriptFailed) -> list[Event]:
        self.errors += 1
        if self.clips.owns(msg.item_id):
            response_id = self.clips.give_up(msg.item_id)
            if response_id is None:
                return []
            state = self.pending.pop(response_id, None)
            return [
                server_event(
                    "error",
                    error={
                        "type": "invalid_request_error",
                        "code": "input_audio_transcription_failed",
                        "param": "response.input",
                        "message": f"The response was not started: its input audio could not be transcribed ({msg.message}).",  # noqa: E501
                        "event_id": state.event_id if state is not None else None,
                    },
                )
            ]
        return [
            server_event(
                "conversation.item.input_audio_transcription.failed",
                item_id=msg.item_id,
                content_index=0,
                error={
                    "type": "transcription_error",
                    "code": "transcription_failed",
                    "message": msg.message,
                    "param": None,
                },
            )
        ]

    def _clip_transcribed(self, clip_id: str, transcript: str) -> None:
        """A clip of a response's inline audio has its transcript: the response starts once all have."""
        # The STT passed the clip to the LM's history as a user turn: take it out again.
        self.port.submit(m.DeleteItem(generation=self.port.generation, item_id=clip_id))
        ready = self.clips.transcribed(clip_id, transcript)
        if ready is None:
            return
        req, transcripts = ready
        context = tuple(
            replace(item, text=" ".join(filter(None, (item.text, transcripts[item.item_id]))))
            if item.item_id in transcripts
            else item
            for item in req.extra_input or ()
        )
        self.port.submit(replace(req, extra_input=context))

    def _on_ResponseStarted(self, msg: m.ResponseStarted) -> list[Event]:
        state = self.pending.pop(msg.response_id, None) or ResponseState(
            msg.response_id, msg.out_of_band, max_output_tokens=self.session.max_output_tokens, mcp=self._hosted()
        )
        state.item_id, state.modalities = msg.item_id, msg.output_modalities
        state.output_format, state.voice = msg.output_format, msg.voice
        state.conversation_id = None if msg.out_of_band else self.id
        self.responses[msg.response_id] = state
        if self.active is None and not state.out_of_band:
            self.active = state
        self.idle_due = None
        return [server_event("response.created", response=self._response_obj(state, []))]

    def _open_message(self, state: ResponseState) -> list[Event]:
        """The assistant message, added when the first text or audio comes (a call-only response has none)."""
        if state.message_index is not None:
            return []
        state.message_index = len(state.output)
        events = self._output_added(state, self._assistant_item(state, "in_progress"))
        events.append(
            server_event(
                "response.content_part.added",
                response_id=state.id,
                item_id=state.item_id,
                output_index=state.message_index,
                content_index=0,
                part=event_part(self._part(state, done=False)),
            )
        )
        return events

    def _output_added(self, state: ResponseState, item: Event) -> list[Event]:
        """A new output item of ``state``: ``response.output_item.added``, then (in the conversation) ``.added``."""
        state.output.append(item)
        events = [
            server_event(
                "response.output_item.added", response_id=state.id, output_index=len(state.output) - 1, item=item
            )
        ]
        if not state.out_of_band:  # the API adds the item to the conversation once it is a response's output
            self._store(item, None)
            events.append(
                server_event("conversation.item.added", previous_item_id=self._previous_of(item["id"]), item=item)
            )
        return events

    def _on_TextDelta(self, msg: m.TextDelta) -> list[Event]:
        state = self.responses.get(msg.response_id)
        if state is None or state.status != "in_progress":
            return []
        events = self._open_message(state)
        state.text += msg.delta
        events.append(
            server_event(
                "response.output_text.delta",
                response_id=state.id,
                item_id=state.item_id,
                output_index=state.message_index,
                content_index=0,
                delta=msg.delta,
            )
        )
        return events

    def _on_FunctionCallStarted(self, msg: m.FunctionCallStarted) -> list[Event]:
        state = self.responses.get(msg.response_id)
        if state is None or state.status != "in_progress":
            return []
        tool = state.mcp.get(msg.name)
        if tool is not None and tool.needs_approval:
            return []  # an approval request, shown whole once its arguments are written
        state.calls[msg.item_id] = len(state.output)
        if tool is not None:
            return self._output_added(state, mcp_call_item(msg.item_id, tool, ""))
        return self._output_added(
            state,
            {
                "id": msg.item_id,
                "object": "realtime.item",
                "type": "function_call",
                "status": "in_progress",
                "call_id": msg.call_id,
                "name": msg.name,
                "arguments": "",
            },
        )

    def _call(self, response_id: str, item_id: str) -> tuple[ResponseState, int] | None:
        """The running response and output index of a call the client was told of (None: cancelled or unknown)."""
        state = self.responses.get(response_id)
        if state is None or state.status != "in_progress" or item_id not in state.calls:
            return None
        return state, state.calls[item_id]

    def _on_FunctionCallArgumentsDelta(self, msg: m.FunctionCallArgumentsDelta) -> list[Event]:
        if (found := self._call(msg.response_id, msg.item_id)) is None:
            return []
        state, index = found
        state.output[index] = {**state.output[index], "arguments": state.output[index]["arguments"] + msg.delta}
        if state.output[index]["type"] == "mcp_call":
            return [
                server_event(
                    "response.mcp_call_arguments.delta",
                    response_id=state.id,
                    item_id=msg.item_id,
                    output_index=index,
                    delta=msg.delta,
                )
            ]
        return [
            server_event(
                "response.function_call_arguments.delta",
                response_id=state.id,
                item_id=msg.item_id,
                output_index=index,
                call_id=msg.call_id,
                delta=msg.delta,
            )
        ]

    def _on_FunctionCallDone(self, msg: m.FunctionCallDone) -> list[Event]:
        state = self.responses.get(msg.response_id)
        tool = state.mcp.get(msg.name) if state is not None and state.status == "in_progress" else None
        if state is not None and tool is not None and tool.needs_approval:
            return self._ask_approval(state, msg, tool)
        if (found := self._call(msg.response_id, msg.item_id)) is None:
            return []
        state, index = found
        if tool is not None:  # it runs once the model has finished writing (ToolsPending)
            state.output[index] = {**state.output[index], "arguments": msg.arguments}
            return [
                server_event(
                    "response.mcp_call_arguments.done",
                    response_id=state.id,
                    item_id=msg.item_id,
                    output_index=index,
                    arguments=msg.arguments,
                )
            ]
        item = {**state.output[index], "status": "completed", "arguments": msg.arguments}
        return [
            server_event(
                "response.function_call_arguments.done",
                response_id=state.id,
                item_id=msg.item_id,
                output_index=index,
                call_id=msg.call_id,
                name=msg.name,
                arguments=msg.arguments,
            ),
            *self._output_done(state, index, item),
        ]

    def _ask_approval(self, state: ResponseState, msg: m.FunctionCallDone, tool: HostedTool) -> list[Event]:
        """An ``mcp_approval_request`` item: the response ends with it; the client answers, then asks again."""
        request = ApprovalRequest(msg.item_id, msg.call_id, tool, msg.arguments)
        self.approval_requests[request.id] = request
        item = {
            "id": request.id,
            "type": "mcp_approval_request",
            "server_label": tool.server.label,
            "name": tool.name,
            "arguments": msg.arguments,
        }
        events = self._output_added(state, item)
        return events + self._output_done(state, len(state.output) - 1, item)

    def add_item(self, item: Event) -> list[Event]:
        """An item the server adds on its own (an ``mcp_list_tools``): last, ``conversation.item.added``."""
        self._store(item, None)
        return [server_event("conversation.item.added", previous_item_id=self._previous_of(item["id"]), item=item)]

    def item_done(self, item: Event) -> list[Event]:
        """That item, final: ``conversation.item.done`` (nothing if the client deleted it meanwhile)."""
        if item["id"] not in self.items:
            return []
        self.items[item["id"]] = item
        return [server_event("conversation.item.done", previous_item_id=self._previous_of(item["id"]), item=item)]

    def output_added(self, state: ResponseState, item: Event) -> tuple[int, list[Event]]:
        """A new output item of a running response (an MCP call the server makes): its index and the events."""
        events = self._output_added(state, item)
        return len(state.output) - 1, events

    def output_done(self, state: ResponseState, index: int, item: Event) -> list[Event]:
        return self._output_done(state, index, item)

    def _output_done(self, state: ResponseState, index: int, item: Event) -> list[Event]:
        """An output item is final: ``response.output_item.done``, then (in the conversation) ``.done``."""
        state.output[index] = item
        events = [server_event("response.output_item.done", response_id=state.id, output_index=index, item=item)]
        if not state.out_of_band and item["id"] in self.items:
            self.items[item["id"]] = item
            self._account(item["id"], text_bytes(item_text(item)))
            events.append(
                server_event("conversation.item.done", previous_item_id=self._previous_of(item["id"]), item=item)
            )
        return events

    def _on_AudioOut(self, msg: m.AudioOut) -> list[Event]:
        state = self.responses.get(msg.response_id)
        if state is None or state.status != "in_progress":
            return []  # cancelled: nothing more reaches the client
        if state.first_audio_at is None:
            state.first_audio_at = time.monotonic()
            self.session.audio_produced = True
        events = self._open_message(state)
        events.append(
            server_event(
                "response.output_audio.delta",
                response_id=state.id,
                item_id=state.item_id,
                output_index=state.message_index,
                content_index=0,
                audio=msg,  # the transport's: base64 ``delta`` on the wire, or played (ServerEvent)
            )
        )
        if msg.transcript:
            delta = (" " if state.text else "") + msg.transcript
            state.spoken.append((msg.transcript, state.audio_ms))
            state.text += delta
            events.append(
                server_event(
                    "response.output_audio_transcript.delta",
                    response_id=state.id,
                    item_id=state.item_id,
                    output_index=state.message_index,
                    content_index=0,
                    delta=delta,
                )
            )
        state.audio_bytes += len(msg.data)
        return events

    def _on_ResponseFinished(self, msg: m.ResponseFinished) -> list[Event]:
        state = self.responses.pop(msg.response_id, None)
        if state is None:
            return []
        if state.status == "in_progress":
            state.status, state.reason, state.error_code = msg.status, msg.reason, msg.error_code
        if self.active is state:
            self.active = None
        self.finished.append(state)
        del self.finished[:-20]
        events: list[Event] = []
        if state.status == "failed":
            self.errors += 1
            events.append(
                server_event(
                    "error",
                    error={
                        **failure(state),
                        "message": f"The response failed: {state.reason}",
                        "param": None,
                        "event_id": state.event_id,
                    },
                )
            )
        if not state.output:  # nothing came (an empty or early-cancelled answer): the message says so
            events += self._open_message(state)
        for index, item in enumerate(list(state.output)):
            if index == state.message_index:
                events += self._message_done(state)
            elif item.get("status") == "in_progress":  # a call cut short: its arguments are not valid, nothing runs it
                events += self._output_done(state, index, {**item, "status": "incomplete"})
        usage = {
            "total_tokens": msg.input_tokens + msg.output_tokens,
            "input_tokens": msg.input_tokens,
            "output_tokens": msg.output_tokens,
            "input_token_details": {
                "text_tokens": msg.input_tokens,
                "audio_tokens": 0,
                "cached_tokens": msg.cached_tokens,
            },
            "output_token_details": {"text_tokens": msg.output_tokens, "audio_tokens": 0},
        }
        events.append(server_event("response.done", response=self._response_obj(state, list(state.output), usage)))
        self._arm_idle_timeout(state)
        return events

    def _message_done(self, state: ResponseState) -> list[Event]:
        """The end of the response's assistant message: its text or audio, its part, the item."""
        item = self._assistant_item(state, "completed" if state.status == "completed" else "incomplete")
        ids = {
            "response_id": state.id,
            "item_id": state.item_id,
            "output_index": state.message_index,
            "content_index": 0,
        }
        if "audio" in state.modalities:
            events = [
                server_event("response.output_audio.done", **ids),
                server_event("response.output_audio_transcript.done", **ids, transcript=state.text),
            ]
        else:
            events = [server_event("response.output_text.done", **ids, text=state.text)]
        events.append(server_event("response.content_part.done", **ids, part=event_part(self._part(state, done=True))))
        return events + self._output_done(state, state.message_index or 0, item)

    def _arm_idle_timeout(self, state: ResponseState) -> None:
        """Counts ``idle_timeout_ms`` from when the response's audio has finished playing."""
        td = self.session.turn_detection or {}
        timeout_ms = td.get("idle_timeout_ms")
        if not timeout_ms or state.out_of_band or state.status != "completed":
            return
        self.idle_due = time.monotonic() + (state.audio_ms + timeout_ms) / 1000

    def idle_timeout(self) -> list[Event]:
        """The user stayed silent past ``idle_timeout_ms``: say so and prompt them with a response."""
        self.idle_due = None
        heard_ms = int(self.audio_in_seconds * 1000)
        timeout_ms = (self.session.turn_detection or {}).get("idle_timeout_ms") or 0
        settings = self.session.settings()
        prompt = (
            "The user has been silent for a while. In one short sentence, "
            "check whether they are still there or continue the conversation."
        )
        req = m.ResponseRequest.from_settings(
            settings, self.port.generation, instructions=f"{settings.instructions}\n{prompt}".strip()
        )
        self.pending[req.response_id] = ResponseState(
            req.response_id, out_of_band=False, max_output_tokens=self.session.max_output_tokens, mcp=self._hosted()
        )
        # As the API does: the silent stretch is committed as an (empty) user audio item, then answered.
        item_id = new_id("item")
        previous = self._last_item_id()
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "status": "completed",
            "role": "user",
            "content": [{"type": "input_audio", "transcript": ""}],
        }
        self._store(item, None)
        self.port.submit(req)
        return [
            server_event(
                "input_audio_buffer.timeout_triggered",
                audio_start_ms=max(0, heard_ms - timeout_ms),
                audio_end_ms=heard_ms,
                item_id=item_id,
            ),
            server_event("input_audio_buffer.committed", previous_item_id=previous, item_id=item_id),
            *self._item_added(item),
        ]

    def _on_PipelineError(self, msg: m.PipelineError) -> list[Event]:
        self.errors += 1
        error_type = "invalid_request_error" if msg.code.startswith("input_audio_buffer") else "server_error"
        return [
            server_event(
                "error",
                error={
                    "type": error_type,
                    "code": msg.code,
                    "message": msg.message,
                    "param": None,
                    "event_id": msg.event_id,
                },
            )
        ]

    # --- helpers --------------------------------------------------------------

    def _check_item(self, item: ClientItem, param: str) -> int:
        """The item's text in bytes; raises ``string_above_max_length`` past the per-item limit."""
        size = (
            text_bytes(item.output)
            + text_bytes(item.arguments)
            + text_bytes(item.name)
            + sum(text_bytes(part.text) for part in item.content)
        )
        if size > self.caps.max_item_bytes:
            raise EventError(
                "string_above_max_length",
                f"Invalid '{param}': its text is {size} bytes, the limit is {self.caps.max_item_bytes} bytes per item.",
                param,
            )
        return size

    def _account(self, item_id: str, size: int) -> None:
        """Counts an item's text (0: the item is gone) in the conversation's total."""
        self.text_bytes += size - self._sizes.pop(item_id, 0)
        if size and item_id in self.items:
            self._sizes[item_id] = size

    def _cancel(self, state: ResponseState, reason: str) -> None:
        state.status, state.reason = "cancelled", reason
        self.port.cancel(state.id, reason)
        if self.on_cancel is not None:
            self.on_cancel(state.id)

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
        self.items = m.insert_after(self.items, item["id"], item, previous)

    def _item_added(self, item: Event) -> list[Event]:
        """``conversation.item.added`` and ``.done``, naming the item's real predecessor (None when it is first)."""
        previous = self._previous_of(item["id"])
        return [
            server_event("conversation.item.added", previous_item_id=previous, item=item),
            server_event("conversation.item.done", previous_item_id=previous, item=item),
        ]

    def _part(self, state: ResponseState, done: bool) -> Event:
        if "audio" in state.modalities:
            return {"type": "output_audio", "transcript": state.text if done else ""}
        return {"type": "output_text", "text": state.text if done else ""}

    def _assistant_item(self, state: ResponseState, status: str) -> Event:
        content = [self._part(state, done=True)] if status != "in_progress" else []
        return {
            "id": state.item_id,
            "object": "realtime.item",
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def _response_obj(self, state: ResponseState, output: list[Event], usage: Event | None = None) -> Event:
        details = None
        if state.status == "cancelled":
            details = {"type": "cancelled", "reason": state.reason}
        elif state.status == "incomplete":
            details = {"type": "incomplete", "reason": state.reason}
        elif state.status == "failed":
            details = {"type": "failed", "error": {**failure(state), "message": state.reason}}
        return {
            "object": "realtime.response",
            "id": state.id,
            "status": state.status,
            "status_details": details,
            "output": output,
            "conversation_id": state.conversation_id,
            "output_modalities": list(state.modalities),
            "max_output_tokens": state.max_output_tokens,
            "audio": {"output": {"format": {"type": state.output_format}, "voice": state.voice}},
            "usage": usage,
            "metadata": state.metadata,
        }

    def _response_input(
        self, entries: tuple[ClientItem | ItemReference, ...]
    ) -> tuple[tuple[m.HistoryEntry, ...], dict[str, bytes]]:
        """A response's own context: referenced items of the conversation, and items given inline.

        Also the inline audio to transcribe before the response starts: clip id -> audio.
        """
        if len(entries) > self.caps.max_items:
            raise EventError(
                "array_above_max_length",
                f"Invalid 'response.input': {len(entries)} items, the limit is {self.caps.max_items}.",
                "response.input",
            )
        out: list[m.HistoryEntry] = []
        clips: dict[str, bytes] = {}
        total = 0
        for index, entry in enumerate(entries):
            if isinstance(entry, ClientItem):
                total += self._check_item(entry, f"response.input[{index}]")
                if total > self.caps.max_total_bytes:
                    raise EventError(
                        "string_above_max_length",
                        f"Invalid 'response.input': its text passes the limit of {self.caps.max_total_bytes} bytes.",
                        "response.input",
                    )
            if isinstance(entry, ItemReference):
                if entry.id not in self.items:
                    raise EventError(
                        "item_not_found", f"Item with id '{entry.id}' not found.", f"response.input[{index}].id"
                    )
                out.append(stored_history(self.items[entry.id]))
            elif entry.audio is not None:  # transcribed first, under an id the conversation never shows
                clip_id = new_id("item")
                clips[clip_id] = entry.audio
                out.append(m.HistoryItem(clip_id, entry.role, entry.text))
            elif (history := history_item(entry.id or new_id("item"), entry)) is not None:
                out.append(history)
        return tuple(out), clips


def failure(state: ResponseState) -> Event:
    """The ``type`` and ``code`` of a failed response's error: the client's to fix (a conversation too long for
    the context with truncation disabled), or the server's."""
    if state.error_code is not None:
        return {"type": "invalid_request_error", "code": state.error_code}
    return {"type": "server_error", "code": "response_failed"}


def event_part(part: Event) -> Event:
    """A content part as ``response.content_part.added``/``done`` carry it: type ``text`` or ``audio``.

    Items say ``output_text``/``output_audio``; the content-part events use the short names (the SDK's ``Part``).
    """
    return {**part, "type": EVENT_PART_TYPES.get(part["type"], part["type"])}


EVENT_PART_TYPES = {"output_text": "text", "output_audio": "audio"}


def stored_item(item: ClientItem, item_id: str) -> Event:
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
        return {
            "id": item_id,
            "object": "realtime.item",
            "type": item.type,
            "status": "completed",
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
        }
    if item.type == "mcp_approval_response":
        return {
            "id": item_id,
            "type": item.type,
            "approval_request_id": item.approval_request_id,
            "approve": item.approve,
            "reason": item.reason,
        }
    parts: list[Event] = []
    for part in item.content:
        if part.audio is not None:
            parts.append({"type": "input_audio", "transcript": None})
        else:
            parts.append({"type": part.type, "text": part.text})
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "status": "completed",
        "role": item.role,
        "content": parts,
    }


def mcp_call_item(item_id: str, tool: HostedTool, arguments: str, approval_request_id: str | None = None) -> Event:
    """An ``mcp_call`` item, before it has run (``output`` and ``error`` come when it has)."""
    return {
        "id": item_id,
        "type": "mcp_call",
        "server_label": tool.server.label,
        "name": tool.name,
        "arguments": arguments,
        "approval_request_id": approval_request_id,
        "output": None,
        "error": None,
    }


def history_item(item_id: str, item: ClientItem) -> m.HistoryEntry | None:
    """What the LM's history keeps of a client item (None: nothing to read, e.g. audio still to transcribe)."""
    if item.type == "function_call_output":
        return m.FunctionCallOutputItem(item_id, item.call_id or "", item.output or "")
    if item.type == "function_call":
        return m.FunctionCallItem(item_id, item.call_id or "", item.name or "", item.arguments or "")
    return m.HistoryItem(item_id, item.role, item.text) if item.text else None


def stored_history(item: Event) -> m.HistoryEntry:
    """An item of the conversation as the LM reads it (for a response's ``input`` that references it)."""
    if item["type"] == "function_call":
        return m.FunctionCallItem(item["id"], item.get("call_id") or "", item["name"], item["arguments"])
    if item["type"] == "function_call_output":
        return m.FunctionCallOutputItem(item["id"], item["call_id"], item["output"])
    return m.HistoryItem(item["id"], item.get("role", "user"), item_text(item))


def item_text(item: Event) -> str:
    """The text an item holds: its parts' text or transcripts, a call's arguments, a call's output."""
    if item["type"] == "function_call":
        return item["name"] + item["arguments"]
    if item["type"] == "function_call_output":
        return item["output"]
    if item["type"] in ("mcp_call", "mcp_approval_request"):
        return item["name"] + item["arguments"] + (item.get("output") or "")
    return " ".join(p.get("text") or p.get("transcript") or "" for p in item.get("content", []))


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
