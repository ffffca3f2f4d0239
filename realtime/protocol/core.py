"""One Realtime session, whatever carries it: the protocol without the transport.

A transport (the WebSocket consumer today, a WebRTC data channel next) authenticates,
then calls :meth:`SessionCore.claim`; it hands each client frame to :meth:`receive`
and implements :class:`Transport` to send events and to close. Everything between
is here: the session settings, the conversation, limits, the response lifecycle,
the records. Every end of a session, whoever decides it, goes through :meth:`end`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from pipelines import audio, messages as m
from pipelines.pool import Lease
from realtime.protocol import limits
from realtime.protocol import prompts
from realtime.audit import records
from realtime.protocol.conversation import Conversation, Port
from realtime.protocol.mcp.session import McpSession
from realtime.protocol.events import ClientEvent, EventError, error_event, parse_event, server_event, to_beta
from realtime.models import EndReason, Prompt, Transport as TransportKind
from realtime.node.runtime import Runtime
from realtime.protocol.session import SessionConfig

logger = logging.getLogger(__name__)

Event = dict[str, Any]

CLOSE_GOING_AWAY = 1001
CLOSE_POLICY = 1008
CLOSE_INTERNAL = 1011
CLOSE_TRY_AGAIN = 1013
SESSION_LIMIT_REASON = "All session slots are in use"
FOLLOWER_SKIPS = {"response.output_audio.delta", "response.audio.delta"}  # followers get events, not audio


class Transport(Protocol):
    """What the session needs from whatever carries it."""

    async def send_event(self, event: Event) -> None:
        """Sends one server event (already shaped for the client: GA, or beta)."""

    async def close(self, code: int, reason: str) -> None:
        """Closes the connection from the server's side."""


@runtime_checkable
class PlaysAudio(Protocol):
    """A transport that plays the reply itself (WebRTC), so the server owns the output audio buffer."""

    def clear_output_audio(self) -> list[Event]:
        """Stops the reply's audio at once (``output_audio_buffer.clear``); returns the events that say so."""


@dataclass(eq=False)
class Refusal(Exception):
    """Why no session could start; the transport answers with it (WebSocket: error + close)."""

    code: str
    message: str
    close_code: int
    reason: str


@dataclass(frozen=True)
class Opening:
    """Who opens a session and how: what the record keeps and what the session starts with."""

    session_id: str
    model: str
    beta: bool = False
    transcription: bool = False  # opened as a transcription session (``?intent=transcription``)
    principal: str = ""
    client_addr: str = ""
    user_agent: str = ""
    session_config: dict[str, Any] | None = None  # a client secret's settings
    call_config: dict[str, Any] | None = None  # the settings a WebRTC offer came with (applied after the secret's)
    transport: str = TransportKind.WEBSOCKET


def refuse(runtime: Runtime, opening: Opening, refusal: Refusal) -> None:
    """Counts a connection that never became a session (per minute and reason: no row each, no user agent kept)."""
    if runtime.session_refused(refusal.code, refusal.close_code):
        logger.info(
            "refused %s from %s: %s (further ones this minute are only counted)",
            opening.session_id,
            opening.client_addr or "?",
            refusal.code,
        )


