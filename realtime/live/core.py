"""One Realtime session, whatever carries it: the protocol without the transport.

A transport (the WebSocket consumer, a WebRTC call) opens its session with
:func:`open_session`: authentication, the claim of a unit, the session's mailbox on the
channel layer and the start are here, once for every transport. It then hands each
client frame to :meth:`SessionCore.receive` and implements
:class:`realtime.live.transport.Transport` to send events and to close. Everything
between is here or in the mixins beside it: what each client event does (``handlers``),
the limits (``guards``), control from outside (``control``), followers. Every end of a
session, whoever decides it, goes through :meth:`SessionCore.end`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import replace
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from pipelines import audio, messages as m
from pipelines.pool import Lease
from realtime.access import auth
from realtime.access.owner import Caller, Owner
from realtime.audit import records
from realtime.live.control import SessionControl
from realtime.live.ending import wind_up
from realtime.live.guards import SessionGuards, session_limits
from realtime.live.handlers import ClientEventHandlers
from realtime.live.mailbox import Mailbox
from realtime.live.opening import (
    Opening,
    OpenRequest,
    authenticate,
    claim_soon,
    count_refusal,
    groups,
    model_of,
    principal_name,
    session_limit,
)
from realtime.live.outbox import Outbox
from realtime.live.remote_supervision import RemoteSupervision
from realtime.live.supervision import Desk, Supervision
from realtime.live.transport import (
    Event,
    PlaysAudio,
    Refusal,
    ServerEvent,
    Transport,
)
from realtime.models import EndReason, Prompt
from realtime.node.runtime import Runtime
from realtime.protocol import limits, prompts
from realtime.protocol.client_events import ClientEvent, InputAudioAppend, ResponseCreate, SessionUpdate, parse_event
from realtime.protocol.close_codes import CLOSE_INTERNAL, CLOSE_POLICY, CLOSE_TRY_AGAIN
from realtime.protocol.conversation import Conversation, Port
from realtime.protocol.events import error_event, server_event, to_beta
from realtime.protocol.mcp.session import McpSession
from realtime.protocol.session.config import SessionConfig
from realtime.protocol.wire import EventError

logger = logging.getLogger(__name__)
COUNTS_EVERY_S = 2.0  # the admin's live page reads the record every few seconds

AUDIO_DONE = {"response.output_audio.done", "response.done"}


# --- opening ------------------------------------------------------------------------------


async def open_session(runtime: Runtime, transport: Transport, request: OpenRequest) -> SessionCore:
    """Opens a session for ``transport``: authenticates, runs the transport's own checks, claims a unit, joins
    the session's mailbox to its groups, starts it.

    Raises :class:`Refusal` (counted) when no session can start; on that or any other failure a spent
    ``ek_`` secret is given back. A unit is claimed only once the credentials passed (and the transport's
    ``prepare`` did), with no ``await`` between finding it and taking it, and given back on any failure after.
    """
    opening = Opening(
        session_id=request.session_id,
        model=request.model or settings.S2S_DEFAULT_MODEL,
        beta=request.beta,
        transcription=request.transcription,
        client_addr=request.client_addr,
        user_agent=request.user_agent[:500],
        transport=request.transport,
    )
    principal: auth.Principal | None = None
    core: SessionCore | None = None
    try:
        principal = await authenticate(request)
        call_config = await request.prepare(principal) if request.prepare is not None else request.call_config
        opening = replace(
            opening,
            principal=principal_name(principal, request.scope),
            model=request.model or model_of(principal.session_config, call_config),
            session_config=principal.session_config or None,
            call_config=call_config,
        )
        core = await SessionCore._claim_soon(runtime, transport, opening)
        token = auth.scope_token(request.scope) if request.scope is not None else None
        core.owner = request.owner or Owner.of(token, principal)
        core.call_id = request.call_id
        await core.mailbox.open(groups(core.id, core.owner.api_key_id, request.call_id))
        await core.start()
    except BaseException as exc:
        if principal is not None:  # its session never started: a spent secret may open another
            spent = principal
            runtime.writer.submit(lambda: auth.give_back_secret(spent))
        if isinstance(exc, Refusal):
            count_refusal(runtime, opening, exc)
        if core is not None:
            logger.exception("session %s failed to start", core.id)
            await asyncio.shield(core.end(EndReason.ERROR, None))
        raise
    if request.call_id is not None:
        runtime.calls[request.call_id] = core
    used_at = core.started_at
    runtime.writer.submit(lambda: auth.mark_used(principal, used_at))
    return core


class SessionCore(Supervision, RemoteSupervision, ClientEventHandlers, SessionGuards, SessionControl):
    """The state of one session, made when it claims its unit, gone when it gives it back.

    Stage threads hand pipeline output to the event loop with ``call_soon_threadsafe``;
    a send task owned by the session turns it into server events. Nothing polls.
    """

    def __init__(
        self,
        runtime: Runtime,
        transport: Transport,
        opening: Opening,
        lease: Lease | None,
        port: Port,
        outbox: Outbox | None = None,
    ) -> None:
        self.runtime = runtime
        self.transport = transport
        # A transport that plays the reply itself (WebRTC, SIP) is handed the audio, not audio deltas.
        self.player: PlaysAudio | None = transport if isinstance(transport, PlaysAudio) else None
        self.opening = opening
        self.id = opening.session_id
        self.lease = lease
        self.limits = session_limits()
        self.session = SessionConfig(
            self.id,
            opening.model,
            settings.S2S_POOL.engines.all_voices,
            self.limits.max_instructions_bytes,
            self.limits.max_session_s,
            token_cap=self.token_cap(),
            context_tokens=self.context_tokens(),
            mcp_policy=settings.S2S_MCP,
        )
        self.conversation = Conversation(self.session, port, self.limits.conversation)
        self.mcp = McpSession(self.session, self.conversation, self.send, self.spawn, self.apply_settings)
        self.bucket = limits.TokenBucket(self.limits.events_per_second, self.limits.burst)
        self.input_buffer = limits.InputBuffer(self.limits.max_input_buffer_ms)
        self.recorder = records.SessionRecorder(self.id, runtime.writer, runtime.metrics)
        self.started_at = timezone.now()
        self.ended = False
        self._active_at = self._rate_reported_at = self._session_started = time.monotonic()
        self.outbox = outbox or Outbox(settings.S2S_SEND_BUFFER_EVENTS)
        self.outbox.on_full = self._overflow
        self.mailbox = Mailbox(self.id, {kind: functools.partial(act, self) for kind, act in self.MAILBOX.items()})
        self.owner = Owner()  # who may reach the session (realtime.access.owner)
        self.call_id: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._followers: dict[Transport, Caller] = {}  # event-only transports on the session (?call_id=), as who
        self.desk = Desk()  # its supervisors (realtime.live.supervision)
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
        self.apply_settings()

    def _open_with(self, config: dict[str, Any], lookup: prompts.PromptLookup | None) -> None:
        try:
            self.session.update(config, beta=False, prompts=lookup)
        except EventError:
            logger.exception("session %s: the session settings it opened with no longer apply", self.id)

    # --- start ------------------------------------------------------------------------

    @classmethod
    async def _claim_soon(cls, runtime: Runtime, transport: Transport, opening: Opening) -> SessionCore:
        """:meth:`_claim`, waiting while a unit drains (:func:`opening.claim_soon`)."""
        if runtime.pool is None:
            return cls._claim(runtime, transport, opening)  # refused: not ready
        return await claim_soon(runtime.pool, lambda: cls._claim(runtime, transport, opening, count_refusal=False))

    @classmethod
    def _claim(
        cls, runtime: Runtime, transport: Transport, opening: Opening, count_refusal: bool = True
    ) -> SessionCore:
        """Claims a unit for a new session (the part of :func:`open_session` that may not await); raises
        :class:`Refusal` when none can be had.

        Atomic: nothing awaits between finding a free unit and taking it. The unit's sink is the
        session's outbox, made before the claim: nothing the unit says is lost.
        """
        pool = runtime.pool
        if pool is None or not pool.warm:
            message = (
                "The server is starting: its models are still loading. Try again shortly."
                if runtime.start_error is None
                else f"The server failed to start its pipeline: {runtime.start_error}"
            )
            raise Refusal("server_not_ready", message, CLOSE_TRY_AGAIN, "Server is warming up", "server_error")
        outbox = Outbox(settings.S2S_SEND_BUFFER_EVENTS, asyncio.get_running_loop())
        lease = pool.claim(outbox.sink, opening.session_id, count_refusal)
        if lease is None and not pool.admitting:
            raise Refusal(
                "server_shutting_down",
                "The server is shutting down: connect to another one.",
                CLOSE_TRY_AGAIN,
                "Server is shutting down",
                "server_error",
            )
        if lease is None:
            raise session_limit()
        try:
            port = Port(lease.generation, lease.unit.submit, lease.unit.cancel)
            return cls(runtime, transport, opening, lease, port, outbox)
        except BaseException:
            outbox.closed = True
            pool.release(lease)
            raise

    async def start(self) -> None:
        """Records the session, starts its tasks and says ``session.created``."""
        assert self.lease is not None
        for config in self._deferred:
            self._open_with(config, await self._prompt_lookup(config.get("prompt")))
        if self._deferred:
            if self.opening.transcription:
                self.session.type = "transcription"
            self.apply_settings()
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
            **self.owner.record_fields(),
        )
        self.spawn(self._send_loop(), "send")
        self.spawn(self.watch_limits(), "limits")
        self.spawn(self._keep_counts(), "counts")
        await self.send(server_event("session.created", session=self.rendered_session()))
        await self.say_notice()  # S2S_SUPERVISOR_NOTICE, if set
        for event in self.mcp.servers_changed():  # MCP servers the session opened with
            await self.send(event)

    def spawn(self, coro: Any, name: str) -> None:
        """Runs ``coro`` as a task of the session's own, cancelled when the session ends."""
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
        self.outbox.closed = True
        if self.call_id is not None and self.runtime.calls.get(self.call_id) is self:
            del self.runtime.calls[self.call_id]
        await wind_up(
            self,
            self.send,
            reason,
            close_code,
            error,
            close_reason,
            [*self._tasks, *self.timer_tasks()],
            self._counts,
            self.close_followers,
        )

    def _counts(self) -> dict[str, Any]:
        """The record's counters as they stand."""
        c = self.conversation
        return {"turns": c.turns, "errors": c.errors, "audio_in_seconds": c.audio_in_seconds}

    async def _keep_counts(self) -> None:
        """Writes the counters to the record while the session lives, when they change (at most every
        ``COUNTS_EVERY_S``): the admin's live page shows an error or a turn as it happens, not at the end."""
        written: dict[str, Any] = {}
        while True:
            await asyncio.sleep(COUNTS_EVERY_S)
            if (counts := self._counts()) != written:
                records.session_updated(self.runtime.writer, self.id, **counts)
                written = counts

    @property
    def client_addr(self) -> str:
        return self.opening.client_addr

    # --- client -> server -----------------------------------------------------------------

    async def receive(self, text: str | None, size: int) -> None:
        """One client frame (``text`` None: a binary frame of ``size`` bytes)."""
        if self.ended:
            return
        self.note_activity()
        if not await self.admit_event():
            return
        event: ClientEvent | None = None
        try:
            limits.check_frame(size, self.limits)
            event = await self._with_prompts(parse_event(text, settings.S2S_MAX_EVENT_BYTES))
            audio_ms = self.check_input_buffer(event)
            for reply in self.handle(event):
                await self.send(reply)
            await self.overhear(event)
            self.recorder.client_event(event, self.conversation)
            self.schedule_timers()
            if audio_ms:
                self.add_input_audio(audio_ms)
        except EventError as exc:
            self.conversation.errors += 1
            await self.send(
                error_event(exc.code, exc.message, exc.param, exc.event_id or _event_id(event), exc.error_type)
            )
        except Exception:  # a bug in handling one event must not end the session (or leak its unit)
            logger.exception("session %s: could not handle an event", self.id)
            self.conversation.errors += 1
            await self.send(
                error_event(
                    "server_error", "The server could not handle this event.", None, _event_id(event), "server_error"
                )
            )

    async def receive_audio(self, data: bytes) -> None:
        """Microphone audio from a media track (``audio/pcm``): an ``input_audio_buffer.append`` without the event."""
        if self.ended:
            return
        self.note_activity()
        ms = audio.duration_ms(len(data), audio.PCM)
        if not await self.admit_track_audio(ms):
            return
        self.conversation.append_audio(data, audio.PCM)
        await self.overheard(data, audio.PCM)
        self.recorder.client_event(InputAudioAppend(audio=data), self.conversation)
        self.add_input_audio(ms)

    async def _with_prompts(self, event: ClientEvent) -> ClientEvent:
        """The event with ``prompts``, the lookup of the stored prompt it names (``ClientEvent.prompt_ref``)."""
        lookup = await self._prompt_lookup(event.prompt_ref())
        if lookup is None or not isinstance(event, SessionUpdate | ResponseCreate):  # the events that name one
            return event
        return replace(event, prompts=lookup)

    @staticmethod
    async def _prompt_lookup(ref: Any) -> prompts.PromptLookup | None:
        """Reads the versions of the prompt ``ref`` names (in a thread: the ORM never runs on the loop)."""
        if not isinstance(ref, dict) or not isinstance(ref.get("id"), str):
            return None  # nothing to read: the session says what is wrong with the reference
        versions = await database_sync_to_async(Prompt.objects.versions_of)(ref["id"])
        return lambda prompt_id, version: prompts.pick(versions, prompt_id, version)

    # --- playout, for a transport that plays the reply itself (PlaysAudio) -------------------

    def output_audio_started(self, response_id: str) -> None:
        """The transport began playing ``response_id``: ``output_audio_buffer.started``."""
        if not self.ended:
            self.spawn(self.send(server_event("output_audio_buffer.started", response_id=response_id)), "playout")

    def output_audio_stopped(self, response_id: str) -> None:
        """The transport played the last of ``response_id``: ``output_audio_buffer.stopped``."""
        if not self.ended:
            self.spawn(self.send(server_event("output_audio_buffer.stopped", response_id=response_id)), "playout")

    async def _played_after(self, player: PlaysAudio, event: Event) -> None:
        """What a transport that plays the reply learns from an event it was sent: the reply is complete, or
        the user barged in (the reply stops and is truncated, unless ``interrupt_response`` is off)."""
        if event["type"] in AUDIO_DONE:
            player.end_reply(event.get("response_id") or event.get("response", {}).get("id", ""))
        elif (
            event["type"] == "input_audio_buffer.speech_started"
            and player.playing is not None
            and self.desk.holder is None  # taken over: the caller and the supervisor talk as people do
            and (self.session.turn_detection or {}).get("interrupt_response", True)
        ):
            for reply in self.cleared_events(player.clear_reply()):
                await self.send(reply)

    # --- server -> client ---------------------------------------------------------------

    def _overflow(self) -> None:
        """The outbox is full: the client does not read what the unit says."""
        if not self.ended:
            logger.warning("session %s: send buffer full (%s events); closing", self.id, self.outbox.queue.maxsize)
            self.spawn(
                self.end(
                    EndReason.SERVER_CLOSED, CLOSE_POLICY, close_reason="Send buffer full: the client reads too slowly"
                ),
                "overflow",
            )

    async def _send_loop(self) -> None:
        while True:
            out = await self.outbox.queue.get()
            self.note_activity()
            if isinstance(out, m.UnitFailed):
                self.spawn(self._unit_failed(out), "unit-failed")
                continue
            self.track_input_buffer(out)
            try:
                events = self.conversation.on_output(out)
            except Exception:
                logger.exception("session %s: could not translate %s", self.id, type(out).__name__)
                continue
            if isinstance(out, m.ToolsPending):
                self.mcp.pending(out)
            self.recorder.output(out, self.conversation)
            self.schedule_timers()
            for event in events:
                await self.send(event)
                if event["type"] == "response.created":
                    await self.send(self.rate_limits_updated(event["response"]["max_output_tokens"]))

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

    async def send(self, event: Event) -> None:
        """Sends one of the session's events: to the transport, typed (a transport that plays the reply gets its
        audio instead of the audio delta), and to the followers."""
        shaped = to_beta(event) if self.opening.beta else event
        if shaped is not None:
            out = ServerEvent.of(shaped)
            if out.audio is not None and self.player is not None:
                self.player.play_audio(out.payload["item_id"], out.audio, self.session.output_format)
            else:
                await self.transport.send_event(out)
            if self._followers:
                await self.tell_followers(out)
        if self.player is not None:
            await self._played_after(self.player, event)


def _event_id(event: ClientEvent | None) -> str | None:
    return event.event_id if event is not None else None
