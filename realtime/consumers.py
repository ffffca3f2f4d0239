"""The Realtime WebSocket endpoint: claims a unit, translates events both ways, releases the unit."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from typing import Any
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from pipelines import audio, messages as m
from pipelines.ids import new_id
from pipelines.pool import Lease, PipelinePool
from realtime import auth, cluster, limits, records, runtime
from realtime.conversation import Conversation, Port
from realtime.events import EventError, error_event, parse, server_event, to_beta
from realtime.models import EndReason
from realtime.session import SessionConfig

logger = logging.getLogger(__name__)

SESSION_LIMIT_REASON = "All session slots are in use"
CLOSE_POLICY = 1008
CLOSE_TRY_AGAIN = 1013
CLOSE_INTERNAL = 1011
ADMIN_ENDED_REASON = "Session ended by an administrator"
CLOSE_GOING_AWAY = 1001
SHUTDOWN_REASON = "The server is shutting down"
SEND_BUFFER_FULL_REASON = "Send buffer full: the client reads too slowly"

# Consumers holding a unit, for the graceful shutdown (``close_all``).
LIVE: weakref.WeakSet[RealtimeConsumer] = weakref.WeakSet()
GROUP_TIMEOUT_S = 2.0


class RealtimeConsumer(AsyncWebsocketConsumer):
    """One Realtime session per socket.

    Stage threads hand pipeline output to the event loop with
    ``call_soon_threadsafe``; a send task owned by this consumer turns it into
    server events. Nothing here polls.
    """

    # Client event type -> Conversation method (the dispatch table of the protocol).
    HANDLERS = {
        "input_audio_buffer.append": "append_audio",
        "input_audio_buffer.commit": "commit_audio",
        "input_audio_buffer.clear": "clear_audio",
        "conversation.item.create": "create_item",
        "conversation.item.retrieve": "retrieve_item",
        "conversation.item.delete": "delete_item",
        "conversation.item.truncate": "truncate_item",
        "response.create": "create_response",
        "response.cancel": "cancel_response",
    }

    lease: Lease | None = None
    pool: PipelinePool | None = None
    conversation: Conversation | None = None
    session: SessionConfig | None = None
    _send_task: asyncio.Task[None] | None = None
    _released = False
    _group: str | None = None
    principal: auth.Principal | None = None
    _limit_task: asyncio.Task[None] | None = None
    _turn_timeout_task: asyncio.Task[None] | None = None
    _turn_timeout_due: float | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Whatever ends this consumer, even an exception no handler caught, the unit goes back."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self._released and self.lease is not None:
                logger.error("session %s ended without a disconnect; releasing its unit", self.session_id)
                await asyncio.shield(self._release(EndReason.ERROR))

    async def connect(self) -> None:
        self.session_id = new_id("sess")
        self.beta = self._header("openai-beta").replace(" ", "").lower().find("realtime=v1") >= 0
        self.end_reason = EndReason.CLIENT_CLOSED
        self.close_code: int | None = None
        self.started = timezone.now()
        offered = self.scope.get("subprotocols") or []
        # Only "realtime" is ever echoed: never the "openai-insecure-api-key.KEY" subprotocol.
        await self.accept(subprotocol="realtime" if "realtime" in offered else None)
        try:  # before any claim: a connection without valid credentials never holds a unit
            self.principal = await auth.authenticate(self.scope, self.session_id)
        except auth.AuthError as exc:
            logger.info("session %s refused: %s", self.session_id, exc.code)
            await self._refuse(exc.code, exc.message, exc.close_code, exc.reason, exc.error_type)
            return
        if self.principal.name:
            self.scope["s2s_principal"] = f"{self.principal.kind}:{self.principal.name}"

        pool = runtime.get_pool()
        if pool is None or not pool.warm:
            message = ("The server is starting: its models are still loading. Try again shortly."
                       if runtime.start_error is None else f"The server failed to start its pipeline: {runtime.start_error}")
            await self._refuse("server_not_ready", message, CLOSE_TRY_AGAIN, "Server is warming up")
            return
        loop = asyncio.get_running_loop()
        self._outbox: asyncio.Queue[m.Outbound] = asyncio.Queue(maxsize=settings.S2S_SEND_BUFFER_EVENTS)

        def sink(out: m.Outbound) -> None:  # called on stage threads
            loop.call_soon_threadsafe(self._deliver, out)

        lease = pool.claim(sink, self.session_id)  # atomic: no await between finding and taking
        if lease is None and not pool.admitting:
            await self._refuse("server_shutting_down", "The server is shutting down: connect to another one.",
                               CLOSE_TRY_AGAIN, "Server is shutting down")
            return
        if lease is None:
            await self._refuse("session_limit_reached", SESSION_LIMIT_REASON, CLOSE_POLICY, SESSION_LIMIT_REASON)
            return
        self.pool, self.lease = pool, lease
        LIVE.add(self)
        try:
            self._start_session(lease)
            await self._join_group()
            await self._send_event(server_event("session.created", session=self._session_obj()))
        except Exception:
            logger.exception("session %s failed to start", self.session_id)
            await self._release(EndReason.ERROR)
            raise

    def _start_session(self, lease: Lease) -> None:
        model = parse_qs(self.scope.get("query_string", b"").decode()).get("model", [settings.S2S_DEFAULT_MODEL])[0]
        self.session = SessionConfig(self.session_id, model, settings.S2S_POOL.engines.all_voices)
        port = Port(lease.generation, lease.unit.submit, lease.unit.cancel)
        self.conversation = Conversation(self.session, port, settings.S2S_MAX_EVENT_BYTES)
        if self.principal is not None and self.principal.session_config:
            try:  # the settings the client secret was minted with (validated then)
                self.session.update(self.principal.session_config, beta=False)
            except EventError:
                logger.exception("session %s: the client secret's session settings no longer apply", self.session_id)
        lease.unit.context.settings = self.session.settings()
        self.limits = limits.Limits.from_settings()
        self.bucket = limits.TokenBucket(self.limits.events_per_second, self.limits.burst)
        self.input_buffer = limits.InputBuffer(self.limits.max_input_buffer_ms)
        self._active_at = self._rate_reported_at = self._session_started = time.monotonic()
        self._limit_task = asyncio.create_task(self._watch_limits(), name=f"limits-{self.session_id}")
        self.recorder = records.SessionRecorder(self.session_id)
        self._send_task = asyncio.create_task(self._send_loop(), name=f"send-{self.session_id}")
        records.session_started(self.session_id, node=settings.S2S_NODE_NAME, unit_index=lease.unit.index,
                                model=model, started_at=self.started, **self._client())

    async def _refuse(self, code: str, message: str, close_code: int, reason: str,
                      error_type: str = "invalid_request_error") -> None:
        if self.principal is not None:
            auth.give_back_secret(self.principal)  # its session never started
        self.end_reason = EndReason.REJECTED
        records.session_started(self.session_id, node=settings.S2S_NODE_NAME, model="", started_at=self.started,
                                ended_at=timezone.now(), end_reason=EndReason.REJECTED, close_code=close_code,
                                **self._client())
        await self._send_event(error_event(code, message, error_type=error_type))
        await self.close(code=close_code, reason=reason)

    async def disconnect(self, code: int) -> None:
        if self.close_code is None:
            self.close_code = code
            if code == CLOSE_POLICY:  # the server's protocol dropped a client that does not read (send buffer full)
                self.end_reason = EndReason.SERVER_CLOSED
        await self._release(self.end_reason)
        await self._leave_group()

    # --- the session's channel-layer group (admin actions from any process) ---

    async def _join_group(self) -> None:
        """Joins the group an admin's "end session" is sent to; without a channel layer the session still runs."""
        group = cluster.session_group(self.session_id)
        try:
            await asyncio.wait_for(self.channel_layer.group_add(group, self.channel_name), GROUP_TIMEOUT_S)
            self._group = group
        except Exception:
            logger.exception("session %s: could not join its channel-layer group; admin actions cannot reach it",
                             self.session_id)

    async def _leave_group(self) -> None:
        if self._group is None:
            return
        group, self._group = self._group, None
        try:
            await asyncio.wait_for(self.channel_layer.group_discard(group, self.channel_name), GROUP_TIMEOUT_S)
        except Exception:
            logger.exception("session %s: could not leave its channel-layer group", self.session_id)

    async def session_end(self, message: dict[str, Any]) -> None:
        """``session.end`` from the admin: tell the client, free the unit, close with 1008."""
        if self._released or self.lease is None:
            return
        logger.info("session %s: ended by an administrator", self.session_id)
        self.end_reason, self.close_code = EndReason.ADMIN_ENDED, CLOSE_POLICY
        await self._send_event(error_event("session_ended_by_admin", "An administrator ended this session.",
                                           error_type="server_error"))
        await self._release(EndReason.ADMIN_ENDED)
        await self.close(code=CLOSE_POLICY, reason=ADMIN_ENDED_REASON)

    async def _release(self, reason: str) -> None:
        """Gives the unit back exactly once, whatever ended the session."""
        if self._released or self.lease is None or self.pool is None:
            return
        self._released = True
        LIVE.discard(self)
        for task in (self._send_task, self._limit_task, self._turn_timeout_task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        lease, conversation = self.lease, self.conversation
        try:
            await asyncio.wrap_future(self.pool.release(lease))
        finally:
            fields: dict[str, Any] = {"ended_at": timezone.now(), "end_reason": reason, "close_code": self.close_code}
            if conversation is not None and self.session is not None:
                fields.update(turns=conversation.turns, errors=conversation.errors,
                              audio_in_seconds=audio.duration_ms(conversation.audio_in_bytes, self.session.input_format) / 1000)
            records.session_ended(self.session_id, **fields)

    # --- client -> server ---------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.conversation is None or self._released:
            return
        self._active_at = time.monotonic()
        if not self.bucket.take():
            await self._rate_limited()
            return
        event_id = None
        try:
            limits.check_frame(len(text_data) if text_data is not None else len(bytes_data or b""), self.limits)
            event = parse(text_data)
            event_id = event.get("event_id")
            audio_ms = self._check_input_buffer(event)
            for reply in self._dispatch(event):
                await self._send_event(reply)
            self.recorder.client_event(event, self.conversation)
            self._schedule_turn_timeout()
            if audio_ms:
                self.input_buffer.add(audio_ms, self._server_vad())
        except EventError as exc:
            self.conversation.errors += 1
            await self._send_event(error_event(exc.code, exc.message, exc.param, event_id or exc.event_id,
                                               exc.error_type))
        except Exception:  # a bug in handling one event must not end the session (or leak its unit)
            logger.exception("session %s: could not handle an event", self.session_id)
            self.conversation.errors += 1
            await self._send_event(error_event("server_error", "The server could not handle this event.", None,
                                               event_id, "server_error"))

    # --- limits -------------------------------------------------------------------

    async def _rate_limited(self) -> None:
        """Drops the event; reports at most once a second, so a flood cannot make the server flood back."""
        assert self.conversation is not None
        self.conversation.errors += 1
        now = time.monotonic()
        if self.bucket.dropped == 1 or now - self._rate_reported_at >= 1.0:
            self._rate_reported_at = now
            exc = limits.rate_limited(self.bucket)
            await self._send_event(error_event(exc.code, exc.message, exc.param, None, exc.error_type))

    def _server_vad(self) -> bool:
        return self.session is not None and self.session.turn_detection is not None

    def _check_input_buffer(self, event: dict[str, Any]) -> int:
        """The ms an append adds to the input buffer; raises ``input_audio_buffer_full`` past the limit."""
        if event["type"] != "input_audio_buffer.append" or not isinstance(event.get("audio"), str):
            return 0
        assert self.session is not None
        ms = audio.duration_ms(len(event["audio"]) * 3 // 4, self.session.input_format)
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

    def _schedule_turn_timeout(self) -> None:
        """Keeps one timer for ``turn_detection.idle_timeout_ms``, following the conversation's due time."""
        assert self.conversation is not None
        due = self.conversation.idle_due
        if due == self._turn_timeout_due:
            return
        self._turn_timeout_due = due
        if self._turn_timeout_task is not None:
            self._turn_timeout_task.cancel()
        self._turn_timeout_task = asyncio.create_task(self._turn_timeout(due)) if due is not None else None

    async def _turn_timeout(self, due: float) -> None:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        assert self.conversation is not None
        if self._released or self.conversation.idle_due != due:
            return
        self._turn_timeout_due = None
        self._turn_timeout_task = None
        for event in self.conversation.idle_timeout():
            await self._send_event(event)

    async def _end_by_limit(self, exc: EventError) -> None:
        logger.info("session %s: %s", self.session_id, exc.code)
        self.end_reason, self.close_code = EndReason.SERVER_CLOSED, CLOSE_POLICY
        await self._send_event(error_event(exc.code, exc.message, exc.param, None, exc.error_type))
        await self._release(EndReason.SERVER_CLOSED)
        await self.close(code=CLOSE_POLICY, reason=exc.code)

    async def going_away(self) -> None:
        """The server is shutting down and the grace period is over: free the unit, close with 1001."""
        if self._released or self.lease is None:
            return
        self.end_reason, self.close_code = EndReason.SERVER_CLOSED, CLOSE_GOING_AWAY
        await self._send_event(error_event("server_shutting_down", "The server is shutting down.", error_type="server_error"))
        await self._release(EndReason.SERVER_CLOSED)
        await self.close(code=CLOSE_GOING_AWAY, reason=SHUTDOWN_REASON)

    async def _unit_failed(self, out: m.UnitFailed) -> None:
        """A stage thread died: the session cannot go on. Close with 1011; the release rebuilds the unit."""
        if self._released:
            return
        logger.error("session %s: unit failed (%s): closing with 1011", self.session_id, out.stage)
        self.end_reason, self.close_code = EndReason.ERROR, CLOSE_INTERNAL
        await self._send_event(error_event("server_error", f"The server's pipeline failed ({out.message}). "
                                           "Reconnect to start a new session.", error_type="server_error"))
        await self._release(EndReason.ERROR)
        await self.close(code=CLOSE_INTERNAL, reason="Internal error: the pipeline failed")

    def _dispatch(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event["type"]
        assert self.conversation is not None and self.session is not None
        if kind in ("session.update", "transcription_session.update"):
            return self._session_update(event)
        if kind == "output_audio_buffer.clear":
            raise EventError("invalid_value", "output_audio_buffer.clear is only supported for WebRTC and SIP connections; "
                             "over WebSocket the client owns playback (use conversation.item.truncate).", "type")
        return getattr(self.conversation, self.HANDLERS[kind])(event)

    def _session_update(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        assert self.session is not None and self.lease is not None
        if "session" not in event:
            raise EventError("missing_required_parameter", "Missing required parameter: 'session'.", "session")
        self.session.update(event["session"], beta=self.beta)
        self.lease.unit.context.settings = self.session.settings()
        return [server_event("session.updated", session=self._session_obj())]

    # --- server -> client ---------------------------------------------------

    def _deliver(self, out: m.Outbound) -> None:
        """On the event loop: queue pipeline output for the send task (bounded)."""
        if self._released:
            return
        try:
            self._outbox.put_nowait(out)
        except asyncio.QueueFull:
            logger.warning("session %s: send buffer full (%s events); closing", self.session_id, self._outbox.maxsize)
            self._overflow_task = asyncio.ensure_future(self._overflow())

    async def _overflow(self) -> None:
        if self._released:
            return
        self.end_reason = EndReason.SERVER_CLOSED
        self.close_code = CLOSE_POLICY
        await self._release(EndReason.SERVER_CLOSED)
        await self.close(code=CLOSE_POLICY, reason=SEND_BUFFER_FULL_REASON)

    async def _send_loop(self) -> None:
        assert self.conversation is not None
        while True:
            out = await self._outbox.get()
            self._active_at = time.monotonic()
            if isinstance(out, m.UnitFailed):
                self._failure_task = asyncio.ensure_future(self._unit_failed(out))
                continue
            self._track_input_buffer(out)
            try:
                events = self.conversation.on_output(out)
            except Exception:
                logger.exception("session %s: could not translate %s", self.session_id, type(out).__name__)
                continue
            self.recorder.output(out, self.conversation)
            self._schedule_turn_timeout()
            for event in events:
                await self._send_event(event)
                if event["type"] == "response.done":
                    await self._send_event(server_event("rate_limits.updated", rate_limits=limits.rate_limits(
                        self.bucket, self.limits, self._session_started)))

    async def _send_event(self, event: dict[str, Any]) -> None:
        if self.beta:
            event = to_beta(event)
            if event is None:
                return
        await self.send(text_data=json.dumps(event))

    # --- helpers --------------------------------------------------------------

    def _session_obj(self) -> dict[str, Any]:
        assert self.session is not None
        return self.session.as_beta() if self.beta else self.session.as_ga()

    def _header(self, name: str) -> str:
        for key, value in self.scope.get("headers", []):
            if key.decode("latin1").lower() == name:
                return value.decode("latin1")
        return ""

    def _client(self) -> dict[str, str]:
        client = self.scope.get("client") or ("", 0)
        return {"client_addr": str(client[0] or ""), "user_agent": self._header("user-agent")[:500],
                "principal": records.principal_of(self.scope)}



async def close_all() -> int:
    """Closes every live session with 1001 (the end of a graceful shutdown); returns how many there were."""
    consumers = list(LIVE)
    await asyncio.gather(*(consumer.going_away() for consumer in consumers), return_exceptions=True)
    return len(consumers)