class SessionCore:
    """The state of one session, made when it claims its unit, gone when it gives it back.

    Stage threads hand pipeline output to the event loop with ``call_soon_threadsafe``;
    a send task owned by the session turns it into server events. Nothing polls.
    """

    # Client event type -> the method that carries it out, with the event's typed fields.
    HANDLERS: dict[str, Callable[[SessionCore, ClientEvent], list[Event]]] = {
        "session.update": lambda core, e: core._session_update(e),
        "transcription_session.update": lambda core, e: core._transcription_session_update(e),
        "input_audio_buffer.append": lambda core, e: core.conversation.append_audio(e.audio),
        "input_audio_buffer.commit": lambda core, e: core.conversation.commit_audio(e.event_id),
        "input_audio_buffer.clear": lambda core, e: core.conversation.clear_audio(),
        "conversation.item.create": lambda core, e: core.conversation.create_item(e.item, e.previous_item_id),
        "conversation.item.retrieve": lambda core, e: core.conversation.retrieve_item(e.item_id),
        "conversation.item.delete": lambda core, e: core.conversation.delete_item(e.item_id),
        "conversation.item.truncate": lambda core, e: core.conversation.truncate_item(
            e.item_id, e.content_index, e.audio_end_ms
        ),
        "response.create": lambda core, e: core.conversation.create_response(
            core.session.response_options(e.response, core.opening.beta, e.fields.get("prompts")), e.event_id
        ),
        "response.cancel": lambda core, e: core.conversation.cancel_response(e.response_id),
        "output_audio_buffer.clear": lambda core, e: core._clear_output_audio(),
    }

    def __init__(
        self, runtime: Runtime, transport: Transport, opening: Opening, lease: Lease | None, port: Port
    ) -> None:
        self.runtime = runtime
        self.transport = transport
        self.opening = opening
        self.id = opening.session_id
        self.lease = lease
        self.limits = limits.Limits.from_settings()
        self.session = SessionConfig(
            self.id,
            opening.model,
            settings.S2S_POOL.engines.all_voices,
            self.limits.max_instructions_bytes,
            self.limits.max_session_s,
            token_cap=self._token_cap(),
            context_tokens=self._context_tokens(),
            mcp_policy=settings.S2S_MCP,
        )
        self.conversation = Conversation(self.session, port, self.limits.conversation)
        self.mcp = McpSession(self.session, self.conversation, self._send, self._spawn, self._apply_settings)
        self.bucket = limits.TokenBucket(self.limits.events_per_second, self.limits.burst)
        self.input_buffer = limits.InputBuffer(self.limits.max_input_buffer_ms)
        self.recorder = records.SessionRecorder(self.id, runtime.writer, runtime.metrics)
        self.started_at = timezone.now()
        self.ended = False
        self._active_at = self._rate_reported_at = self._session_started = time.monotonic()
        self._outbox: asyncio.Queue[m.Outbound] = asyncio.Queue(maxsize=settings.S2S_SEND_BUFFER_EVENTS)
        self._tasks: set[asyncio.Task[None]] = set()
        self._followers: set[Transport] = set()  # event-only transports attached to the session (?call_id=)
        self._turn_timeout: asyncio.Task[None] | None = None
        self._turn_timeout_due: float | None = None
        # The settings a client secret was minted with, or a call offered with (validated then); one that
        # names a stored prompt is applied in start(), where the database can be read off the event loop.
        self._deferred: list[dict[str, Any]] = []
        for config in (opening.session_config, opening.call_config):
            if config and (self._deferred or isinstance(config.get("prompt"), dict)):
                self._deferred.append(config)
            elif config:
                self._open_with(config, None)
        if opening.transcription:
            self.session.type = "transcription"
        self._apply_settings()

    def _open_with(self, config: dict[str, Any], lookup: prompts.PromptLookup | None) -> None:
        try:
            self.session.update(config, beta=False, prompts=lookup)
        except EventError:
            logger.exception("session %s: the session settings it opened with no longer apply", self.id)

    # --- start ------------------------------------------------------------------------

    @classmethod
    def claim(cls, runtime: Runtime, transport: Transport, opening: Opening) -> SessionCore:
        """Claims a unit for a new session; raises :class:`Refusal` when none can be had.

        Atomic: nothing awaits between finding a free unit and taking it.
        """
        pool = runtime.pool
        if pool is None or not pool.warm:
            message = (
                "The server is starting: its models are still loading. Try again shortly."
                if runtime.start_error is None
                else f"The server failed to start its pipeline: {runtime.start_error}"
            )
            raise Refusal("server_not_ready", message, CLOSE_TRY_AGAIN, "Server is warming up")
        loop = asyncio.get_running_loop()
        core: SessionCore | None = None

        def sink(out: m.Outbound) -> None:  # called on stage threads
            if core is not None:  # a unit says nothing before it has its first message
                loop.call_soon_threadsafe(core._deliver, out)

        lease = pool.claim(sink, opening.session_id)
        if lease is None and not pool.admitting:
            raise Refusal(
                "server_shutting_down",
                "The server is shutting down: connect to another one.",
                CLOSE_TRY_AGAIN,
                "Server is shutting down",
            )
        if lease is None:
            raise Refusal("session_limit_reached", SESSION_LIMIT_REASON, CLOSE_POLICY, SESSION_LIMIT_REASON)
        try:
            core = cls(runtime, transport, opening, lease, Port(lease.generation, lease.unit.submit, lease.unit.cancel))
        except BaseException:
            pool.release(lease)
            raise
        return core

    async def start(self) -> None:
        """Records the session, starts its tasks and says ``session.created``."""
        assert self.lease is not None
        for config in self._deferred:
            self._open_with(config, await self._prompt_lookup(config.get("prompt")))
        if self._deferred:
            if self.opening.transcription:
                self.session.type = "transcription"
            self._apply_settings()
        self.runtime.session_started(
            self,
            self.id,
            node=settings.S2S_NODE_NAME,
            unit_index=self.lease.unit.index,
            model=self.opening.model,
            started_at=self.started_at,
            principal=self.opening.principal,
            client_addr=self.opening.client_addr,
            user_agent=self.opening.user_agent,
            transport=self.opening.transport,
        )
        self._spawn(self._send_loop(), "send")
        self._spawn(self._watch_limits(), "limits")
        await self._send(server_event("session.created", session=self._session_obj()))
        for event in self.mcp.servers_changed():  # MCP servers the session opened with
            await self._send(event)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=f"{name}-{self.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- end ------------------------------------------------------------------------------

    async def end(
        self, reason: str, close_code: int | None, error: EventError | None = None, close_reason: str = ""
    ) -> None:
        """The one way a session ends: say why (``error``), give the unit back, record it, close.

        ``close_reason`` empty: the transport is already closed (the client went away), so
        nothing is sent. Runs once; later calls do nothing.
        """
        if self.ended:
            return
        self.ended = True
        if error is not None:
            await self._send(error_event(error.code, error.message, error.param, None, error.error_type))
        current = asyncio.current_task()
        for task in [*self._tasks, self._turn_timeout]:
            if task is not None and task is not current:
                task.cancel()
        try:
            if self.lease is not None and self.runtime.pool is not None:
                await asyncio.wrap_future(self.runtime.pool.release(self.lease))
        finally:
            self.runtime.session_ended(
                self,
                self.id,
                ended_at=timezone.now(),
                end_reason=reason,
                close_code=close_code,
                turns=self.conversation.turns,
                errors=self.conversation.errors,
                audio_in_seconds=self.conversation.audio_in_seconds,
            )
        if close_reason and close_code is not None:
            await self.transport.close(close_code, close_reason)
        followers, self._followers = self._followers, set()
        for follower in followers:
            await follower.close(1000, "The call ended")

    async def going_away(self) -> None:
        await self.end(
            EndReason.SERVER_CLOSED,
            CLOSE_GOING_AWAY,
            EventError("server_shutting_down", "The server is shutting down.", error_type="server_error"),
            "The server is shutting down",
        )

    async def end_revoked(self) -> None:
        logger.info("session %s: its API key was revoked", self.id)
        await self.end(
            EndReason.ADMIN_ENDED,
            CLOSE_POLICY,
            EventError("invalid_api_key", "The API key of this session was revoked or deleted."),
            "API key revoked",
        )

    async def end_by_admin(self) -> None:
        logger.info("session %s: ended by an administrator", self.id)
        await self.end(
            EndReason.ADMIN_ENDED,
            CLOSE_POLICY,
            EventError("session_ended_by_admin", "An administrator ended this session.", error_type="server_error"),
            "Session ended by an administrator",
        )

    # --- client -> server -----------------------------------------------------------------

    async def receive(self, text: str | None, size: int) -> None:
        """One client frame (``text`` None: a binary frame of ``size`` bytes)."""
        if self.ended:
            return
        self._active_at = time.monotonic()
        if not self.bucket.take():
            await self._rate_limited()
            return
        event: ClientEvent | None = None
        try:
            limits.check_frame(size, self.limits)
            event = await self._with_prompts(parse_event(text, settings.S2S_MAX_EVENT_BYTES))
            audio_ms = self._check_input_buffer(event)
            for reply in self.handle(event):
                await self._send(reply)
            self.recorder.client_event(event, self.conversation)
            self._schedule_turn_timeout()
            if audio_ms:
                self.input_buffer.add(audio_ms, self._server_vad())
        except EventError as exc:
            self.conversation.errors += 1
            await self._send(
                error_event(exc.code, exc.message, exc.param, exc.event_id or _event_id(event), exc.error_type)
            )
        except Exception:  # a bug in handling one event must not end the session (or leak its unit)
            logger.exception("session %s: could not handle an event", self.id)
            self.conversation.errors += 1
            await self._send(
                error_event(
                    "server_error", "The server could not handle this event.", None, _event_id(event), "server_error"
                )
            )

    async def receive_audio(self, data: bytes) -> None:
        """Microphone audio from a media track (``audio/pcm``): an ``input_audio_buffer.append`` without the event."""
        if self.ended:
            return
        self._active_at = time.monotonic()
        ms = audio.duration_ms(len(data), audio.PCM)
        try:
            self.input_buffer.check(ms, self._server_vad())
        except EventError as exc:  # reported at most once a second: the track keeps coming
            now = time.monotonic()
            if now - self._rate_reported_at >= 1.0:
                self._rate_reported_at = now
                self.conversation.errors += 1
                await self._send(error_event(exc.code, exc.message, None, None, exc.error_type))
            return
        self.conversation.append_audio(data, audio.PCM)
        self.recorder.client_event(ClientEvent("input_audio_buffer.append", None, {"audio": data}), self.conversation)
        self.input_buffer.add(ms, self._server_vad())

    async def _with_prompts(self, event: ClientEvent) -> ClientEvent:
        """The event with ``prompts``, the lookup of the stored prompt its ``session`` or ``response`` names."""
        if event.type not in ("session.update", "response.create"):
            return event
        payload = event.fields.get("session" if event.type == "session.update" else "response")
        ref = payload.get("prompt") if isinstance(payload, dict) else None
        lookup = await self._prompt_lookup(ref)
        return event if lookup is None else replace(event, fields={**event.fields, "prompts": lookup})

    @staticmethod
    async def _prompt_lookup(ref: Any) -> prompts.PromptLookup | None:
        """Reads the versions of the prompt ``ref`` names (in a thread: the ORM never runs on the loop)."""
        if not isinstance(ref, dict) or not isinstance(ref.get("id"), str):
            return None  # nothing to read: the session says what is wrong with the reference
        versions = await database_sync_to_async(Prompt.objects.versions_of)(ref["id"])
        return lambda prompt_id, version: prompts.pick(versions, prompt_id, version)

    def handle(self, event: ClientEvent) -> list[Event]:
        """Carries out one parsed client event; returns the events that answer it."""
        return self.HANDLERS[event.type](self, event)

    def _session_update(self, event: ClientEvent) -> list[Event]:
        self.session.update(event.session, beta=self.opening.beta, prompts=event.fields.get("prompts"))
        self._apply_settings()
        return [server_event("session.updated", session=self._session_obj()), *self.mcp.servers_changed()]

    def _transcription_session_update(self, event: ClientEvent) -> list[Event]:
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
        self._apply_settings()
        return [server_event("transcription_session.updated", session=self.session.as_beta_transcription())]

    def _apply_settings(self) -> None:
        if self.lease is not None:
            self.lease.unit.context.settings = self.session.settings()

    def _clear_output_audio(self) -> list[Event]:
        if isinstance(self.transport, PlaysAudio):
            return self.transport.clear_output_audio()
        raise EventError(
            "invalid_value",
            "output_audio_buffer.clear is only supported for WebRTC and SIP connections; "
            "over WebSocket the client owns playback (use conversation.item.truncate).",
            "type",
        )

    # --- limits ----------------------------------------------------------------------------

    async def _rate_limited(self) -> None:
        """Drops the event; reports at most once a second, so a flood cannot make the server flood back."""
        self.conversation.errors += 1
        now = time.monotonic()
        if self.bucket.dropped == 1 or now - self._rate_reported_at >= 1.0:
            self._rate_reported_at = now
            exc = limits.rate_limited(self.bucket)
            await self._send(error_event(exc.code, exc.message, exc.param, None, exc.error_type))

    def _server_vad(self) -> bool:
        return self.session.turn_detection is not None

    def _check_input_buffer(self, event: ClientEvent) -> int:
        """The ms an append adds to the input buffer; raises ``input_audio_buffer_full`` past the limit."""
        if event.type != "input_audio_buffer.append":
            return 0
        ms = audio.duration_ms(len(event.audio), self.session.input_format)
        self.input_buffer.check(ms, self._server_vad())
        return ms

    def _track_input_buffer(self, out: m.Outbound) -> None:
        if isinstance(out, m.SpeechStarted):
            self.input_buffer.speech_started()
        elif isinstance(out, (m.AudioCommitted, m.AudioCleared)):
            self.input_buffer.emptied()

    async def _watch_limits(self) -> None:
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
        if self.ended or self.conversation.idle_due != due:
            return
        self._turn_timeout_due = None
        self._turn_timeout = None
        for event in self.conversation.idle_timeout():
            await self._send(event)

    # --- server -> client ---------------------------------------------------------------

    def _deliver(self, out: m.Outbound) -> None:
        """On the event loop: queue pipeline output for the send task (bounded)."""
        if self.ended:
            return
        try:
            self._outbox.put_nowait(out)
        except asyncio.QueueFull:
            logger.warning("session %s: send buffer full (%s events); closing", self.id, self._outbox.maxsize)
            self._spawn(
                self.end(
                    EndReason.SERVER_CLOSED, CLOSE_POLICY, close_reason="Send buffer full: the client reads too slowly"
                ),
                "overflow",
            )

    async def _send_loop(self) -> None:
        while True:
            out = await self._outbox.get()
            self._active_at = time.monotonic()
            if isinstance(out, m.UnitFailed):
                self._spawn(self._unit_failed(out), "unit-failed")
                continue
            self._track_input_buffer(out)
            try:
                events = self.conversation.on_output(out)
            except Exception:
                logger.exception("session %s: could not translate %s", self.id, type(out).__name__)
                continue
            if isinstance(out, m.ToolsPending):
                self.mcp.pending(out)
            self.recorder.output(out, self.conversation)
            self._schedule_turn_timeout()
            for event in events:
                await self._send(event)
                if event["type"] == "response.created":
                    await self._send(self._rate_limits(event["response"]["max_output_tokens"]))

    def _rate_limits(self, max_output_tokens: int | str) -> Event:
        """``rate_limits.updated`` at a response's start: its output tokens are reserved until it is done."""
        cap = self._token_cap()
        reserved = cap if max_output_tokens == "inf" else min(cap, int(max_output_tokens))
        return server_event("rate_limits.updated", rate_limits=limits.rate_limits(self.bucket, cap, reserved))

    def _token_cap(self) -> int:
        """The most output tokens the unit's language model stage lets one response produce."""
        stages = self.lease.unit.stages() if self.lease is not None else []
        caps = [stage.max_new_tokens for stage in stages if isinstance(getattr(stage, "max_new_tokens", None), int)]
        return caps[0] if caps else settings.S2S_POOL.engines.lm_max_new_tokens

    def _context_tokens(self) -> int | None:
        """The context of the unit's language model (None: not known here)."""
        stages = self.lease.unit.stages() if self.lease is not None else []
        sizes = [getattr(getattr(stage, "model", None), "context_length", None) for stage in stages]
        return next((size for size in sizes if isinstance(size, int)), None)

    async def _unit_failed(self, out: m.UnitFailed) -> None:
        """A stage thread died: the session cannot go on. Close with 1011; the release rebuilds the unit."""
        logger.error("session %s: unit failed (%s): closing with 1011", self.id, out.stage)
        await self.end(
            EndReason.ERROR,
            CLOSE_INTERNAL,
            EventError(
                "server_error",
                f"The server's pipeline failed ({out.message}). Reconnect to start a new session.",
                error_type="server_error",
            ),
            "Internal error: the pipeline failed",
        )

    async def _send(self, event: Event) -> None:
        if self.opening.beta:
            event = to_beta(event)
            if event is None:
                return
        await self.transport.send_event(event)
        if self._followers and event["type"] not in FOLLOWER_SKIPS:
            await self.tell_followers(event)

    # --- followers: a second, event-only transport on a live call (``/v1/realtime?call_id=``) --------

    def follow(self, follower: Transport) -> None:
        """Attaches ``follower``: it gets the session's events (no audio) and may send client events."""
        self._followers.add(follower)

    def unfollow(self, follower: Transport) -> None:
        self._followers.discard(follower)

    async def tell_followers(self, event: Event) -> None:
        """Sends an event to the followers only (one the transport made itself: a key press, the playout)."""
        for follower in list(self._followers):
            try:
                await follower.send_event(event)
            except Exception:  # a follower that went away must not stop the session's send loop
                logger.debug("session %s: a follower could not be sent %s", self.id, event["type"])

    def _session_obj(self) -> Event:
        if self.opening.beta:
            return self.session.as_beta_transcription() if self.session.transcription_only else self.session.as_beta()
        return self.session.as_ga()


def _event_id(event: ClientEvent | None) -> str | None:
    return event.event_id if event is not None else None
