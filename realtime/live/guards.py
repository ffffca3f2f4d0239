"""A live session's limits at work: the events-per-second bucket, the input buffer, the session's length and
idle time, the turn's idle timeout, and the output tokens a response may reserve (``realtime.protocol.limits``
holds the rules; this mixin of :class:`realtime.live.core.SessionCore` applies them)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from django.conf import settings

from pipelines import audio, messages as m
from pipelines.pool import Lease
from realtime.audit.records import SessionRecorder
from realtime.live.transport import Event
from realtime.models import EndReason
from realtime.protocol import limits
from realtime.protocol.client_events import ClientEvent, InputAudioAppend
from realtime.protocol.close_codes import CLOSE_POLICY
from realtime.protocol.conversation import Conversation
from realtime.protocol.events import error_event, server_event
from realtime.protocol.items import Caps
from realtime.protocol.limits import InputBuffer, Limits, TokenBucket
from realtime.protocol.session.config import SessionConfig
from realtime.protocol.wire import EventError

logger = logging.getLogger(__name__)


def session_limits() -> limits.Limits:
    """The per-session limits the settings set (``realtime.protocol.limits`` reads no settings)."""
    return limits.Limits(
        max_frame_bytes=limits.max_frame_bytes(settings.S2S_MAX_EVENT_BYTES),
        events_per_second=float(settings.S2S_MAX_EVENTS_PER_SECOND),
        burst=settings.S2S_EVENTS_BURST,
        max_input_buffer_ms=settings.S2S_MAX_INPUT_BUFFER_SECONDS * 1000,
        max_session_s=float(settings.S2S_MAX_SESSION_SECONDS),
        idle_timeout_s=float(settings.S2S_IDLE_TIMEOUT_S),
        conversation=Caps(
            max_items=settings.S2S_MAX_ITEMS,
            max_item_bytes=settings.S2S_MAX_ITEM_BYTES,
            max_total_bytes=settings.S2S_MAX_CONVERSATION_BYTES,
            max_audio_bytes=settings.S2S_MAX_CONVERSATION_AUDIO_BYTES,
        ),
        max_instructions_bytes=settings.S2S_MAX_INSTRUCTIONS_BYTES,
    )


class SessionGuards:
    """The limit-keeping part of :class:`realtime.live.core.SessionCore`, which sets these attributes."""

    id: str
    ended: bool
    lease: Lease | None
    limits: Limits
    session: SessionConfig
    conversation: Conversation
    recorder: SessionRecorder
    bucket: TokenBucket
    input_buffer: InputBuffer
    _active_at: float
    _rate_reported_at: float
    _session_started: float
    _turn_timeout: asyncio.Task[None] | None
    _turn_timeout_due: float | None
    _response_deadline: asyncio.Task[None] | None = None  # the timer of the oldest pending response's start
    _response_due: float | None = None

    if TYPE_CHECKING:

        async def send(self, event: Event) -> None: ...  # realtime.live.core

        def taken_over(self) -> bool: ...  # realtime.live.supervision: a supervisor holds the call

        async def end(
            self, reason: str, close_code: int | None, error: EventError | None = None, close_reason: str = ""
        ) -> None: ...

    def note_activity(self) -> None:
        """The client or the unit did something now: the idle limit counts from here."""
        self._active_at = time.monotonic()

    async def admit_event(self) -> bool:
        """Takes a client event from the events-per-second bucket. False: the event is dropped, and reported at
        most once a second, so a flood cannot make the server flood back."""
        if self.bucket.take():
            return True
        self.conversation.errors += 1
        now = time.monotonic()
        if self.bucket.dropped == 1 or now - self._rate_reported_at >= 1.0:
            self._rate_reported_at = now
            exc = limits.rate_limited(self.bucket)
            await self.send(error_event(exc.code, exc.message, exc.param, None, exc.error_type))
        return False

    def _server_vad(self) -> bool:
        return self.session.turn_detection is not None

    def check_input_buffer(self, event: ClientEvent) -> int:
        """The ms an append adds to the input buffer; raises ``input_audio_buffer_full`` past the limit."""
        if not isinstance(event, InputAudioAppend):
            return 0
        ms = audio.duration_ms(len(event.audio), self.session.input_format)
        self.input_buffer.check(ms, self._server_vad())
        return ms

    async def admit_track_audio(self, ms: int) -> bool:
        """Whether ``ms`` of a media track's audio fits in the input buffer. False: it does not, reported at most
        once a second (the track keeps coming)."""
        try:
            self.input_buffer.check(ms, self._server_vad())
        except EventError as exc:
            now = time.monotonic()
            if now - self._rate_reported_at >= 1.0:
                self._rate_reported_at = now
                self.conversation.errors += 1
                await self.send(error_event(exc.code, exc.message, None, None, exc.error_type))
            return False
        return True

    def add_input_audio(self, ms: int) -> None:
        """Counts ``ms`` of audio the client sent into the input buffer (with server VAD, only a spoken turn)."""
        self.input_buffer.add(ms, self._server_vad())

    def track_input_buffer(self, out: m.Outbound) -> None:
        """Follows the pipeline's turn: speech started, or the buffer committed or cleared."""
        if isinstance(out, m.SpeechStarted):
            self.input_buffer.speech_started()
        elif isinstance(out, (m.AudioCommitted, m.AudioCleared)):
            self.input_buffer.emptied()

    async def watch_limits(self) -> None:
        """Sleeps until the session's length or idle limit is due; ends the session when one is reached."""
        while True:
            now = time.monotonic()
            ends_at = self._session_started + self.limits.max_session_s
            if now >= ends_at:
                await self._end_by_limit(limits.expired(self.limits))
                return
            if self.limits.idle_timeout_s:
                idle_at = self._active_at + self.limits.idle_timeout_s
                if now >= idle_at:
                    await self._end_by_limit(limits.idle(self.limits))
                    return
                ends_at = min(ends_at, idle_at)
            await asyncio.sleep(ends_at - now)

    async def _end_by_limit(self, exc: EventError) -> None:
        logger.info("session %s: %s", self.id, exc.code)
        await self.end(EndReason.SERVER_CLOSED, CLOSE_POLICY, exc, exc.code)

    def schedule_timers(self) -> None:
        """Keeps the session's timers following its state: the turn's idle timeout, the responses' start."""
        self._schedule_turn_timeout()
        self._schedule_response_deadline()

    def timer_tasks(self) -> list[asyncio.Task[None] | None]:
        """The timers running now, for the session's end to cancel."""
        return [self._turn_timeout, self._response_deadline]

    def _schedule_response_deadline(self) -> None:
        """Keeps one timer for the oldest pending response's start (``S2S_RESPONSE_START_TIMEOUT_S``)."""
        within = settings.S2S_RESPONSE_START_TIMEOUT_S
        due = self.conversation.responses.first_due(within) if within else None
        if due == self._response_due:
            return
        self._response_due = due
        if self._response_deadline is not None:
            self._response_deadline.cancel()
        self._response_deadline = asyncio.create_task(self._fire_response_deadline(due)) if due is not None else None

    async def _fire_response_deadline(self, due: float) -> None:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        if self.ended or self._response_due != due:
            return
        self._response_due, self._response_deadline = None, None
        within = settings.S2S_RESPONSE_START_TIMEOUT_S
        for response_id in self.conversation.responses.overdue(time.monotonic(), within - 0.001):
            logger.warning("session %s: response %s did not start within %s s; failed", self.id, response_id, within)
            record = self.recorder.output  # its failure is in the record (the admin's answers), as any response's
            for event in self.conversation.start_timed_out(response_id, within, record):
                await self.send(event)
        self._schedule_response_deadline()

    def _schedule_turn_timeout(self) -> None:
        """Keeps one timer for ``turn_detection.idle_timeout_ms``, following the conversation's due time."""
        due = self.conversation.idle_due
        if due == self._turn_timeout_due:
            return
        self._turn_timeout_due = due
        if self._turn_timeout is not None:
            self._turn_timeout.cancel()
        self._turn_timeout = asyncio.create_task(self._fire_turn_timeout(due)) if due is not None else None

    async def _fire_turn_timeout(self, due: float) -> None:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        if self.ended or self.conversation.idle_due != due or self.taken_over():  # no prompt from a silent agent
            return
        self._turn_timeout_due = None
        self._turn_timeout = None
        for event in self.conversation.idle_timeout():
            await self.send(event)

    def rate_limits_updated(self, max_output_tokens: int | str) -> Event:
        """``rate_limits.updated`` at a response's start: its output tokens are reserved until it is done."""
        cap = self.token_cap()
        reserved = cap if max_output_tokens == "inf" else min(cap, int(max_output_tokens))
        return server_event("rate_limits.updated", rate_limits=limits.rate_limits(self.bucket, cap, reserved))

    def token_cap(self) -> int:
        """The most output tokens the unit's language model stage lets one response produce."""
        stages = self.lease.unit.stages() if self.lease is not None else []
        caps = [cap for stage in stages if isinstance(cap := getattr(stage, "max_new_tokens", None), int)]
        return caps[0] if caps else settings.S2S_POOL.engines.lm_max_new_tokens

    def context_tokens(self) -> int | None:
        """The context of the unit's language model (None: not known here)."""
        stages = self.lease.unit.stages() if self.lease is not None else []
        sizes = [getattr(getattr(stage, "model", None), "context_length", None) for stage in stages]
        return next((size for size in sizes if isinstance(size, int)), None)
