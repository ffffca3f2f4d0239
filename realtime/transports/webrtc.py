"""The Realtime WebRTC transport: one peer connection (aiortc) carries one :class:`SessionCore`.

Client and server events travel as JSON on the ``oai-events`` data channel, as over a
WebSocket, except the reply's audio: it rides the outgoing Opus track
(:class:`ReplyTrack`), so ``response.output_audio.delta`` never goes on the channel.
Since the server plays the audio, it owns the output buffer: it says
``output_audio_buffer.started``/``stopped``/``cleared``, clears it when the user barges
in (and truncates the reply to what was played), and honours ``output_audio_buffer.clear``.

The peer connection lives on the event loop the server runs the ASGI app on
(daphne's Twisted asyncio reactor, or uvicorn's loop), which lives as long as the
process; its ICE, DTLS and RTP tasks run there beside the WebSocket sessions.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from aiortc import RTCConfiguration, RTCDataChannel, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from channels.layers import get_channel_layer
from django.conf import settings

from realtime.node import cluster
from realtime.protocol.core import Event, Opening, SessionCore
from realtime.protocol.events import EventError, server_event
from realtime.models import EndReason
from realtime.node.runtime import Runtime
from realtime.transports.webrtc_media import MicrophoneConverter, ReplyTrack

logger = logging.getLogger(__name__)

EVENTS_CHANNEL = "oai-events"
AUDIO_DELTAS = {"response.output_audio.delta", "response.audio.delta"}
AUDIO_DONE = {"response.output_audio.done", "response.audio.done", "response.done"}
MAX_EARLY_EVENTS = 1000  # events sent before the data channel opened, kept until it does


HANG_UP = "call.hang_up"


def call_group(call_id: str) -> str:
    """The channel-layer group of one live call: a hang-up that reached another process finds it there."""
    return f"s2s.call.{call_id}"


async def hang_up_elsewhere(call_id: str, credential: str) -> bool:
    """Asks whichever process holds ``call_id`` to hang it up (``credential`` "": an API key asked); False
    without a channel layer. Fire and forget: a call that is gone already ignores it."""
    layer = get_channel_layer()
    if layer is None:
        return False
    await layer.group_send(call_group(call_id), {"type": HANG_UP, "credential": credential})
    return True


def ice_servers() -> list[RTCIceServer]:
    return [
        RTCIceServer(urls=s["urls"], username=s.get("username"), credential=s.get("credential"))
        for s in settings.S2S_ICE_SERVERS
    ]


class WebRTCCall:
    """One call: its peer connection, its data channel, its tracks, and the session behind them."""

    def __init__(self, call_id: str, runtime: Runtime, credential: str) -> None:
        self.id = call_id
        self.runtime = runtime
        self.credential = credential
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=ice_servers()))
        self.reply = ReplyTrack(self._playout_started, self._playout_stopped)
        self.core: SessionCore | None = None
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

    async def answer(self, runtime: Runtime, opening: Opening) -> str:
        """Claims a unit (raises :class:`realtime.protocol.core.Refusal`), then answers; the session starts at once."""
        self.core = SessionCore.claim(runtime, self, opening)
        try:
            self.pc.addTrack(self.reply)
            await self.pc.setLocalDescription(await self.pc.createAnswer())
            runtime.calls[self.id] = self
            await self.core.start()
        except BaseException:
            await self.finish(EndReason.ERROR)
            raise
        self._spawn(self._watch_peer(), "peer-watch")
        self._spawn(self._handle_inbox(), "inbox")
        self._spawn(self._listen_for_admin(), "admin")
        return self.pc.localDescription.sdp

    # --- the end ---------------------------------------------------------------------

    async def hang_up(self) -> None:
        """``DELETE /v1/realtime/calls/{call_id}``: the client hung up."""
        await self.finish(EndReason.CLIENT_CLOSED)

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
        self.runtime.calls.pop(self.id, None)
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

    # --- core.Transport -------------------------------------------------------------

    async def send_event(self, event: Event) -> None:
        kind = event["type"]
        try:
            if kind in AUDIO_DELTAS:  # the audio rides the track
                assert self.core is not None
                self.reply.push(
                    event["response_id"],
                    event["item_id"],
                    base64.b64decode(event["delta"]),
                    self.core.session.output_format,
                )
                return
            self._send_text(json.dumps(event))
            if kind in AUDIO_DONE:
                response = event.get("response") or {}
                self.reply.finish(event.get("response_id") or response.get("id", ""))
            elif kind == "input_audio_buffer.speech_started" and self.reply.playing is not None and self._interrupts():
                for reply in self.clear_output_audio():
                    self._send_text(json.dumps(reply))
        except Exception:  # the session's send loop must go on whatever one event does here
            logger.exception("call %s: could not send %s", self.id, kind)

    async def close(self, code: int, reason: str) -> None:
        """The server ends the call (a limit, an admin, shutdown): the ``error`` that says why went out already."""
        if self.channel is not None and self.channel.readyState == "open":
            await asyncio.sleep(0.05)  # let the error event leave before the channel goes
        await self._close_peer()

    def clear_output_audio(self) -> list[Event]:
        """Stops the reply at once; truncates its item to what was played, as the server knows it."""
        cleared = self.reply.clear()
        if cleared is None:  # nothing was playing: still said, about the latest reply (as the API's type has it)
            return [server_event("output_audio_buffer.cleared", response_id=self.reply.last_response_id)]
        response_id, item_id, played_ms = cleared
        events = [server_event("output_audio_buffer.cleared", response_id=response_id)]
        assert self.core is not None
        try:
            events += self.core.conversation.truncate_item(item_id, 0, played_ms)
        except EventError as exc:  # e.g. an out-of-band response: nothing to truncate
            logger.debug("call %s: no truncation of %s: %s", self.id, item_id, exc.message)
        return events

    def _interrupts(self) -> bool:
        assert self.core is not None
        return bool((self.core.session.turn_detection or {}).get("interrupt_response", True))

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

    def _playout_started(self, response_id: str) -> None:
        self._send_text(json.dumps(server_event("output_audio_buffer.started", response_id=response_id)))

    def _playout_stopped(self, response_id: str) -> None:
        self._send_text(json.dumps(server_event("output_audio_buffer.stopped", response_id=response_id)))

    # --- the peer --------------------------------------------------------------------

    def _on_datachannel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENTS_CHANNEL or self.channel is not None:
            logger.info("call %s: ignoring data channel %r", self.id, channel.label)
            return
        self.channel = channel
        channel.on("message", self._on_message)
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

    async def _handle_inbox(self) -> None:
        """Client events in the order they came (the core's rate limit bounds what one does)."""
        while True:
            text, size = await self._inbox.get()
            if self.core is None or self.core.ended:
                return
            await self.core.receive(text, size)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
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
        RTCP receiver report on the reply track (which a typing-only client still sends, about every second)."""
        timeout = settings.S2S_WEBRTC_PEER_TIMEOUT_S
        while True:
            silent_for = time.monotonic() - self._heard_at
            if silent_for >= timeout:
                report_age = await self._last_report_age()
                if report_age is None or report_age >= timeout:
                    self._end_soon(EndReason.CLIENT_CLOSED, f"the peer sent nothing for {timeout:.0f}s")
                    return
                self._heard_at = time.monotonic() - report_age
                continue
            await asyncio.sleep(timeout - silent_for)

    async def _last_report_age(self) -> float | None:
        """Seconds since the peer's last RTCP report about the reply track, or None if it sent none."""
        for sender in self.pc.getSenders():
            for stats in (await sender.getStats()).values():
                if stats.type == "remote-inbound-rtp":
                    return (datetime.now(UTC) - stats.timestamp).total_seconds()
        return None

    async def _listen_for_admin(self) -> None:
        """Joins the session's and the call's channel-layer groups, so an admin's "end session", and a hang-up
        that reached another process of the cluster, end this call too."""
        layer = get_channel_layer()
        if layer is None or self.core is None:
            return
        groups = [cluster.session_group(self.core.id), call_group(self.id)]
        name = await layer.new_channel()
        try:
            for group in groups:
                await layer.group_add(group, name)
            while True:
                message = await layer.receive(name)
                if message.get("type") == cluster.END_SESSION:
                    await self.core.end_by_admin()
                    return
                if message.get("type") == HANG_UP and message.get("credential") in ("", self.credential):
                    await self.hang_up()
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("call %s: the channel layer failed; admin actions cannot reach it", self.id)
        finally:
            for group in groups:
                try:
                    await asyncio.wait_for(asyncio.shield(layer.group_discard(group, name)), 2.0)
                except Exception:
                    logger.debug("call %s: could not leave %s", self.id, group)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=f"{name}-{self.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
