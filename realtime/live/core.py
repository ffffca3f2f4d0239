"""One Realtime session, whatever carries it: the protocol without the transport.

A transport (the WebSocket consumer, a WebRTC call) opens its session with
:func:`open_session`: authentication, the claim of a unit, the session's mailbox on the
channel layer and the start are here, once for every transport. It then hands each
client frame to :meth:`SessionCore.receive` and implements
:class:`realtime.protocol.transport.Transport` to send events and to close. Everything
between is here: the session settings, the conversation, limits, the response lifecycle,
the records. Every end of a session, whoever decides it, goes through :meth:`SessionCore.end`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from pipelines import audio, messages as m
from pipelines.ids import new_id
from pipelines.pool import Lease
from realtime.access import auth
from realtime.access.owner import Caller, Owner
from realtime.audit import records
from realtime.models import EndReason, Prompt, Transport as TransportKind
from realtime.node import cluster
from realtime.node.runtime import Runtime
from realtime.protocol import limits, prompts
from realtime.protocol.conversation import Conversation, Port
from realtime.protocol.events import ClientEvent, EventError, error_event, parse_event, server_event, to_beta
from realtime.protocol.mailbox import Mailbox
from realtime.protocol.mcp.session import McpSession
from realtime.protocol.session import SessionConfig
from realtime.protocol.transport import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    CLOSE_POLICY,
    CLOSE_TRY_AGAIN,
    ClearedReply,
    ControlAnswer,
    Controlled,
    Event,
    PlaysAudio,
    Refusal,
    ServerEvent,
    Transport,
)

logger = logging.getLogger(__name__)

SESSION_LIMIT_REASON = "All session slots are in use"
AUTH_STATUS = {"invalid_api_key": 401, "invalid_origin": 403}
HANG_UP = "hangup"  # the control action that ends a call (DELETE /v1/realtime/calls/{call_id}, /hangup)
AUDIO_DONE = {"response.output_audio.done", "response.done"}
FOLLOWER_SKIPS = {"response.output_audio.delta", "response.audio.delta"}  # followers get events, not audio


@dataclass(frozen=True)
class OpenRequest:
    """What a transport knows when it opens a session.

    Credentials: ``principal`` when the transport authenticated otherwise (a SIP trunk it
    trusts, a test); else the ASGI ``scope`` (its ``Authorization`` header, or a WebSocket's
    ``openai-insecure-api-key.`` subprotocol, and its ``Origin``); with neither, only a
    server without authentication opens it.
    """

    transport: TransportKind
    scope: dict[str, Any] | None = None
    principal: auth.Principal | None = None
    model: str | None = None  # None: the model a client secret or the call's settings name, else the default
    beta: bool = False
    transcription: bool = False  # opened as a transcription session (``?intent=transcription``)
    client_addr: str = ""
    user_agent: str = ""
    call_id: str | None = None  # a call's id: it joins the call's group and ``Runtime.calls`` (hang-up by id)
    call_config: dict[str, Any] | None = None  # settings the call came with (applied after a client secret's)
    # The transport's own checks once the credentials passed (given the principal) and before any claim (a
    # WebRTC call meters the key and reads and applies its offer here); returns the call's settings (replacing
    # ``call_config``); raises Refusal.
    prepare: Callable[[auth.Principal], Awaitable[dict[str, Any] | None]] | None = None
    session_id: str = field(default_factory=lambda: new_id("sess"))
    owner: Owner | None = None  # None: whoever the credentials are (realtime.access.owner); a SIP call's is set


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
    call_config: dict[str, Any] | None = None  # the settings a call came with (applied after the secret's)
    transport: str = TransportKind.WEBSOCKET


def _count_refusal(runtime: Runtime, opening: Opening, refusal: Refusal) -> None:
    """Counts a connection that never became a session (per minute and reason: no row each, no user agent kept)."""
    if runtime.session_refused(refusal.code, refusal.close_code):
        logger.info(
            "refused %s from %s: %s (further ones this minute are only counted)",
            opening.session_id,
            opening.client_addr or "?",
            refusal.code,
        )


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
        principal = await _authenticate(request)
        call_config = await request.prepare(principal) if request.prepare is not None else request.call_config
        opening = replace(
            opening,
            principal=_principal_name(principal, request.scope),
            model=request.model or _model(principal.session_config, call_config),
            session_config=principal.session_config or None,
            call_config=call_config,
        )
        core = SessionCore._claim(runtime, transport, opening)
        token = auth.scope_token(request.scope) if request.scope is not None else None
        core.owner = request.owner or Owner.of(token, principal)
        core.call_id = request.call_id
        await core.mailbox.open(_groups(core.id, principal, request.call_id))
        await core.start()
    except BaseException as exc:
        if principal is not None:  # its session never started: a spent secret may open another
            spent = principal
            runtime.writer.submit(lambda: auth.give_back_secret(spent))
        if isinstance(exc, Refusal):
            _count_refusal(runtime, opening, exc)
        if core is not None:
            logger.exception("session %s failed to start", core.id)
            await asyncio.shield(core.end(EndReason.ERROR, None))
        raise
    if request.call_id is not None:
        runtime.calls[request.call_id] = core
    used_at = core.started_at
    runtime.writer.submit(lambda: auth.mark_used(principal, used_at))
    return core


async def _authenticate(request: OpenRequest) -> auth.Principal:
    """The request's principal; raises :class:`Refusal` for missing or wrong credentials or a foreign Origin."""
    if request.principal is not None:  # the transport authenticated otherwise
        return request.principal
    try:
        return await auth.authenticate(request.scope or {}, request.session_id)
    except auth.AuthError as exc:
        raise Refusal(
            exc.code, exc.message, exc.close_code, exc.reason, exc.error_type, AUTH_STATUS.get(exc.code, 503)
        ) from None


