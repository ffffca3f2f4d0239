"""A live translation session (``/v1/realtime/translations``), whatever carries it.

Opened as a voice session is (:func:`open_translation`): the same credentials (``realtime.live.opening``), the same
owner rule, one unit of the pool claimed atomically (a full pool: ``session_limit_reached``), the same mailbox
(an administrator or a revoked key ends it, ``SessionControl``), the same record (its ``model`` says it is a
translation: ``gpt-realtime-translate`` unless the client named another). The unit's threads idle while it runs:
the translation (``pipelines.translation.LiveTranslation``) runs on threads of its own over the process's models.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.utils import timezone

from pipelines import audio, messages as m, translation as t
from pipelines.pool import Lease
from realtime.access import auth
from realtime.access.owner import Owner
from realtime.audit import records
from realtime.live.control import SessionControl
from realtime.live.ending import wind_up
from realtime.live.guards import session_limits
from realtime.live.mailbox import Mailbox
from realtime.live.opening import (
    Opening,
    OpenRequest,
    authenticate,
    claim_soon,
    count_refusal,
    groups,
    principal_name,
    session_limit,
)
from realtime.live.transport import ClosedByClient, PlaysAudio, Refusal, ServerEvent, Transport
from realtime.models import EndReason
from realtime.node.runtime import Runtime
from realtime.protocol import limits, translation as wire
from realtime.protocol.close_codes import CLOSE_INTERNAL, CLOSE_NORMAL, CLOSE_POLICY, CLOSE_TRY_AGAIN
from realtime.protocol.events import error_event
from realtime.protocol.wire import EventError

logger = logging.getLogger(__name__)

# How long a client has to close its socket after ``session.closed`` before the server closes it.
CLIENT_CLOSES_WITHIN_S = 2.0
ENGINES = f"{wire.KIND}: Whisper's translate task (multilingual), the pool's VAD and voice"  # the record's kind


async def open_translation(runtime: Runtime, transport: Transport, request: OpenRequest) -> TranslationSession:
    """Authenticates, claims a unit, joins the mailbox, starts; raises :class:`Refusal` (counted) when no
    session can start, a spent ``ek_`` secret then given back."""
    opening = Opening(
        session_id=request.session_id,
        model=request.model or wire.DEFAULT_MODEL,
        client_addr=request.client_addr,
        user_agent=request.user_agent[:500],
        transport=request.transport,
    )
    principal: auth.Principal | None = None
    session: TranslationSession | None = None
    try:
        principal = await authenticate(replace(request, kind=auth.TRANSLATION))  # a voice agent's secret: refused
        # A call's own checks (a WebRTC offer read and applied), once the credentials passed, before any claim.
        call_config = await request.prepare(principal) if request.prepare is not None else request.call_config
        config = principal.session_config or {}  # a translation secret's settings
        opening = replace(
            opening,
            principal=principal_name(principal, request.scope),
            model=request.model or config.get("model") or wire.DEFAULT_MODEL,
            session_config=config or None,
            call_config=call_config,
        )
        pool = runtime.pool
        if pool is None or not pool.warm or pool.translations is None:
            raise Refusal(
                "server_not_ready",
                "The server is starting: try again shortly.",
                CLOSE_TRY_AGAIN,
                "Server is warming up",
                "server_error",
            )
        translations = pool.translations
        try:  # the models load once, on first use: off the event loop, before any unit is held
            engines = await asyncio.to_thread(translations.get)
        except Exception as exc:
            logger.exception("translation: the models failed to load")
            raise Refusal(
                "server_error",
                f"The translation models failed to load: {exc}",
                CLOSE_INTERNAL,
                "Server error",
                "server_error",
            ) from None

        def claim() -> Lease:  # atomic; the unit itself says nothing here
            lease = pool.claim(lambda out: None, opening.session_id, count_refusal=False)
            if lease is None and not pool.admitting:
                raise Refusal(
                    "server_shutting_down",
                    "The server is shutting down.",
                    CLOSE_TRY_AGAIN,
                    "Server is shutting down",
                    "server_error",
                )
            if lease is None:
                raise session_limit()
            return lease

        lease = await claim_soon(pool, claim)  # a reconnect at once waits for the unit its last session frees
        try:
            session = TranslationSession(runtime, transport, opening, lease, engines)
        except BaseException:
            pool.release(lease)
            raise
        token = auth.scope_token(request.scope) if request.scope is not None else None
        session.owner = Owner.of(token, principal)
        session.call_id = request.call_id
        await session.mailbox.open(groups(session.id, session.owner.api_key_id, request.call_id))
        await session.start()
    except BaseException as exc:
        if principal is not None:
            spent = principal
            runtime.writer.submit(lambda: auth.give_back_secret(spent))
        if isinstance(exc, Refusal):
            count_refusal(runtime, opening, exc)
        if session is not None:
            logger.exception("translation session %s failed to start", session.id)
            await asyncio.shield(session.end(EndReason.ERROR, None))
        raise
    if request.call_id is not None:
        runtime.calls[request.call_id] = session
    used_at = session.started_at
    runtime.writer.submit(lambda: auth.mark_used(principal, used_at))
    return session


class TranslationSession(SessionControl):
    """One translation session: client events in (:meth:`receive`, or a call's microphone :meth:`receive_audio`),
    the translation's output out (events; over a call, the translated speech on its track), one end."""

    def __init__(
        self, runtime: Runtime, transport: Transport, opening: Opening, lease: Lease, engines: t.TranslationEngines
    ) -> None:
        self.runtime = runtime
        self.transport = transport
        # A transport that plays the translation itself (WebRTC) is handed the audio, not audio deltas.
        self.player: PlaysAudio | None = transport if isinstance(transport, PlaysAudio) else None
        self.opening = opening
        self.id = opening.session_id
        self.lease: Lease | None = lease
        self.call_id: str | None = None
        self.owner = Owner()
        self.limits = session_limits()
        self.settings = wire.new_settings(self.id, opening.model, engines.targets, self.limits.max_session_s)
        self.bucket = limits.TokenBucket(self.limits.events_per_second, self.limits.burst)
        self.started_at = timezone.now()
        self._opened = self._heard_at = time.monotonic()
        self.ended = False
        self.closing = False
        self.phrases = self.errors = self._seq = 0
        self.audio_in_bytes = self.audio_out_bytes = 0
        self._playing: str | None = None  # the phrase whose speech the player was last handed
        self._loop = asyncio.get_running_loop()
        self._out: asyncio.Queue[t.TranslationOutput] = asyncio.Queue(maxsize=settings.S2S_SEND_BUFFER_EVENTS)
        self._tasks: set[asyncio.Task[None]] = set()
        self.mailbox = Mailbox(self.id, {kind: functools.partial(act, self) for kind, act in self.MAILBOX.items()})
        for config in (opening.session_config, opening.call_config):  # a secret's, then a call's: checked before
            if config:
                self._open_with(config)
        self.translation = t.LiveTranslation(engines, self._from_thread, name=f"translate-{lease.unit.index}")
        self._apply()

    def _open_with(self, config: dict[str, Any]) -> None:
        try:
            self.settings.update({key: value for key, value in config.items() if key == "audio"})
        except EventError:
            logger.exception("translation session %s: the settings it opened with no longer apply", self.id)

    @property
    def client_addr(self) -> str:
        return self.opening.client_addr

    async def start(self) -> None:
        assert self.lease is not None
        self.runtime.session_started(
            self,
            self.id,
            node=settings.S2S_NODE_NAME,
            unit_index=self.lease.unit.index,
            model=self.opening.model,
            engines=ENGINES,
            started_at=self.started_at,
            principal=self.opening.principal,
            client_addr=self.opening.client_addr,
            user_agent=self.opening.user_agent,
            transport=self.opening.transport,
            **self.owner.record_fields(),
        )
        self._spawn(self._send_loop(), "send")
        self._spawn(self._watch_limits(), "limits")
        await self._send(wire.created(self.settings))

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=f"{name}-{self.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- client -> server ------------------------------------------------------------

    async def receive(self, text: str | None, size: int) -> None:
        if self.ended:
            return
        if not self.bucket.take():
            await self._send(error_event("rate_limit_exceeded", "Too many events: slow down.", None, None))
            return
        event: wire.TranslationEvent | None = None
        try:
            event = wire.parse(text, settings.S2S_MAX_EVENT_BYTES)
            if event.type == wire.APPEND:
                self._append(event.audio)
            elif event.type == wire.UPDATE:
                self.settings.update(event.session)
                self._apply()
                await self._send(wire.updated(self.settings))
            elif event.type == wire.CLOSE and not self.closing:
                self.closing = True
                self.translation.flush()  # session.closed follows the last of what was heard (t.Flushed)
        except EventError as exc:
            self.errors += 1
            event_id = exc.event_id or (event.event_id if event is not None else None)
            await self._send(error_event(exc.code, exc.message, exc.param, event_id, exc.error_type))

    async def receive_audio(self, data: bytes) -> None:
        """A call's microphone (24 kHz PCM16): an ``session.input_audio_buffer.append`` without the event."""
        if not self.ended:
            self._append(data)

    def _append(self, data: bytes) -> None:
        if len(data) % 2:
            raise EventError("invalid_value", "'audio' must be 24 kHz PCM16: an even number of bytes.", "audio")
        if not self.closing:
            self._heard_at = time.monotonic()
            self.audio_in_bytes += len(data)
            self.translation.feed(data)

    def _apply(self) -> None:
        self.translation.with_source = self.settings.transcription is not None
        self.translation.target = self.settings.language
        self.translation.noise_reduction = self.settings.noise_reduction_type

    # --- server -> client ------------------------------------------------------------

    def _from_thread(self, out: t.TranslationOutput) -> None:
        """Called on the translation's threads: hops to the event loop."""
        self._loop.call_soon_threadsafe(self._put, out)

    def _put(self, out: t.TranslationOutput) -> None:
        if self.ended:
            return
        try:
            self._out.put_nowait(out)
        except asyncio.QueueFull:
            logger.warning("translation session %s: send buffer full; closing", self.id)
            self._spawn(
                self.end(
                    EndReason.SERVER_CLOSED, CLOSE_POLICY, close_reason="Send buffer full: the client reads too slowly"
                ),
                "overflow",
            )

    async def _send_loop(self) -> None:
        while True:
            out = await self._out.get()
            match out:
                case t.SourceText(text=text, elapsed_ms=at):
                    self._record("user", f"phrase_{at}_source", text)
                    await self._send(wire.input_transcript(text, at))
                case t.TranslatedText(text=text, elapsed_ms=at):
                    self.phrases += 1
                    self._record("assistant", f"phrase_{at}", text)
                    await self._send(wire.output_transcript(text, at))
                case t.TranslatedAudio(pcm16=pcm, elapsed_ms=at):
                    self.audio_out_bytes += len(pcm)
                    await self._speak(pcm, at)
                case t.TranslationFailed(message=message):
                    self.errors += 1
                    await self._send(
                        error_event(
                            "translation_failed",
                            f"A phrase could not be translated: {message}",
                            None,
                            None,
                            "server_error",
                        )
                    )
                case t.Flushed() if self.closing:
                    self._end_playing()
                    await self._send(wire.closed())
                    self._spawn(self._close(), "close")

    async def _close(self) -> None:
        """After ``session.closed``: the session ends at once (its unit free, its record written); a WebSocket is
        the client's to close, as OpenAI's SDKs do on that event, and the server's only after
        :data:`CLIENT_CLOSES_WITHIN_S`; a call hangs up now."""
        if not isinstance(self.transport, ClosedByClient):
            await self.end(EndReason.CLIENT_CLOSED, CLOSE_NORMAL, close_reason="Session closed")
            return
        await self.end(EndReason.CLIENT_CLOSED, CLOSE_NORMAL)  # no close_reason: the socket stays open
        await self.transport.close_unless_closed(CLOSE_NORMAL, "Session closed", CLIENT_CLOSES_WITHIN_S)

    async def _speak(self, pcm: bytes, at: int) -> None:
        """A phrase's speech: an audio delta, or, to a transport that plays it (a call's track), the audio."""
        if self.player is None:
            await self._send(wire.output_audio(pcm, at))
            return
        phrase = f"phrase_{at}"
        if self._playing != phrase:
            self._end_playing()  # the last phrase's speech is all queued: it plays out, then this one
            self._playing = phrase
        self.player.play_audio(phrase, m.AudioOut(0, phrase, pcm), audio.PCM)  # generation: the player ignores it

    def _end_playing(self) -> None:
        if self.player is not None and self._playing is not None:
            self.player.end_reply(self._playing)
            self._playing = None

    def output_audio_started(self, response_id: str) -> None:
        """A call's track began a phrase's speech (translation sessions send no event for it)."""

    def output_audio_stopped(self, response_id: str) -> None:
        """A call's track played the last of a phrase's speech."""

    def _record(self, role: str, item_id: str, text: str) -> None:
        """A phrase in the session's record: the source (``user``) beside its translation (``assistant``)."""
        self._seq += 1
        records.item(self.runtime.writer, self.id, item_id, seq=self._seq, role=role, text=text.strip())

    async def _send(self, event: dict[str, Any]) -> None:
        await self.transport.send_event(ServerEvent.of(event))

    async def _watch_limits(self) -> None:
        """The session's longest life (``S2S_MAX_SESSION_S``) and, as for voice sessions, its idle limit
        (``S2S_IDLE_TIMEOUT_S``), here counted from the last audio heard: a translation with nothing to
        translate holds its unit no longer than that."""
        idle_s = self.limits.idle_timeout_s
        while True:
            now = time.monotonic()
            ends_at = self._opened + self.limits.max_session_s
            if now >= ends_at:
                await self._end_by_limit(limits.expired(self.limits))
                return
            if idle_s:
                idle_at = self._heard_at + idle_s
                if now >= idle_at:
                    await self._end_by_limit(wire.no_audio(idle_s))
                    return
                ends_at = min(ends_at, idle_at)
            await asyncio.sleep(ends_at - now)

    async def _end_by_limit(self, exc: EventError) -> None:
        logger.info("translation session %s: %s", self.id, exc.code)
        await self.end(EndReason.SERVER_CLOSED, CLOSE_POLICY, exc, exc.code)

    # --- end ----------------------------------------------------------------------------

    async def key_revoked(self, api_key_id: int | None) -> None:
        if api_key_id is None or api_key_id == self.owner.api_key_id:
            await self.end_revoked()

    async def end(
        self, reason: str, close_code: int | None, error: EventError | None = None, close_reason: str = ""
    ) -> None:
        """The one way a translation session ends: stop the translation, then as every session ends
        (:func:`realtime.live.ending.wind_up`). Runs once."""
        if self.ended:
            return
        self.ended = True
        self.translation.close()
        if self.call_id is not None and self.runtime.calls.get(self.call_id) is self:
            del self.runtime.calls[self.call_id]
        await wind_up(
            self,
            self._send,
            reason,
            close_code,
            error,
            close_reason,
            self._tasks,
            lambda: {
                "turns": self.phrases,
                "errors": self.errors,
                "audio_in_seconds": audio.duration_ms(self.audio_in_bytes, audio.PCM) / 1000,
                "audio_out_seconds": audio.duration_ms(self.audio_out_bytes, audio.PCM) / 1000,
            },
        )
