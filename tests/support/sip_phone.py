"""A SIP phone in this process, for measuring: aiosipua's UAC places the call, aiortp carries G.711 RTP.

Unlike baresip it tells when each frame of the question left (it paces its own 20 ms frames)
and when each frame of the reply arrived, on this process's monotonic clock.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
from aiortp import RTPSession
from aiosipua import OutgoingCall, SipUAC, build_sdp
from aiosipua.transport import UdpSipTransport

from pipelines import audio

RATE = 8000
FRAME = 160  # 20 ms at 8 kHz
LOUD = 0.02


class SipPhone:
    """``await dial(host, port)``, ``await say(samples)``, ``loud_after(t)``, ``await hang_up()``."""

    def __init__(self) -> None:
        self.sip = UdpSipTransport(local_addr=("127.0.0.1", 0))
        self.uac = SipUAC(self.sip)
        self.rtp: RTPSession | None = None
        self.call: OutgoingCall | None = None
        self.heard: list[tuple[float, float]] = []  # (arrival, peak) of each received frame
        self._queue: asyncio.Queue[np.ndarray] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None
        self.last_speech_sent_at = 0.0
        self._said = asyncio.Event()

    async def dial(self, host: str, port: int, user: str = "+15550001234") -> None:
        await self.sip.start()
        self.sip.on_message = lambda message, addr: self.uac.handle_response(message, addr)  # type: ignore[arg-type]
        self.uac.transport = self.sip
        self.rtp = await RTPSession.create(local_addr=("127.0.0.1", 0), remote_addr=("127.0.0.1", 9), payload_type=0)
        rtp_port = self.rtp._rtp_transport._transport.get_extra_info("sockname")[1]  # type: ignore[union-attr]
        offer = build_sdp("127.0.0.1", rtp_port, 0, "PCMU")
        local = self.sip._udp_transport.get_extra_info("sockname")  # type: ignore[union-attr]
        self.call = self.uac.send_invite(
            f"sip:bench@127.0.0.1:{local[1]}", f"sip:{user}@{host}:{port}", (host, port), offer
        )
        await self.call.wait_answered(30)
        assert self.call.sdp_answer is not None and self.call.sdp_answer.rtp_address is not None
        self.rtp.update_remote(self.call.sdp_answer.rtp_address)
        self.rtp.on_audio = self._on_audio
        self._sender = asyncio.create_task(self._send_frames())

    async def say(self, samples: np.ndarray) -> float:
        """Sends ``samples`` (8 kHz floats) in real time; returns when their last frame went out."""
        self._said.clear()
        await self._queue.put(samples)
        await asyncio.wait_for(self._said.wait(), len(samples) / RATE + 5)
        return self.last_speech_sent_at

    def loud_after(self, since: float) -> float | None:
        """The arrival of the first received frame with sound in it after ``since``."""
        return next((at for at, peak in self.heard if at > since and peak > LOUD), None)

    async def hang_up(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
        if self.call is not None:
            self.call.hangup(self.uac)
        await asyncio.sleep(0.1)
        if self.rtp is not None:
            await self.rtp.close()
        await self.sip.stop()

    def _on_audio(self, pcm: bytes, _timestamp: int) -> None:
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        self.heard.append((time.monotonic(), float(np.abs(samples).max()) if len(samples) else 0.0))

    async def _send_frames(self) -> None:
        """One 20 ms frame every 20 ms: what is queued, else silence (a phone's microphone never stops)."""
        assert self.rtp is not None
        pending = np.zeros(0, dtype=np.float32)
        speaking = False
        next_at = time.monotonic()
        while True:
            if len(pending) < FRAME and not self._queue.empty():
                pending = np.concatenate([pending, self._queue.get_nowait()])
                speaking = True
            frame, pending = pending[:FRAME], pending[FRAME:]
            if len(frame) < FRAME:
                frame = np.concatenate([frame, np.zeros(FRAME - len(frame), dtype=np.float32)])
            self.rtp.send_audio_auto(audio.encode(frame, audio.PCMU))
            if speaking and len(pending) == 0 and self._queue.empty():
                self.last_speech_sent_at = time.monotonic()
                speaking = False
                self._said.set()
            next_at += FRAME / RATE
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