def _principal_name(principal: auth.Principal, scope: dict[str, Any] | None) -> str:
    if principal.name:
        return f"{principal.kind}:{principal.name}"[:200]
    return records.principal_of(scope) if scope is not None else ""


def _model(*configs: dict[str, Any] | None) -> str:
    """The model the last of ``configs`` to name one names (a call's settings after a client secret's)."""
    for config in reversed(configs):
        if config and isinstance(config.get("model"), str) and config["model"]:
            return config["model"]
    return settings.S2S_DEFAULT_MODEL


def _groups(session_id: str, principal: auth.Principal, call_id: str | None) -> list[str]:
    groups = [cluster.session_group(session_id)]
    if principal.api_key_id is not None:
        groups.append(cluster.key_group(principal.api_key_id))
    if call_id is not None:
        groups.append(cluster.call_group(call_id))
    return groups


class Outbox:
    """Pipeline output on its way to the session's send task, bounded.

    It exists before the unit is claimed and is the claim's sink, so whatever a unit says,
    even before the session object is made, is queued, never dropped.
    """

    def __init__(self, maxsize: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[m.Outbound] = asyncio.Queue(maxsize=maxsize)
        self.closed = False
        self.on_full: Callable[[], None] = lambda: None

    def sink(self, out: m.Outbound) -> None:
        """Called on stage threads: hops to the event loop."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self._put, out)

    def _put(self, out: m.Outbound) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait(out)
        except asyncio.QueueFull:
            self.on_full()


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
        self.outbox = outbox or Outbox(settings.S2S_SEND_BUFFER_EVENTS)
        self.outbox.on_full = self._overflow
        self.mailbox = Mailbox(self.id, {kind: functools.partial(act, self) for kind, act in self.MAILBOX.items()})
        self.owner = Owner()  # who may reach the session (realtime.access.owner)
        self.call_id: str | None = None
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
    def _claim(cls, runtime: Runtime, transport: Transport, opening: Opening) -> SessionCore:
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
        lease = pool.claim(outbox.sink, opening.session_id)
        if lease is None and not pool.admitting:
            raise Refusal(
                "server_shutting_down",
                "The server is shutting down: connect to another one.",
                CLOSE_TRY_AGAIN,
                "Server is shutting down",
                "server_error",
            )
        if lease is None:
            raise Refusal(
                "session_limit_reached", SESSION_LIMIT_REASON, CLOSE_POLICY, SESSION_LIMIT_REASON, http_status=429
            )
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
            **self.owner.record_fields(),
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
        self.outbox.closed = True
        if self.call_id is not None and self.runtime.calls.get(self.call_id) is self:
            del self.runtime.calls[self.call_id]
        try:
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
                await follower.close(CLOSE_NORMAL, "The call ended")
        finally:
            await self.mailbox.close()

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

    async def hang_up(self) -> None:
        """The call was hung up (``DELETE /v1/realtime/calls/{call_id}``, on this process or another)."""
        await self.end(EndReason.CLIENT_CLOSED, None)
        await self.transport.close(CLOSE_NORMAL, "The call was hung up")

    def change_owner(self, owner: Owner) -> None:
        """A new owner (a SIP call's, once a key accepted it), kept in the session's record too."""
        self.owner = owner
        records.session_updated(self.runtime.writer, self.id, **owner.record_fields())

    @property
    def client_addr(self) -> str:
        return self.opening.client_addr

    async def control(self, action: str, body: dict[str, Any], caller: Caller) -> ControlAnswer:
        """A control request on this session's call, asked on this process or another (``call.control``), for a
        caller the owner rule permits: ``hangup`` for any call; ``accept``, ``reject`` or ``refer`` run by a
        transport that is :class:`Controlled` (a SIP call). To anyone else, and for any other action, the call
        does not exist."""
        if self.ended or not self.owner.permits(caller, action):
            return ControlAnswer.not_found(self.call_id or self.id)
        if action == HANG_UP:
            await self.hang_up()
            return ControlAnswer(200)
        if not isinstance(self.transport, Controlled):
            return ControlAnswer.not_found(self.call_id or self.id)
        return await self.transport.control(action, body, caller)

    async def _control_by(self, message: dict[str, Any]) -> None:
        """``call.control`` from another process: :meth:`control`, its answer sent back where the request says."""
        action, body = message.get("action"), message.get("body")
        if not isinstance(action, str) or not isinstance(body, dict):
            answer = ControlAnswer(400, "invalid_request", "The control request names no action or has no body.")
        else:
            try:
                answer = await self.control(action, body, Caller.from_message(message.get("caller")))
            except Exception:  # the asker gets a 500, not a 404 after its wait
                logger.exception("session %s: the call control request %r failed", self.id, action)
                answer = ControlAnswer(500, "server_error", "The call control request failed on the server.")
        await cluster.answer_control(message, answer.as_message())

    # The session's mailbox (realtime.protocol.mailbox): message type -> what it does.
    MAILBOX: dict[str, Callable[[SessionCore, dict[str, Any]], Awaitable[None]]] = {
        cluster.END_SESSION: lambda core, message: core.end_by_admin(),
        cluster.KEY_REVOKED: lambda core, message: core.end_revoked(),
        cluster.CALL_CONTROL: lambda core, message: core._control_by(message),
    }

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
        if self.player is not None:
            return self._cleared(self.player.clear_reply())
        raise EventError(
            "invalid_value",
            "output_audio_buffer.clear is only supported for WebRTC and SIP connections; "
            "over WebSocket the client owns playback (use conversation.item.truncate).",
            "type",
        )

    def _cleared(self, cleared: ClearedReply) -> list[Event]:
        """``output_audio_buffer.cleared`` (said even when nothing played, about the latest reply, as the API's
        type has it), and the reply's item truncated to what was played, as the server knows it."""
        events = [server_event("output_audio_buffer.cleared", response_id=cleared.response_id)]
        if cleared.item_id is not None:
            try:
                events += self.conversation.truncate_item(cleared.item_id, 0, cleared.played_ms)
            except EventError as exc:  # e.g. an out-of-band response: nothing to truncate
                logger.debug("session %s: no truncation of %s: %s", self.id, cleared.item_id, exc.message)
        return events

    # --- playout, for a transport that plays the reply itself (PlaysAudio) -------------------

    def output_audio_started(self, response_id: str) -> None:
        """The transport began playing ``response_id``: ``output_audio_buffer.started``."""
        if not self.ended:
            self._spawn(self._send(server_event("output_audio_buffer.started", response_id=response_id)), "playout")

    def output_audio_stopped(self, response_id: str) -> None:
        """The transport played the last of ``response_id``: ``output_audio_buffer.stopped``."""
        if not self.ended:
            self._spawn(self._send(server_event("output_audio_buffer.stopped", response_id=response_id)), "playout")

    async def _played_after(self, player: PlaysAudio, event: Event) -> None:
        """What a transport that plays the reply learns from an event it was sent: the reply is complete, or
        the user barged in (the reply stops and is truncated, unless ``interrupt_response`` is off)."""
        if event["type"] in AUDIO_DONE:
            player.end_reply(event.get("response_id") or event.get("response", {}).get("id", ""))
        elif event["type"] == "input_audio_buffer.speech_started" and player.playing is not None:
            if (self.session.turn_detection or {}).get("interrupt_response", True):
                for reply in self._cleared(player.clear_reply()):
                    await self._send(reply)

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

    def _overflow(self) -> None:
        """The outbox is full: the client does not read what the unit says."""
        if not self.ended:
            logger.warning("session %s: send buffer full (%s events); closing", self.id, self.outbox.queue.maxsize)
            self._spawn(
                self.end(
                    EndReason.SERVER_CLOSED, CLOSE_POLICY, close_reason="Send buffer full: the client reads too slowly"
                ),
                "overflow",
            )

    async def _send_loop(self) -> None:
        while True:
            out = await self.outbox.queue.get()
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
        """Hands one event to the transport, typed: a transport that plays the reply gets its audio instead
        of the audio delta."""
        shaped = to_beta(event) if self.opening.beta else event
        if shaped is not None:
            out = ServerEvent.of(shaped)
            if out.audio is not None and self.player is not None:
                self.player.play_audio(out.payload["item_id"], out.audio, self.session.output_format)
            else:
                await self.transport.send_event(out)
            if self._followers and out.type not in FOLLOWER_SKIPS:
                await self.tell_followers(out)
        if self.player is not None:
            await self._played_after(self.player, event)

    # --- followers: a second, event-only transport on a live call (``/v1/realtime?call_id=``) --------

    def follow(self, follower: Transport) -> None:
        """Attaches ``follower``: it gets the session's events (no audio) and may send client events."""
        self._followers.add(follower)

    def unfollow(self, follower: Transport) -> None:
        self._followers.discard(follower)

    async def tell_followers(self, event: ServerEvent | Event) -> None:
        """Sends an event to the followers only (one the transport made itself: a key press)."""
        out = event if isinstance(event, ServerEvent) else ServerEvent.of(event)
        for follower in list(self._followers):
            try:
                await follower.send_event(out)
            except Exception:  # a follower that went away must not stop the session's send loop
                logger.debug("session %s: a follower could not be sent %s", self.id, out.type)

    def _session_obj(self) -> Event:
        if self.opening.beta:
            return self.session.as_beta_transcription() if self.session.transcription_only else self.session.as_beta()
        return self.session.as_ga()


def _event_id(event: ClientEvent | None) -> str | None:
    return event.event_id if event is not None else None
