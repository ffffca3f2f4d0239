"""The Realtime WebRTC transport: one peer connection (aiortc) carries one session: a voice agent's
:class:`SessionCore`, or a translation's (``/v1/realtime/translations/calls``: the translated speech on the track, its
events on the channel).

Client and server events travel as JSON on the ``oai-events`` data channel, as over a
WebSocket, except the reply's audio: it rides the outgoing Opus track
(:class:`ReplyTrack`): the session core hands it the reply's audio
(:class:`realtime.live.transport.PlaysAudio`), so ``response.output_audio.delta``
never goes on the channel. Since the server plays the audio, it owns the output buffer:
the core says ``output_audio_buffer.started``/``stopped``/``cleared`` when this track
starts, stops or is cleared (on barge-in, or ``output_audio_buffer.clear``). The session
is opened, and ended from elsewhere, as every transport's is
(:func:`realtime.live.core.open_session`).

The peer connection lives on the event loop the server runs the ASGI app on
(daphne's Twisted asyncio reactor, or uvicorn's loop), which lives as long as the
process; its ICE, DTLS and RTP tasks run there beside the WebSocket sessions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from aiortc import RTCConfiguration, RTCDataChannel, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from django.conf import settings

from realtime.live.core import open_session
from realtime.live.opening import Opening, OpenRequest
from realtime.live.transport import ServerEvent, Transport
from realtime.models import EndReason
from realtime.node.runtime import Runtime
from realtime.protocol.events import error_event
from realtime.transports.playout import PlaysFromQueue
from realtime.transports.webrtc import sctp_limit
from realtime.transports.webrtc.media import MicrophoneConverter, ReplyTrack, hear_at_once

sctp_limit.install()  # the data channel's advertised maximum, enforced while reassembling

logger = logging.getLogger(__name__)

EVENTS_CHANNEL = "oai-events"
MAX_EARLY_EVENTS = 1000  # events sent before the data channel opened, kept until it does


class CallSession(Protocol):
    """The session a call carries: a voice agent's (:class:`realtime.live.core.SessionCore`) or a translation's
    (:class:`realtime.live.translation.TranslationSession`)."""

    id: str
    ended: bool
    opening: Opening

    async def receive(self, text: str | None, size: int) -> None: ...

    async def receive_audio(self, data: bytes) -> None: ...

    async def end(self, reason: str, close_code: int | None) -> None: ...

    def output_audio_started(self, response_id: str) -> None: ...

    def output_audio_stopped(self, response_id: str) -> None: ...


Opener = Callable[[Runtime, Transport, OpenRequest], Awaitable[CallSession]]


def ice_servers() -> list[RTCIceServer]:
    return [
        RTCIceServer(urls=s["urls"], username=s.get("username"), credential=s.get("credential"))
        for s in settings.S2S_ICE_SERVERS
    ]


class WebRTCCall(PlaysFromQueue):
    """One call: its peer connection, its data channel, its tracks, and the session behind them (``opener`` opens
    it: a voice agent's, or a translation's)."""

    def __init__(self, call_id: str, runtime: Runtime, address: str = "", opener: Opener = open_session) -> None:
        self.id = call_id
        self.runtime = runtime
        self.opener = opener
        self.address = address  # the client's, for the per-address limits
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=ice_servers()))
        self.reply = ReplyTrack(self._playout_started, self._playout_stopped)
        self.playout = self.reply.queue  # what PlaysFromQueue plays from
        self.core: CallSession | None = None
        self.channel: RTCDataChannel | None = None
        self.closed = False
        self._early: list[str] = []
        self._inbox: asyncio.Queue[tuple[str | None, int]] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self._heard_at = time.monotonic()  # last media or channel activity from the peer
        self.pc.on("datachannel", self._on_datachannel)
        self.pc.on("track", self._on_track)
        self.pc.on("connectionstatechange", self._on_connection_state)

    # --- signalling ---------------------------------------------------------------

    async def accept_offer(self, sdp: str) -> None:
        """Applies the client's offer; raises ``ValueError`` (a 400) when aiortc cannot use it."""
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        if not any(t.kind == "audio" for t in self.pc.getTransceivers()):
            raise ValueError("the offer has no audio m-line")

    async def answer(self, request: OpenRequest) -> str:
        """Opens the session (raises :class:`realtime.live.core.Refusal`; ``request.prepare`` applies the
        offer), then answers; the session starts at once."""
        self.core = await self.opener(self.runtime, self, replace(request, call_id=self.id))
        try:
            self.pc.addTrack(self.reply)
            await self.pc.setLocalDescription(await self.pc.createAnswer())
        except BaseException:
            await self.finish(EndReason.ERROR)
            raise
        self._spawn(self._watch_peer(), "peer-watch")
        self._spawn(self._connect_deadline(), "connect-deadline")
        self._spawn(self._handle_inbox(), "inbox")
        return self.pc.localDescription.sdp

    # --- the end ---------------------------------------------------------------------

    async def discard(self) -> None:
        """Closes a call that never became a session (a refused offer or a full pool).

        Its microphone reader started when the offer was applied (aiortc announces the track then): it is
        cancelled and awaited here, or it would be collected still pending.
        """
        self.closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.reply.stop()
        try:
            await self.pc.close()
        except Exception:  # aiortc cannot close what a half-applied offer left (no sockets are open yet)
            logger.debug("call %s: closing an unanswered peer connection failed", self.id, exc_info=True)

    async def finish(self, reason: str) -> None:
        """Ends the session for a reason on the peer's side (nothing to tell it), and closes the connection."""
        if self.core is not None and not self.core.ended:
            await self.core.end(reason, None)
        await self._close_peer()

    async def _close_peer(self) -> None:
        if self.closed:
            return
        self.closed = True
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        self.reply.stop()
        try:
            await self.pc.close()
        except Exception:
            logger.exception("call %s: closing the peer connection failed", self.id)

    def _end_soon(self, reason: str, why: str) -> None:
        if self.core is not None and not self.core.ended:
            logger.info("call %s: %s; ending session %s", self.id, why, self.core.id)
        self._spawn(self.finish(reason), "finish")

    # --- the transport (realtime.live.transport.Transport, PlaysAudio) ---------------

    async def send_event(self, event: ServerEvent) -> None:
        try:
            self._send_text(json.dumps(event.to_wire()))
        except Exception:  # the session's send loop must go on whatever one event does here
            logger.exception("call %s: could not send %s", self.id, event.type)

    async def close(self, code: int, reason: str) -> None:
        """The server ends the call (a limit, an admin, shutdown): the ``error`` that says why went out already."""
        if self.channel is not None and self.channel.readyState == "open":
            await asyncio.sleep(0.05)  # let the error event leave before the channel goes
        await self._close_peer()

    def _send_text(self, text: str) -> None:
        channel = self.channel
        if channel is None or channel.readyState != "open":
            if len(self._early) < MAX_EARLY_EVENTS:
                self._early.append(text)
            return
        if channel.bufferedAmount > settings.S2S_MAX_SEND_BUFFER_BYTES:
            self._end_soon(
                EndReason.SERVER_CLOSED, "the data channel's send buffer is full (the client reads too slowly)"
            )
            return
        channel.send(text)

    # --- the peer --------------------------------------------------------------------

    def _on_datachannel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENTS_CHANNEL or self.channel is not None:
            logger.info("call %s: ignoring data channel %r", self.id, channel.label)
            return
        self.channel = channel
        channel.on("message", self._on_message)
        channel.on(sctp_limit.TOO_LARGE, self._on_message_too_large)
        channel.on("open", self._flush_early)
        channel.on("close", lambda: self._end_soon(EndReason.CLIENT_CLOSED, "the data channel closed"))
        if channel.readyState == "open":
            self._flush_early()

    def _flush_early(self) -> None:
        early, self._early = self._early, []
        for text in early:
            self._send_text(text)

    def _on_message(self, message: str | bytes) -> None:
        self._heard_at = time.monotonic()
        if isinstance(message, str):
            self._inbox.put_nowait((message, len(message.encode())))
        else:
            self._inbox.put_nowait((None, len(message)))

    def _on_message_too_large(self, limit: int) -> None:
        self._heard_at = time.monotonic()
        message = (
            f"The data channel message is over {limit} bytes, the maximum this server's answer advertises "
            "(a=max-message-size). It was dropped."
        )
        self._send_text(json.dumps(error_event("event_too_large", message)))

    async def _handle_inbox(self) -> None:
        """Client events in the order they came (the core's rate limit bounds what one does)."""
        while True:
            text, size = await self._inbox.get()
            if self.core is None or self.core.ended:
                return
            await self.core.receive(text, size)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            for transceiver in self.pc.getTransceivers():
                if transceiver.receiver.track is track:
                    hear_at_once(transceiver.receiver)
            self._spawn(self._pump_microphone(track), "microphone")

    async def _pump_microphone(self, track: MediaStreamTrack) -> None:
        """Decoded Opus frames -> 24 kHz PCM16 -> the unit, as they come."""
        converter = MicrophoneConverter()
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return  # the track ended: the connection state or the watchdog ends the call
            self._heard_at = time.monotonic()
            if self.core is None or self.core.ended:
                return
            await self.core.receive_audio(converter.convert(frame))

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        logger.debug("call %s: connection %s", self.id, state)
        if state == "failed":
            self._end_soon(EndReason.CLIENT_CLOSED, "ICE failed")
        elif state == "closed":
            self._end_soon(EndReason.CLIENT_CLOSED, "the peer connection closed")

    async def _watch_peer(self) -> None:
        """Hangs up a peer that sends nothing for ``S2S_WEBRTC_PEER_TIMEOUT_S``: no media, no event, and no
        RTCP receiver report on the reply track (which a typing-only client still sends, about every second);
        and one that sends only those reports for ``S2S_WEBRTC_SILENCE_TIMEOUT_S`` (no audio, no event)."""
        timeout, silence = settings.S2S_WEBRTC_PEER_TIMEOUT_S, settings.S2S_WEBRTC_SILENCE_TIMEOUT_S
        while True:
            silent_for = time.monotonic() - self._heard_at
            if silent_for >= silence:
                self._end_soon(EndReason.CLIENT_CLOSED, f"the peer sent no audio and no event for {silence:.0f}s")
                return
            if silent_for >= timeout:
                report_age = await self._last_report_age()
                if report_age is None or report_age >= timeout:
                    self._end_soon(EndReason.CLIENT_CLOSED, f"the peer sent nothing for {timeout:.0f}s")
                    return
                await asyncio.sleep(max(0.05, min(timeout - report_age, silence - silent_for)))
                continue
            await asyncio.sleep(min(timeout, silence) - silent_for)

    async def _connect_deadline(self) -> None:
        """Ends a call whose peer connection has not connected ``S2S_WEBRTC_CONNECT_TIMEOUT_S`` after the answer
        (an offer that was never meant to connect holds a unit no longer than that)."""
        timeout = settings.S2S_WEBRTC_CONNECT_TIMEOUT_S
        await asyncio.sleep(timeout)
        if self.pc.connectionState != "connected":
            self._end_soon(EndReason.CLIENT_CLOSED, f"the peer did not connect within {timeout:.0f}s")

    async def _last_report_age(self) -> float | None:
        """Seconds since the peer's last RTCP report about the reply track, or None if it sent none."""
        for sender in self.pc.getSenders():
            for stats in (await sender.getStats()).values():
                if stats.type == "remote-inbound-rtp":
                    return (datetime.now(UTC) - stats.timestamp).total_seconds()
        return None

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=f"{name}-{self.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
