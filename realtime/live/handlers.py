"""What each client event does to a live session: one ``on_`` method per event class of
``realtime.protocol.client_events``, named by its ``handler``. Each returns the events that answer it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipelines.config import FunctionTool, SessionSettings
from pipelines.pool import Lease
from realtime.live.opening import Opening
from realtime.live.transport import ClearedReply, Event, PlaysAudio
from realtime.protocol import client_events as ce
from realtime.protocol.conversation import Conversation
from realtime.protocol.events import server_event
from realtime.protocol.mcp.session import McpSession
from realtime.protocol.session import render
from realtime.protocol.session.config import ResponseOptions, SessionConfig
from realtime.protocol.wire import EventError

logger = logging.getLogger(__name__)


class ClientEventHandlers:
    """The handlers of :class:`realtime.live.core.SessionCore`, which sets these attributes."""

    id: str
    opening: Opening
    session: SessionConfig
    conversation: Conversation
    mcp: McpSession
    lease: Lease | None
    player: PlaysAudio | None

    if TYPE_CHECKING:
        # realtime.live.supervision: quiet while taken over, the supervisors' whispers read after the instructions
        def pipeline_settings(self) -> SessionSettings: ...

        def steered(self, options: ResponseOptions) -> ResponseOptions: ...

        def held_back(self, events: list[Event]) -> list[Event]: ...

    def handle(self, event: ce.ClientEvent) -> list[Event]:
        """Carries out one parsed client event; returns the events that answer it."""
        handler: Callable[[ce.ClientEvent], list[Event]] = getattr(self, event.handler)
        return handler(event)

    def on_session_update(self, event: ce.SessionUpdate) -> list[Event]:
        before = self._prompt_start()
        self.session.update(event.session, beta=self.opening.beta, prompts=event.prompts)
        self.apply_settings()
        if not self.session.transcription_only and self._prompt_start() != before:
            self.conversation.read_ahead()  # new instructions are read now, not when the next turn ends
        return [server_event("session.updated", session=self.rendered_session()), *self.mcp.servers_changed()]

    def on_transcription_session_update(self, event: ce.TranscriptionSessionUpdate) -> list[Event]:
        """The beta way to make this a transcription session (GA clients say ``session.type: "transcription"``)."""
        if not self.opening.beta:
            raise EventError(
                "invalid_value",
                "transcription_session.update is a beta event: GA clients send "
                "session.update with session.type 'transcription'.",
                "type",
            )
        if self.session.audio_produced:
            raise EventError(
                "invalid_value", "Cannot make a session that has produced audio a transcription session.", "type"
            )
        self.session.update(event.session, beta=True, transcription=True)
        self.apply_settings()
        return [server_event("transcription_session.updated", session=render.as_beta_transcription(self.session))]

    def _prompt_start(self) -> tuple[str, tuple[FunctionTool, ...]]:
        """What every answer's prompt starts with: the instructions and the tools."""
        settings = self.session.settings()
        return settings.instructions, settings.tools

    def apply_settings(self) -> None:
        """Gives the unit the session's settings as the pipeline is to use them now (its next turn reads them)."""
        if self.lease is not None:
            self.lease.unit.context.settings = self.pipeline_settings()

    def on_output_audio_clear(self, event: ce.OutputAudioClear) -> list[Event]:
        if self.player is not None:
            return self.cleared_events(self.player.clear_reply())
        raise EventError(
            "invalid_value",
            "output_audio_buffer.clear is only supported for WebRTC and SIP connections; "
            "over WebSocket the client owns playback (use conversation.item.truncate).",
            "type",
        )

    def cleared_events(self, cleared: ClearedReply) -> list[Event]:
        """``output_audio_buffer.cleared`` (said even when nothing played, about the latest reply, as the API's
        type has it), and the reply's item truncated to what was played, as the server knows it."""
        events = [server_event("output_audio_buffer.cleared", response_id=cleared.response_id)]
        if cleared.item_id is not None:
            try:
                events += self.conversation.truncate_item(cleared.item_id, 0, cleared.played_ms)
            except EventError as exc:  # e.g. an out-of-band response: nothing to truncate
                logger.debug("session %s: no truncation of %s: %s", self.id, cleared.item_id, exc.message)
        return events

    def rendered_session(self) -> Event:
        """The session as ``session.created`` and ``session.updated`` show it, in the client's protocol."""
        if self.opening.beta:
            return (
                render.as_beta_transcription(self.session)
                if self.session.transcription_only
                else render.as_beta(self.session)
            )
        return render.as_ga(self.session)

    def on_input_audio_append(self, event: ce.InputAudioAppend) -> list[Event]:
        return self.conversation.append_audio(event.audio)

    def on_input_audio_commit(self, event: ce.InputAudioCommit) -> list[Event]:
        return self.conversation.commit_audio(event.event_id)

    def on_input_audio_clear(self, event: ce.InputAudioClear) -> list[Event]:
        return self.conversation.clear_audio()

    def on_item_create(self, event: ce.ItemCreate) -> list[Event]:
        return self.conversation.create_item(event.item, event.previous_item_id)

    def on_item_retrieve(self, event: ce.ItemRetrieve) -> list[Event]:
        return self.conversation.retrieve_item(event.item_id)

    def on_item_delete(self, event: ce.ItemDelete) -> list[Event]:
        return self.conversation.delete_item(event.item_id)

    def on_item_truncate(self, event: ce.ItemTruncate) -> list[Event]:
        return self.conversation.truncate_item(event.item_id, event.content_index, event.audio_end_ms)

    def on_response_create(self, event: ce.ResponseCreate) -> list[Event]:
        options = self.session.response_options(event.response, self.opening.beta, event.prompts)
        return self.held_back(self.conversation.create_response(self.steered(options), event.event_id))

    def on_response_cancel(self, event: ce.ResponseCancel) -> list[Event]:
        return self.conversation.cancel_response(event.response_id)
