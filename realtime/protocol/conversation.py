"""The conversation of one Realtime session, as the client sees it.

The session core hands client requests and pipeline output here; this says which server
events to send and which messages to pass to the pipeline. The items live in ``items``
(under the session's caps), the responses in ``responses`` (their lifecycle); this module
joins them: the input audio and its transcripts, the client's item requests, and the one
table (:meth:`Conversation.on_output`) that routes each pipeline message to its handler.
It knows nothing of sockets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pipelines import audio, messages as m
from pipelines.ids import new_id
from realtime.protocol import events as e
from realtime.protocol.client_items import ClientItem
from realtime.protocol.clips import Clips
from realtime.protocol.events import server_event
from realtime.protocol.items import Caps, Items, history_item, text_bytes
from realtime.protocol.responses import Port, Responses, ResponseState
from realtime.protocol.session.config import ResponseOptions, SessionConfig
from realtime.protocol.wire import EventError, encode_audio

Event = dict[str, Any]

RESPONSE_TIMEOUT = "response_timeout"  # the code of a response that did not start in time (the server's fault)

IDLE_PROMPT = (
    "The user has been silent for a while. In one short sentence, "
    "check whether they are still there or continue the conversation."
)


class Conversation:
    """One session's conversation: its ``items``, its ``responses``, the input audio and what it counts."""

    def __init__(self, session: SessionConfig, port: Port, caps: Caps | None = None) -> None:
        self.session = session
        self.port = port
        self.id = new_id("conv")
        self.items = Items(caps or Caps())
        self.responses = Responses(session, self.items, port, self.id)
        self.turns = 0
        self.errors = 0
        self.audio_in_seconds = 0.0
        self._committed_ms: dict[str, int] = {}  # audio length of committed turns awaiting their transcript
        self.clips = Clips()  # responses waiting for the transcripts of their inline input audio
        # turn_detection.idle_timeout_ms: when (time.monotonic) to prompt a silent user, if nothing happens first
        self.idle_due: float | None = None

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

    def read_ahead(self) -> None:
        """The next answer's prompt changed outside a turn (new instructions or tools): the LM reads it now."""
        self.port.submit(m.ReadAhead(generation=self.port.generation))

    def clear_audio(self) -> list[Event]:
        self.port.submit(m.ClearAudio(generation=self.port.generation))
        return []

    def create_item(self, item: ClientItem, previous: str | None) -> list[Event]:
        self.idle_due = None
        if previous not in (None, m.ROOT):
            self.items.find(previous, "previous_item_id")
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
        size = self.items.check_size(item, "item")
        self.items.check_room(size)
        declined = None
        if item.type == "mcp_approval_response":
            request = self.responses.answer_approval(item.approval_request_id, item.approve)
            declined = None if item.approve else request
        stored = e.stored_item(item, item.id or new_id("item"))
        self.items.put(stored, previous)
        self.items.account(stored["id"], size)
        if declined is not None:
            reason = f" ({item.reason})" if item.reason else ""
            text = f"The user declined to run {declined.tool.name}{reason}. Answer without it."
            self._add_history(m.FunctionCallOutputItem(stored["id"], declined.call_id, text), previous)
        if (history := history_item(stored["id"], item)) is not None:
            self._add_history(history, previous)
        if item.audio is not None:
            self.items.keep_audio(stored["id"], item.audio, self.session.input_format)
            self._committed_ms[stored["id"]] = audio.duration_ms(len(item.audio), self.session.input_format)
            self._transcribe(stored["id"], item.audio)
        return self._item_added(stored)

    def _add_history(self, entry: m.HistoryEntry, previous: str | None) -> None:
        self.port.submit(m.AddItem(generation=self.port.generation, item=entry, previous_item_id=previous))

    def _transcribe(self, item_id: str, data: bytes) -> None:
        """Audio given in an item (or a response's input) goes through the unit's VAD and STT as ``item_id``."""
        self.port.submit(
            m.AudioItem(
                generation=self.port.generation, item_id=item_id, data=data, audio_format=self.session.input_format
            )
        )

    def retrieve_item(self, item_id: str) -> list[Event]:
        """The item; a user audio item with its audio (base64, in the session's input format) while it is kept."""
        item = self.items.find(item_id)
        if (kept := self.items.audio_of(item_id)) is not None:
            data, fmt = kept
            wanted = self.session.input_format
            if fmt is None:
                data = audio.from_pipeline(data, wanted)
            elif fmt != wanted:
                data = audio.encode(
                    audio.resample(audio.decode(data, fmt), audio.RATES[fmt], audio.RATES[wanted]), wanted
                )
            item = {
                **item,
                "content": [
                    {**part, "audio": encode_audio(data)} if part.get("type") == "input_audio" else part
                    for part in item["content"]
                ],
            }
        return [server_event("conversation.item.retrieved", item=item)]

    def delete_item(self, item_id: str) -> list[Event]:
        self.items.find(item_id)
        self.items.remove(item_id)
        self.port.submit(m.DeleteItem(generation=self.port.generation, item_id=item_id))
        return [server_event("conversation.item.deleted", item_id=item_id)]

    def truncate_item(self, item_id: str, content_index: int, audio_end_ms: int) -> list[Event]:
        """Cuts a spoken reply to what the user heard: any assistant audio item still in the conversation."""
        item = self.items.find(item_id)
        speech = self.items.speech_of(item_id)
        if item.get("role") != "assistant" or speech is None:
            raise EventError("invalid_value", "Only assistant messages with audio can be truncated.", "item_id")
        if content_index != 0:
            raise EventError(
                "invalid_value", "Invalid 'content_index': the item has one content part (0).", "content_index"
            )
        if audio_end_ms < 0 or audio_end_ms > speech.audio_ms:
            raise EventError(
                "invalid_value",
                f"Audio content of {speech.audio_ms}ms is shorter than {audio_end_ms}ms.",
                "audio_end_ms",
            )
        heard = speech.heard(audio_end_ms)
        for part in item.get("content", []):
            if part.get("type") == "output_audio":
                part["transcript"] = heard
        self.items.account(item_id, text_bytes(heard))
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
        self.responses.check_free(options.out_of_band)
        overrides = dict(options.overrides)
        clips: dict[str, bytes] = {}
        if options.input is not None:
            overrides["extra_input"], clips = self.items.response_input(options.input)
        if clips and options.mcp_servers:
            raise EventError(
                "invalid_value",
                "A response with its own MCP servers cannot also have input audio: "
                "offer the servers in session.update, or give the input as text.",
                "response.tools",
            )
        req = self.responses.ask(options, overrides, event_id)
        if options.mcp_servers and self.responses.list_tools is not None:  # their tools first: see Responses.release
            return self.responses.hold(req, options.mcp_servers)
        if clips:
            self.clips.hold(req, clips)
            for clip_id, data in clips.items():
                self._transcribe(clip_id, data)
        else:
            self.port.submit(req)
        return []

    def start_timed_out(
        self, response_id: str, within_s: float, record: Callable[[m.Outbound, Conversation], None] | None = None
    ) -> list[Event]:
        """A response that did not start within ``within_s`` (something held the pipeline up): the pipeline is
        told to drop it, and it fails as a response does (``error`` with the client's event id, then
        ``response.created`` and ``response.done`` with status ``failed``, code ``response_timeout``), so that a
        client waiting for it hears why; the session goes on. ``record`` is given each of those outputs, as the
        session's recorder is given the pipeline's."""
        if response_id not in self.responses.pending:
            return []
        self.port.cancel(response_id, "response_timeout")
        started = m.ResponseStarted(
            generation=self.port.generation,
            response_id=response_id,
            item_id=new_id("item"),
            output_modalities=tuple(self.session.output_modalities),
            output_format=self.session.output_format,
            voice=self.session.voice,
            out_of_band=self.responses.pending[response_id].out_of_band,
        )
        failed = m.ResponseFinished(
            generation=self.port.generation,
            response_id=response_id,
            status="failed",
            reason=f"it did not start within {within_s:g} s: the server is overloaded or a stage is stuck",
            error_code=RESPONSE_TIMEOUT,
        )
        events = []
        for out in (started, failed):
            events += self.on_output(out)
            if record is not None:
                record(out, self)
        self.responses.given_up.append(response_id)
        return events

    def cancel_response(self, wanted: str | None) -> list[Event]:
        self.responses.cancel(wanted)
        return []

    # --- items the server adds on its own ---------------------------------------------------

    def add_item(self, item: Event) -> list[Event]:
        """An item the server adds on its own (an ``mcp_list_tools``): last, ``conversation.item.added``."""
        self.items.put(item)
        return [server_event("conversation.item.added", previous_item_id=self.items.previous_of(item["id"]), item=item)]

    def item_done(self, item: Event) -> list[Event]:
        """That item, final: ``conversation.item.done`` (nothing if the client deleted it meanwhile)."""
        if item["id"] not in self.items:
            return []
        self.items.put(item)
        return [server_event("conversation.item.done", previous_item_id=self.items.previous_of(item["id"]), item=item)]

    def _item_added(self, item: Event) -> list[Event]:
        """``conversation.item.added`` and ``.done``, naming the item's real predecessor (None when it is first)."""
        previous = self.items.previous_of(item["id"])
        return [
            server_event("conversation.item.added", previous_item_id=previous, item=item),
            server_event("conversation.item.done", previous_item_id=previous, item=item),
        ]

    # --- pipeline output ----------------------------------------------------

    # Over the complexity limit only by its match: one case per pipeline message.
    def on_output(self, msg: m.Outbound) -> list[Event]:  # noqa: C901
        """The server events one pipeline message makes (none for those the client never sees)."""
        match msg:
            case m.SpeechStarted():
                return self._speech_started(msg)
            case m.SpeechStopped():
                return [
                    server_event(
                        "input_audio_buffer.speech_stopped", audio_end_ms=msg.audio_end_ms, item_id=msg.item_id
                    )
                ]
            case m.AudioCommitted():
                return self._audio_committed(msg)
            case m.AudioCleared():
                return [server_event("input_audio_buffer.cleared")]
            case m.TranscriptDelta():
                return self._transcript_delta(msg)
            case m.TranscriptCompleted():
                return self._transcript_completed(msg)
            case m.TranscriptFailed():
                return self._transcript_failed(msg)
            case m.ResponseStarted():
                self.idle_due = None
                return self.responses.started(msg)
            case m.TextDelta():
                return self.responses.text(msg)
            case m.SpokenText():
                return self.responses.spoken_text(msg)
            case m.AudioOut():
                return self.responses.audio(msg)
            case m.FunctionCallStarted():
                return self.responses.call_started(msg)
            case m.FunctionCallArgumentsDelta():
                return self.responses.call_arguments(msg)
            case m.FunctionCallDone():
                return self.responses.call_done(msg)
            case m.ResponseFinished():
                return self._response_finished(msg)
            case m.PipelineError():
                return self._pipeline_error(msg)
            case _:  # ToolsPending (the MCP side runs the calls), turn confirmations, UnitFailed (the core ends)
                return []

    def _speech_started(self, msg: m.SpeechStarted) -> list[Event]:
        self.idle_due = None
        if (self.session.turn_detection or {}).get("interrupt_response", True):
            self.responses.interrupt()
        return [
            server_event("input_audio_buffer.speech_started", audio_start_ms=msg.audio_start_ms, item_id=msg.item_id)
        ]

    def _audio_committed(self, msg: m.AudioCommitted) -> list[Event]:
        self._committed_ms[msg.item_id] = msg.duration_ms
        self.items.keep_audio(msg.item_id, msg.samples, None)
        previous = self.items.last_id()
        item = e.user_audio_item(msg.item_id, None)
        self.items.put(item)
        return [
            server_event("input_audio_buffer.committed", previous_item_id=previous, item_id=msg.item_id),
            *self._item_added(item),
        ]

    def _transcribing(self) -> bool:
        return self.session.transcription is not None or self.session.transcription_only

    def _logprobs(self, words: m.WordLogprobs | None) -> Event:
        """``logprobs`` when the session's ``include`` asks for them."""
        return {"logprobs": e.logprobs(words)} if self.session.logprobs and words is not None else {}

    def _transcript_delta(self, msg: m.TranscriptDelta) -> list[Event]:
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

    def _transcript_completed(self, msg: m.TranscriptCompleted) -> list[Event]:
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
            self.items.account(msg.item_id, text_bytes(msg.transcript))
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

    def _transcript_failed(self, msg: m.TranscriptFailed) -> list[Event]:
        self.errors += 1
        if self.clips.owns(msg.item_id):
            response_id = self.clips.give_up(msg.item_id)
            if response_id is None:
                return []
            state = self.responses.drop(response_id)
            return [
                e.error_event(
                    "input_audio_transcription_failed",
                    f"The response was not started: its input audio could not be transcribed ({msg.message}).",
                    "response.input",
                    state.event_id if state is not None else None,
                )
            ]
        error = {"type": "transcription_error", "code": "transcription_failed", "message": msg.message, "param": None}
        return [
            server_event(
                "conversation.item.input_audio_transcription.failed", item_id=msg.item_id, content_index=0, error=error
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
            if isinstance(item, m.HistoryItem) and item.item_id in transcripts  # a clip is a user message
            else item
            for item in req.extra_input or ()
        )
        self.port.submit(replace(req, extra_input=context))

    def _response_finished(self, msg: m.ResponseFinished) -> list[Event]:
        state, events = self.responses.finish(msg)
        if state is not None:
            if state.status == "failed":
                self.errors += 1
            self._arm_idle_timeout(state)
        return events

    def _pipeline_error(self, msg: m.PipelineError) -> list[Event]:
        self.errors += 1
        error_type = "invalid_request_error" if msg.code.startswith("input_audio_buffer") else "server_error"
        return [e.error_event(msg.code, msg.message, None, msg.event_id, error_type)]

    # --- the idle prompt ------------------------------------------------------------------

    def _arm_idle_timeout(self, state: ResponseState) -> None:
        """Counts ``idle_timeout_ms`` from when the response's audio has finished playing."""
        timeout_ms = (self.session.turn_detection or {}).get("idle_timeout_ms")
        if not timeout_ms or state.out_of_band or state.status != "completed":
            return
        self.idle_due = time.monotonic() + (state.audio_ms + timeout_ms) / 1000

    def idle_timeout(self) -> list[Event]:
        """The user stayed silent past ``idle_timeout_ms``: say so and prompt them with a response."""
        self.idle_due = None
        heard_ms = int(self.audio_in_seconds * 1000)
        timeout_ms = (self.session.turn_detection or {}).get("idle_timeout_ms") or 0
        settings = self.session.settings()
        req = m.ResponseRequest.from_settings(
            settings, self.port.generation, instructions=f"{settings.instructions}\n{IDLE_PROMPT}".strip()
        )
        self.responses.expect(req)
        # As the API does: the silent stretch is committed as an (empty) user audio item, then answered.
        item_id = new_id("item")
        previous = self.items.last_id()
        item = e.user_audio_item(item_id, "")
        self.items.put(item)
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


__all__ = ["Conversation", "Port"]  # Port: the session core builds one when it claims a unit
