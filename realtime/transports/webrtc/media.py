"""The audio of a WebRTC call: the microphone track into the pipeline's format, the reply out as a paced track.

aiortc encodes and decodes Opus; this module only converts samples and keeps time.
The reply track hands aiortc one 20 ms frame per 20 ms of wall-clock time, silence
when there is nothing to say, so the peer's jitter buffer sees a steady stream and
a reply never arrives in a burst: after a stall of the event loop the clock is
re-anchored instead of catching up.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections.abc import Callable

import numpy as np
from aiortc import MediaStreamTrack, RTCRtpReceiver
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

from pipelines import audio
from realtime.transports.playout import ReplyQueue

TRACK_RATE = 48000  # Opus runs at 48 kHz
FRAME_S = 0.020
FRAME_SAMPLES = int(TRACK_RATE * FRAME_S)
_TIME_BASE = fractions.Fraction(1, TRACK_RATE)


# The server does not play the microphone: it hands each packet to the VAD the moment the next one shows it
# complete. aiortc's audio receiver holds 4 packets (80 ms) before the first, for smooth playout.
MICROPHONE_PREFETCH = 1


def hear_at_once(receiver: RTCRtpReceiver) -> None:
    """Lets a microphone track's frames out of aiortc's jitter buffer as they complete, not 80 ms later.
    The buffer still puts reordered packets back in order within its 16; a packet later than that is lost,
    which costs the STT 20 ms of sound and no one a glitch in playout (the server plays nothing of it)."""
    if receiver.track is not None and receiver.track.kind == "audio":
        receiver._RTCRtpReceiver__jitter_buffer = JitterBuffer(capacity=16, prefetch=MICROPHONE_PREFETCH)


class MicrophoneConverter:
    """Decoded microphone frames (48 kHz, any layout) -> ``audio/pcm`` bytes (24 kHz mono PCM16)."""

    def __init__(self) -> None:
        self._resampler: audio.StreamResampler | None = None

    def convert(self, frame: AudioFrame) -> bytes:
        samples = frame.to_ndarray()
        channels = len(frame.layout.channels)
        if frame.format.is_planar:
            mono = samples.reshape(channels, -1).mean(axis=0)
        else:
            mono = samples.reshape(-1, channels).mean(axis=1)
        if samples.dtype == np.int16:
            mono = mono / 32768.0
        if self._resampler is None or self._resampler.from_rate != frame.sample_rate:
            self._resampler = audio.StreamResampler(frame.sample_rate, audio.RATES[audio.PCM])
        return audio.encode(self._resampler.process(mono.astype(np.float32)), audio.PCM)


class ReplyTrack(MediaStreamTrack):
    """The server's outgoing audio track: the replies (a :class:`ReplyQueue` at 48 kHz), paced in real time.

    ``on_started(response_id)`` fires when a response's first frame goes out,
    ``on_stopped(response_id)`` when its last one has (after :meth:`finish`); a
    :meth:`clear` drops everything queued at once and fires neither.
    """

    kind = "audio"

    def __init__(self, on_started: Callable[[str], None], on_stopped: Callable[[str], None]) -> None:
        super().__init__()
        self.queue = ReplyQueue(TRACK_RATE, FRAME_SAMPLES, on_started, on_stopped)
        self._next_at: float | None = None
        self._pts = 0
        self.frames_sent = 0
        self.restarts = 0  # times the clock was re-anchored after a stall (never a burst)

    def push(self, response_id: str, item_id: str, data: bytes, audio_format: str) -> None:
        self.queue.push(response_id, item_id, data, audio_format)

    def finish(self, response_id: str) -> None:
        self.queue.finish(response_id)

    def clear(self) -> tuple[str, str, int] | None:
        return self.queue.clear()

    def played_ms(self, response_id: str) -> int:
        return self.queue.played_ms(response_id)

    @property
    def playing(self) -> str | None:
        """The response whose audio is going out (or queued to), if any."""
        return self.queue.playing

    @property
    def last_response_id(self) -> str:
        return self.queue.last_response_id

    # --- playout ---------------------------------------------------------------------

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        await self._pace()
        frame = AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(self.queue.next_frame())
        frame.pts = self._pts
        frame.sample_rate = TRACK_RATE
        frame.time_base = _TIME_BASE
        self._pts += FRAME_SAMPLES
        self.frames_sent += 1
        return frame

    async def _pace(self) -> None:
        """Waits for this frame's time; more than a frame late (the loop stalled), starts the clock again."""
        now = time.monotonic()
        if self._next_at is None or now - self._next_at > FRAME_S:
            if self._next_at is not None:
                self.restarts += 1
            self._next_at = now
        elif self._next_at > now:
            await asyncio.sleep(self._next_at - now)
        self._next_at += FRAME_S
