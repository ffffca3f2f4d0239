"""The responses of one session through their life: asked for, running, finished.

A response is *pending* from ``response.create`` (or the server's own prompt) until the LM
says ``ResponseStarted``, *running* until ``ResponseFinished``, then *finished* with one final
status: ``completed``, ``incomplete``, ``failed`` or ``cancelled`` (:func:`final_status`). Only
one response at a time writes to the conversation (``active``); out-of-band ones run beside it.
A running response's output (its assistant message, its calls) becomes items of the conversation
as it comes, and each step says which server events to send.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pipelines import audio, messages as m
from realtime.protocol import events as e
from realtime.protocol.events import server_event
from realtime.protocol.items import Items, Speech, item_text, text_bytes
from realtime.protocol.mcp.config import HostedTool, McpServer
from realtime.protocol.session.config import ResponseOptions, SessionConfig
from realtime.protocol.wire import EventError

Event = dict[str, Any]

FINAL_STATUSES = ("completed", "incomplete", "failed", "cancelled")
RECENT = 20  # finished responses kept for the recorder, which reads the one just finished


@dataclass(frozen=True)
class ApprovalRequest:
    """A call of an MCP tool that waits for the client's ``mcp_approval_response`` (the item's id is ``id``)."""

    id: str
    call_id: str
    tool: HostedTool
    arguments: str


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
    speech: Speech = field(default_factory=lambda: Speech(audio.PCM))  # the audio sent, for truncation
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
        return self.speech.audio_ms

    def as_object(self, output: list[Event], usage: Event | None = None) -> Event:
        """The ``realtime.response`` of ``response.created`` and ``response.done``."""
        return {
            "object": "realtime.response",
            "id": self.id,
            "status": self.status,
            "status_details": e.status_details(self.status, self.reason, self.error_code),
            "output": output,
            "conversation_id": self.conversation_id,
            "output_modalities": list(self.modalities),
            "max_output_tokens": self.max_output_tokens,
            "audio": {"output": {"format": {"type": self.output_format}, "voice": self.voice}},
            "usage": usage,
            "metadata": self.metadata,
        }


def final_status(state: ResponseState, msg: m.ResponseFinished) -> tuple[str, str | None, str | None]:
    """The (status, reason, error code) ``response.done`` reports, on every path.

    A cancellation the session decided (the client, a barge-in) stands, even when the pipeline
    finished the response before the cancellation reached it. Otherwise the pipeline's status
    holds; one that is not final is a server fault, and the response failed.
    """
    if state.status == "cancelled":
        return "cancelled", state.reason, None
    match msg.status:
        case "completed" | "incomplete" | "cancelled":
            return msg.status, msg.reason, None
        case "failed":
            return "failed", msg.reason, msg.error_code
        case _:
            return "failed", f"the pipeline ended the response with status '{msg.status}'", None


@dataclass
class Port:
    """What the conversation may do to the pipeline: submit messages and cancel responses."""

    generation: int
    submit: Callable[[m.Downstream], None]
    cancel: Callable[[str, str], None]  # (response id, reason)


class Responses:
    """The session's responses: pending, running (``active``: the one writing to the conversation), finished."""

    def __init__(self, session: SessionConfig, items: Items, port: Port, conversation_id: str) -> None:
        self.session = session
        self.items = items
        self.port = port
        self.conversation_id = conversation_id
        self.pending: dict[str, ResponseState] = {}  # asked for, not yet started
        self.running: dict[str, ResponseState] = {}
        self.active: ResponseState | None = None
        self.finished: deque[ResponseState] = deque(maxlen=RECENT)
        self.approval_requests: dict[str, ApprovalRequest] = {}  # asked, not yet answered
        self.approved: dict[str, ApprovalRequest] = {}  # approved, to run in the next response
        # Responses with MCP servers of their own wait for their tools: ``list_tools`` (set by the session's MCP
        # side) lists them and calls ``release``.
        self.held: dict[str, m.ResponseRequest] = {}
        self.given_up: deque[str] = deque(maxlen=RECENT)  # failed before they started: what the LM says of them later
        self.list_tools: Callable[[str, tuple[McpServer, ...]], list[Event]] | None = None
        self.on_cancel: Callable[[str], None] | None = None  # a response was cancelled: stop its MCP calls

    def find(self, response_id: str) -> ResponseState | None:
        """A running, pending or recently finished response."""
        state = self.running.get(response_id) or self.pending.get(response_id)
        return state or next((s for s in reversed(self.finished) if s.id == response_id), None)

    def live(self, response_id: str) -> ResponseState | None:
        """The response if it runs and is not cancelled (its output still reaches the client)."""
        state = self.running.get(response_id)
        return state if state is not None and state.status == "in_progress" else None

    # --- asked for ------------------------------------------------------------------------

    def check_free(self, out_of_band: bool) -> None:
        """Raises unless a response may start: one at a time writes to the conversation; out-of-band ones
        may run beside it (queued behind it on the unit's language model)."""
        running = [
            r
            for r in (*self.running.values(), *self.pending.values())
            if not r.out_of_band and r.status == "in_progress"
        ]
        if running and not out_of_band:
            raise EventError(
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress: {running[0].id}. "
                "Wait until it is done, or cancel it.",
            )

    def ask(self, options: ResponseOptions, overrides: dict[str, Any], event_id: str | None) -> m.ResponseRequest:
        """The request of a ``response.create``, pending from now on (the approved MCP calls run first in it)."""
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
        limit = overrides.get("max_output_tokens", self.session.max_output_tokens)
        self.pending[req.response_id] = ResponseState(
            req.response_id,
            options.out_of_band,
            metadata=options.metadata,
            max_output_tokens="inf" if limit is None else limit,
            event_id=event_id,
            mcp=self._hosted(),
            approved=approved,
        )
        return req

    def expect(self, req: m.ResponseRequest) -> None:
        """A response the server asks for on its own (the idle prompt): pending, like a client's."""
        self.pending[req.response_id] = ResponseState(
            req.response_id, out_of_band=False, max_output_tokens=self.session.max_output_tokens, mcp=self._hosted()
        )

    def overdue(self, now: float, within_s: float) -> list[str]:
        """The pending responses asked for more than ``within_s`` before ``now`` (not those held for their MCP
        servers' tools: they wait for the listings), oldest first."""
        late = [
            state for key, state in self.pending.items() if key not in self.held and now - state.started_at > within_s
        ]
        return [state.id for state in sorted(late, key=lambda state: state.started_at)]

    def first_due(self, within_s: float) -> float | None:
        """When the oldest pending response becomes overdue (None: none is pending)."""
        asked = [state.started_at for key, state in self.pending.items() if key not in self.held]
        return min(asked) + within_s if asked else None

    def drop(self, response_id: str) -> ResponseState | None:
        """A pending response that will never start (its input audio could not be transcribed)."""
        return self.pending.pop(response_id, None)

    def hold(self, req: m.ResponseRequest, servers: tuple[McpServer, ...]) -> list[Event]:
        """A response with MCP servers of its own waits for their tools (see :meth:`release`)."""
        assert self.list_tools is not None
        self.held[req.response_id] = req
        return self.list_tools(req.response_id, servers)

    def release(self, response_id: str, tools: dict[str, HostedTool]) -> None:
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

    def answer_approval(self, approval_request_id: str | None, approve: bool | None) -> ApprovalRequest:
        """The client's ``mcp_approval_response``: an approved call runs in the next response."""
        request = self.approval_requests.pop(approval_request_id or "", None)
        if request is None:
            raise EventError(
                "item_not_found",
                f"No MCP approval request with id '{approval_request_id}' waits for an answer.",
                "item.approval_request_id",
            )
        if approve:
            self.approved[request.id] = request
        return request

    # --- cancelled ------------------------------------------------------------------------

    def cancel(self, wanted: str | None) -> None:
        """``response.cancel``: the one named (running or pending), or the active one."""
        target = self.active if wanted is None else self.running.get(wanted) or self.pending.get(wanted)
        if target is None or target.status != "in_progress":
            raise EventError(
                "response_cancel_not_active", "Cancellation failed: no active response found.", "response_id"
            )
        self._cancel(target, "client_cancelled")

    def interrupt(self) -> None:
        """The user started speaking: the active response stops (``turn_detected``)."""
        if self.active is not None and self.active.status == "in_progress":
            self._cancel(self.active, "turn_detected")

    def _cancel(self, state: ResponseState, reason: str) -> None:
        state.status, state.reason = "cancelled", reason
        self.port.cancel(state.id, reason)
        if self.on_cancel is not None:
            self.on_cancel(state.id)

    # --- running --------------------------------------------------------------------------

    def started(self, msg: m.ResponseStarted) -> list[Event]:
        if msg.response_id in self.given_up:
            return []  # it failed already (it did not start in time): the client heard its end; the rest is dropped
        state = self.pending.pop(msg.response_id, None) or ResponseState(
            msg.response_id, msg.out_of_band, max_output_tokens=self.session.max_output_tokens, mcp=self._hosted()
        )
        state.item_id, state.modalities = msg.item_id, msg.output_modalities
        state.output_format, state.voice = msg.output_format, msg.voice
        state.speech = Speech(msg.output_format)
        state.conversation_id = None if msg.out_of_band else self.conversation_id
        self.running[msg.response_id] = state
        if self.active is None and not state.out_of_band:
            self.active = state
        return [server_event("response.created", response=state.as_object([]))]

    def text(self, msg: m.TextDelta) -> list[Event]:
        if (state := self.live(msg.response_id)) is None:
            return []
        events = self._open_message(state)
        state.text += msg.delta
        events.append(server_event("response.output_text.delta", **_content_ids(state), delta=msg.delta))
        return events

    def audio(self, msg: m.AudioOut) -> list[Event]:
        if (state := self.live(msg.response_id)) is None:
            return []  # cancelled: nothing more reaches the client
        if state.first_audio_at is None:
            state.first_audio_at = time.monotonic()
            self.session.audio_produced = True
        events = self._open_message(state)
        events.append(
            # the transport's: a base64 ``delta`` on the wire, or played (ServerEvent)
            server_event("response.output_audio.delta", **_content_ids(state), audio=msg)
        )
        state.speech.sent(len(msg.data), msg.transcript)  # its words went out before it (spoken_text)
        return events

    def spoken_text(self, msg: m.SpokenText) -> list[Event]:
        """A piece's words, as its synthesis starts: ahead of its audio."""
        if (state := self.live(msg.response_id)) is None or not msg.text:
            return []
        events = self._open_message(state)
        delta = (" " if state.text else "") + msg.text
        state.text += delta
        events.append(server_event("response.output_audio_transcript.delta", **_content_ids(state), delta=delta))
        return events

    def _open_message(self, state: ResponseState) -> list[Event]:
        """The assistant message, added when the first text or audio comes (a call-only response has none)."""
        if state.message_index is not None:
            return []
        state.message_index = len(state.output)
        events = self.output_added(state, e.message_item(state.item_id, "assistant", "in_progress", []))
        if not state.out_of_band and "audio" in state.modalities:
            self.items.spoken(state.item_id, state.speech)
        part = e.event_part(e.content_part(state.modalities, ""))
        events.append(server_event("response.content_part.added", **_content_ids(state), part=part))
        return events

    def call_started(self, msg: m.FunctionCallStarted) -> list[Event]:
        if (state := self.live(msg.response_id)) is None:
            return []
        tool = state.mcp.get(msg.name)
        if tool is not None and tool.needs_approval:
            return []  # an approval request, shown whole once its arguments are written
        state.calls[msg.item_id] = len(state.output)
        if tool is not None:
            return self.output_added(state, e.mcp_call_item(msg.item_id, tool.server.label, tool.name, ""))
        return self.output_added(state, e.function_call_item(msg.item_id, msg.call_id, msg.name))

    def _call(self, response_id: str, item_id: str) -> tuple[ResponseState, int] | None:
        """The running response and output index of a call the client was told of (None: cancelled or unknown)."""
        state = self.live(response_id)
        if state is None or item_id not in state.calls:
            return None
        return state, state.calls[item_id]

    def call_arguments(self, msg: m.FunctionCallArgumentsDelta) -> list[Event]:
        if (found := self._call(msg.response_id, msg.item_id)) is None:
            return []
        state, index = found
        state.output[index] = {**state.output[index], "arguments": state.output[index]["arguments"] + msg.delta}
        ids = {"response_id": state.id, "item_id": msg.item_id, "output_index": index}
        if state.output[index]["type"] == "mcp_call":
            return [server_event("response.mcp_call_arguments.delta", **ids, delta=msg.delta)]
        return [server_event("response.function_call_arguments.delta", **ids, call_id=msg.call_id, delta=msg.delta)]

    def call_done(self, msg: m.FunctionCallDone) -> list[Event]:
        state = self.live(msg.response_id)
        tool = state.mcp.get(msg.name) if state is not None else None
        if state is not None and tool is not None and tool.needs_approval:
            return self._ask_approval(state, msg, tool)
        if (found := self._call(msg.response_id, msg.item_id)) is None:
            return []
        state, index = found
        ids = {"response_id": state.id, "item_id": msg.item_id, "output_index": index}
        if tool is not None:  # it runs once the model has finished writing (ToolsPending)
            state.output[index] = {**state.output[index], "arguments": msg.arguments}
            return [server_event("response.mcp_call_arguments.done", **ids, arguments=msg.arguments)]
        item = {**state.output[index], "status": "completed", "arguments": msg.arguments}
        return [
            server_event(
                "response.function_call_arguments.done",
                **ids,
                call_id=msg.call_id,
                name=msg.name,
                arguments=msg.arguments,
            ),
            *self.output_done(state, index, item),
        ]

    def _ask_approval(self, state: ResponseState, msg: m.FunctionCallDone, tool: HostedTool) -> list[Event]:
        """An ``mcp_approval_request`` item: the response ends with it; the client answers, then asks again."""
        request = ApprovalRequest(msg.item_id, msg.call_id, tool, msg.arguments)
        self.approval_requests[request.id] = request
        item = e.mcp_approval_request_item(request.id, tool.server.label, tool.name, msg.arguments)
        events = self.output_added(state, item)
        return events + self.output_done(state, len(state.output) - 1, item)

    def output_added(self, state: ResponseState, item: Event) -> list[Event]:
        """A new output item of ``state``: ``response.output_item.added``, then (in the conversation) ``.added``."""
        state.output.append(item)
        index = len(state.output) - 1
        events = [server_event("response.output_item.added", response_id=state.id, output_index=index, item=item)]
        if not state.out_of_band:  # the API adds the item to the conversation once it is a response's output
            self.items.put(item)
            previous = self.items.previous_of(item["id"])
            events.append(server_event("conversation.item.added", previous_item_id=previous, item=item))
        return events

    def output_done(self, state: ResponseState, index: int, item: Event) -> list[Event]:
        """An output item is final: ``response.output_item.done``, then (in the conversation) ``.done``."""
        state.output[index] = item
        events = [server_event("response.output_item.done", response_id=state.id, output_index=index, item=item)]
        if not state.out_of_band and item["id"] in self.items:
            self.items.put(item)
            self.items.account(item["id"], text_bytes(item_text(item)))
            previous = self.items.previous_of(item["id"])
            events.append(server_event("conversation.item.done", previous_item_id=previous, item=item))
        return events

    # --- finished -------------------------------------------------------------------------

    def finish(self, msg: m.ResponseFinished) -> tuple[ResponseState | None, list[Event]]:
        """The response is over: its final status, its open items closed, ``response.done``."""
        state = self.running.pop(msg.response_id, None)
        if state is None:
            return None, []
        state.status, state.reason, state.error_code = final_status(state, msg)
        if self.active is state:
            self.active = None
        self.finished.append(state)
        events: list[Event] = []
        if state.status == "failed":
            error = {**e.response_error(state.error_code), "message": f"The response failed: {state.reason}"}
            events.append(server_event("error", error={**error, "param": None, "event_id": state.event_id}))
        if not state.output:  # nothing came (an empty or early-cancelled answer): the message says so
            events += self._open_message(state)
        for index, item in enumerate(list(state.output)):
            if index == state.message_index:
                events += self._message_done(state)
            elif item.get("status") == "in_progress":  # a call cut short: its arguments are not valid, nothing runs it
                events += self.output_done(state, index, {**item, "status": "incomplete"})
        usage = e.usage(msg.input_tokens, msg.output_tokens, msg.cached_tokens)
        events.append(server_event("response.done", response=state.as_object(list(state.output), usage)))
        return state, events

    def _message_done(self, state: ResponseState) -> list[Event]:
        """The end of the response's assistant message: its text or audio, its part, the item."""
        part = e.content_part(state.modalities, state.text)
        status = "completed" if state.status == "completed" else "incomplete"
        item = e.message_item(state.item_id, "assistant", status, [part])
        ids = _content_ids(state)
        if "audio" in state.modalities:
            events = [
                server_event("response.output_audio.done", **ids),
                server_event("response.output_audio_transcript.done", **ids, transcript=state.text),
            ]
        else:
            events = [server_event("response.output_text.done", **ids, text=state.text)]
        events.append(server_event("response.content_part.done", **ids, part=e.event_part(part)))
        return events + self.output_done(state, state.message_index or 0, item)


def _content_ids(state: ResponseState) -> Event:
    """Where an event about the assistant message's one content part points."""
    return {"response_id": state.id, "item_id": state.item_id, "output_index": state.message_index, "content_index": 0}
