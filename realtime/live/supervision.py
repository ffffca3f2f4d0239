"""Supervisors of a live session (issue 51): listen, whisper, take over, hand back, on every transport.

A supervisor comes on ``/v1/realtime?call_id=ID&mode=supervise`` (ID a session's or a call's id), allowed by
:meth:`realtime.access.owner.Owner.supervises`. It is a follower (:mod:`realtime.live.followers`: the session's
events, closed with its key's revocation and with the session) that also gets the agent's audio, the caller's
audio (``supervisor.input_audio.delta``) and the supervisors' own events (``supervisor.state``,
``supervisor.whisper.added``), and may send only ``supervisor.*`` events
(:mod:`realtime.protocol.supervisor_events`):

- a whisper joins the instructions the LM reads (after the session's own, in the pipeline's settings alone), never
  the caller's conversation nor the session the caller sees: no event carries it to the caller or an ordinary
  follower, and it is never spoken;
- a take-over cuts the answer in progress (as barge-in does), and the pipeline settings say ``create_response``
  off until the hand-back, so the caller's turns are still transcribed into the conversation, unanswered; the
  supervisor's voice goes to the caller as responses (:mod:`realtime.live.supervisor_speech`);
- a supervise connection that leaves while it holds the take-over hands back by itself.

Each listen, whisper, take-over and hand-back is recorded (``SupervisorAction``) off the audio path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from pipelines import audio, messages as m
from pipelines.config import SessionSettings
from pipelines.ids import new_id
from pipelines.stages.stt import SttStage
from realtime.access.owner import Caller
from realtime.audit import records
from realtime.live.followers import FOLLOWER_SKIPS, Followers
from realtime.live.supervisor_speech import SupervisorSpeech
from realtime.live.transport import Event, ServerEvent, Transport
from realtime.models import SupervisorActionKind as Kind
from realtime.protocol import limits, supervisor_events as se
from realtime.protocol.client_events import ClientEvent, InputAudioAppend
from realtime.protocol.events import error_event, server_event
from realtime.protocol.wire import EventError, encode_audio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from pipelines.pool import Lease
    from realtime.live.transport import ClearedReply, PlaysAudio
    from realtime.node.runtime import Runtime
    from realtime.protocol.conversation import Conversation
    from realtime.protocol.session.config import ResponseOptions, SessionConfig

logger = logging.getLogger(__name__)

# How whispers read to the agent: instructions after the session's own, which the caller does not hear.
WHISPER_NOTES = "A supervisor's notes, which the caller does not hear. Follow them from your next answer on:"
MAX_WHISPERS = 10  # the latest ones are kept


@dataclass(eq=False)
class Seat:
    """One supervisor on the session: who, since when (its listen record's key), its own event budget."""

    transport: Transport
    caller: Caller
    bucket: limits.TokenBucket
    since: datetime = field(default_factory=timezone.now)

    @property
    def actor(self) -> str:
        return self.caller.name or "anonymous"


@dataclass
class Desk:
    """The supervision state of one session: its supervisors, who holds a take-over since when, and the
    take-over's voice."""

    seats: dict[Transport, Seat] = field(default_factory=dict)
    holder: Seat | None = None
    taken_at: datetime | None = None
    speech: SupervisorSpeech | None = None
    whispers: list[str] = field(default_factory=list)
    remote: dict[str, Transport] = field(default_factory=dict)  # seated from other nodes (remote_supervision)


def noted(instructions: str, whispers: list[str]) -> str:
    """Instructions with the supervisors' whispers read after them."""
    notes = "\n".join([WHISPER_NOTES, *(f"- {text}" for text in whispers)])
    return f"{instructions}\n\n{notes}".strip()


def quiet(settings_: SessionSettings) -> SessionSettings:
    """The pipeline's settings while a supervisor holds the call: turns are transcribed, none is answered."""
    detection = replace(settings_.turn_detection, create_response=False, idle_timeout_ms=None)
    return replace(settings_, turn_detection=detection)


def as_pcm(data: bytes, audio_format: str) -> bytes:
    """Audio of a Realtime format as PCM16 at 24 kHz (what supervisors get, whatever the session speaks)."""
    if audio_format == audio.PCM:
        return data
    samples = audio.resample(audio.decode(data, audio_format), audio.RATES[audio_format], audio.RATES[audio.PCM])
    return audio.encode(samples, audio.PCM)


class Supervision(Followers):
    """The supervisors of :class:`realtime.live.core.SessionCore`, which sets these attributes."""

    desk: Desk
    runtime: Runtime
    session: SessionConfig
    conversation: Conversation
    recorder: records.SessionRecorder
    lease: Lease | None
    player: PlaysAudio | None
    limits: limits.Limits
    ended: bool

    if TYPE_CHECKING:

        async def send(self, event: Event) -> None: ...  # realtime.live.core

        def cleared_events(self, cleared: ClearedReply) -> list[Event]: ...

        def apply_settings(self) -> None: ...

        def spawn(self, coro: Any, name: str) -> None: ...  # realtime.live.core

    # --- seats ----------------------------------------------------------------------------

    async def supervise(self, transport: Transport, caller: Caller) -> None:
        """Seats a supervisor (already allowed by the owner rule): it follows the session and is recorded as
        listening until it leaves."""
        seat = Seat(transport, caller, limits.TokenBucket(self.limits.events_per_second, self.limits.burst))
        self.desk.seats[transport] = seat
        await self.follow(transport, caller)
        records.supervisor_action(self.runtime.writer, self.id, Kind.LISTEN, seat.actor, seat.since)

    def unfollow(self, follower: Transport) -> None:
        """A follower leaves (or its key was revoked); a supervisor's listen ends, and its take-over, if it
        holds one, is handed back."""
        super().unfollow(follower)
        seat = self.desk.seats.pop(follower, None)
        if seat is None:
            return
        records.supervisor_action_ended(self.runtime.writer, self.id, Kind.LISTEN, seat.actor, seat.since)
        if self.desk.holder is seat:
            if self.ended:
                self._release(seat)
            else:
                self.spawn(self._hand_back(seat), "hand-back")

    def supervisor_state(self) -> ServerEvent:
        holder = self.desk.holder
        state = se.LISTENING if holder is None else se.TAKEN_OVER
        return ServerEvent.of(server_event(se.STATE, state=state, by=holder.actor if holder is not None else ""))

    async def tell_supervisors(self, event: ServerEvent | Event) -> None:
        """Sends an event to the supervisors only."""
        out = event if isinstance(event, ServerEvent) else ServerEvent.of(event)
        for seat in list(self.desk.seats.values()):
            try:
                await seat.transport.send_event(out)
            except Exception:  # a supervisor that went away must not stop the session
                logger.debug("session %s: a supervisor could not be sent %s", self.id, out.type)

    async def tell_followers(self, event: ServerEvent | Event) -> None:
        """The session's events: to followers and supervisors, the agent's audio to supervisors alone (as PCM16
        at 24 kHz whatever the session's output format)."""
        out = event if isinstance(event, ServerEvent) else ServerEvent.of(event)
        if out.type not in FOLLOWER_SKIPS:
            await super().tell_followers(out)
        elif self.desk.seats:
            if out.audio is not None and self.session.output_format != audio.PCM:
                out = replace(out, audio=replace(out.audio, data=as_pcm(out.audio.data, self.session.output_format)))
            await self.tell_supervisors(out)

    async def overhear(self, event: ClientEvent) -> None:
        """The caller's audio, as a client event brought it: to the supervisors."""
        if isinstance(event, InputAudioAppend):
            await self.overheard(event.audio, self.session.input_format)

    async def overheard(self, data: bytes, audio_format: str) -> None:
        """The caller's audio (``audio_format``), as it arrives: ``supervisor.input_audio.delta`` to the
        supervisors."""
        if self.desk.seats and data:
            pcm = as_pcm(data, audio_format)
            await self.tell_supervisors(server_event(se.INPUT_AUDIO_DELTA, delta=encode_audio(pcm)))

    def pipeline_settings(self) -> SessionSettings:
        """What the unit's stages work with: the session's settings, made quiet while taken over."""
        current = self.session.settings()
        if self.desk.whispers:
            current = replace(current, instructions=noted(current.instructions, self.desk.whispers))
        return quiet(current) if self.desk.holder is not None else current

    def steered(self, options: ResponseOptions) -> ResponseOptions:
        """A client's ``response.create``, its instructions (its own or the session's) with the whispers after."""
        if not self.desk.whispers:
            return options
        instructions = options.overrides.get("instructions", self.session.settings().instructions)
        overrides = {**options.overrides, "instructions": noted(instructions, self.desk.whispers)}
        return replace(options, overrides=overrides)

    async def say_notice(self) -> None:
        """``S2S_SUPERVISOR_NOTICE``, said by the agent as the session starts (the unit's TTS speaks it as a
        response of its own), and kept as the assistant's words in the conversation."""
        notice = settings.S2S_SUPERVISOR_NOTICE
        current = self.session.settings()
        if (
            not notice
            or self.lease is None
            or self.session.transcription_only
            or "audio" not in current.output_modalities
        ):
            return
        port, response_id, item_id = self.conversation.port, new_id("resp"), new_id("item")
        await self._speak(
            m.ResponseStarted(
                generation=port.generation,
                response_id=response_id,
                item_id=item_id,
                output_modalities=("audio",),
                output_format=current.output_format,
                voice=current.voice,
                out_of_band=False,
            )
        )
        for message in (
            m.TextForSpeech(
                generation=port.generation,
                response_id=response_id,
                text=notice,
                voice=current.voice,
                output_format=current.output_format,
                speed=current.speed,
            ),
            m.ResponseEnd(generation=port.generation, response_id=response_id, status="completed"),
            m.AddItem(generation=port.generation, item=m.HistoryItem(item_id, "assistant", notice)),
        ):
            port.submit(message)

    def held_back(self, events: list[Event]) -> list[Event]:
        """A client's ``response.create`` while a supervisor holds the call: asked, then cancelled at once (its
        ``response.done`` says so), so that the agent stays silent."""
        if self.desk.holder is not None:
            responses = self.conversation.responses
            for response_id in list(responses.pending):
                with contextlib.suppress(EventError):
                    responses.cancel(response_id)
        return events

    def taken_over(self) -> bool:
        return self.desk.holder is not None

    # --- the supervisor's events ------------------------------------------------------------

    async def receive_supervisor(self, transport: Transport, text: str | None, size: int) -> None:
        """One frame of a supervise connection. Its errors go to that connection alone; the session goes on."""
        seat = self.desk.seats.get(transport)
        if seat is None or self.ended:
            return
        event: se.SupervisorEvent | None = None
        try:
            if not seat.bucket.take():
                raise limits.rate_limited(seat.bucket)
            limits.check_frame(size, self.limits)
            event = se.parse_supervisor_event(text, settings.S2S_MAX_EVENT_BYTES)
            await self.SUPERVISOR_HANDLERS[event.handler](self, seat, event)
        except EventError as exc:
            event_id = exc.event_id or (event.event_id if event is not None else None)
            await transport.send_event(
                ServerEvent.of(error_event(exc.code, exc.message, exc.param, event_id, exc.error_type))
            )
        except Exception:  # a bug in one event must not end the session
            logger.exception("session %s: could not handle a supervisor's event", self.id)
            event_id = event.event_id if event is not None else None
            await transport.send_event(
                ServerEvent.of(
                    error_event(
                        "server_error", "The server could not handle this event.", None, event_id, "server_error"
                    )
                )
            )

    async def on_supervisor_whisper(self, seat: Seat, event: se.Whisper) -> None:
        """The note joins the instructions the LM reads (never the caller's conversation, nor the session the
        caller sees): the agent follows it from its next answer on, read ahead now."""
        self.desk.whispers = [*self.desk.whispers, event.text][-MAX_WHISPERS:]
        self.apply_settings()
        self.conversation.read_ahead()
        now = timezone.now()
        records.supervisor_action(self.runtime.writer, self.id, Kind.WHISPER, seat.actor, now, event.text, now)
        await self.tell_supervisors(server_event(se.WHISPER_ADDED, item_id=new_id("item"), text=event.text))

    async def on_supervisor_take_over(self, seat: Seat, event: se.TakeOver) -> None:
        holder = self.desk.holder
        if holder is not None:
            who = "You have" if holder is seat else f"{holder.actor} has"
            raise EventError("invalid_value", f"{who} taken this session over already.", "type")
        self.desk.holder, self.desk.taken_at = seat, timezone.now()
        self.apply_settings()  # from now on the pipeline answers no turn
        await self._silence_the_agent()
        self.desk.speech = SupervisorSpeech(self._speak, self._transcribe, self._heard_supervisor, self.session)
        self.spawn(self.desk.speech.run(), "supervisor-speech")
        records.supervisor_action(self.runtime.writer, self.id, Kind.TAKE_OVER, seat.actor, self.desk.taken_at)
        await self.tell_supervisors(self.supervisor_state())

    async def on_supervisor_hand_back(self, seat: Seat, event: se.HandBack) -> None:
        if self.desk.holder is None:
            raise EventError("invalid_value", "The session is not taken over: there is nothing to hand back.", "type")
        await self._hand_back(seat)

    async def on_supervisor_audio_append(self, seat: Seat, event: se.AudioAppend) -> None:
        speech = self.desk.speech
        if self.desk.holder is not seat or speech is None:
            raise EventError(
                "invalid_value",
                "The session is not taken over by you: send supervisor.take_over before supervisor.audio.append.",
                "type",
            )
        speech.feed(event.audio)

    SUPERVISOR_HANDLERS: dict[str, Callable[[Any, Seat, Any], Awaitable[None]]] = {
        se.Whisper.handler: on_supervisor_whisper,
        se.TakeOver.handler: on_supervisor_take_over,
        se.HandBack.handler: on_supervisor_hand_back,
        se.AudioAppend.handler: on_supervisor_audio_append,
    }

    # --- taking over ------------------------------------------------------------------------

    async def _silence_the_agent(self) -> None:
        """Cuts every answer in progress or asked for, as barge-in does (a reply being played is stopped)."""
        responses = self.conversation.responses
        responses.interrupt()
        for response_id in [*responses.running, *responses.pending]:
            with contextlib.suppress(EventError):  # finished or cancelled already
                responses.cancel(response_id)
        if self.player is not None and self.player.playing is not None:
            for reply in self.cleared_events(self.player.clear_reply()):
                await self.send(reply)

    async def _hand_back(self, seat: Seat) -> None:
        """The agent answers again from the next turn; what the supervisor said so far is finished first."""
        holder, speech = self.desk.holder, self.desk.speech
        if holder is None:
            return
        self.desk.speech = None
        if speech is not None:
            await speech.finish()
        self._release(holder)
        now = timezone.now()
        records.supervisor_action(self.runtime.writer, self.id, Kind.HAND_BACK, seat.actor, now, ended_at=now)
        if not self.ended:
            self.apply_settings()
            await self.tell_supervisors(self.supervisor_state())

    def _release(self, holder: Seat) -> None:
        """The take-over ends (its record with it)."""
        taken_at = self.desk.taken_at or holder.since
        self.desk.holder = self.desk.taken_at = None
        records.supervisor_action_ended(self.runtime.writer, self.id, Kind.TAKE_OVER, holder.actor, taken_at)

    async def _speak(self, out: m.Outbound) -> None:
        """One message of the supervisor's voice, turned into the caller's events as the pipeline's are."""
        for event in self.conversation.on_output(out):
            await self.send(event)
        if isinstance(out, m.ResponseStarted):  # the caller talking over the supervisor does not cut it off
            responses = self.conversation.responses
            if responses.active is not None and responses.active.id == out.response_id:
                responses.active = None

    def _heard_supervisor(self, item_id: str, transcript: str, audio_ms: int) -> None:
        """What the supervisor said, as the assistant's: in the LM's conversation and the session's record."""
        port = self.conversation.port
        port.submit(m.AddItem(generation=port.generation, item=m.HistoryItem(item_id, "assistant", transcript)))
        self.recorder.item(item_id, "assistant", transcript, audio_ms)

    async def _transcribe(self, pcm: bytes) -> str:
        """The supervisor's words (PCM16, 24 kHz) by the unit's own speech-to-text engine, off the event loop."""
        stt = next((s for s in self.lease.unit.stages() if isinstance(s, SttStage)), None) if self.lease else None
        if stt is None or not pcm:
            return ""
        samples = audio.resample(audio.decode(pcm, audio.PCM), audio.RATES[audio.PCM], audio.PIPELINE_RATE)
        language = self.session.settings().transcription_language
        try:
            return (await asyncio.to_thread(stt.transcriber.transcribe, samples, language, None)).strip()
        except Exception:
            logger.exception("session %s: the supervisor's words could not be transcribed", self.id)
            return ""
