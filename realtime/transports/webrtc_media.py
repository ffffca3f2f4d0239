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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

from pipelines import audio

TRACK_RATE = 48000  # Opus runs at 48 kHz
FRAME_S = 0.020
FRAME_SAMPLES = int(TRACK_RATE * FRAME_S)
_TIME_BASE = fractions.Fraction(1, TRACK_RATE)
_SILENCE = bytes(FRAME_SAMPLES * 2)


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


@dataclass
class _Segment:
    """The queued audio of one response (PCM16 at 48 kHz), and how much of it went out."""

    response_id: str
    item_id: str
    data: bytearray
    done: bool = False
    sent_samples: int = 0
    started: bool = False


class ReplyTrack(MediaStreamTrack):
    """The server's outgoing audio track: the replies, in order, paced in real time.

    ``on_started(response_id)`` fires when a response's first frame goes out,
    ``on_stopped(response_id)`` when its last one has (after :meth:`finish`); a
    :meth:`clear` drops everything queued at once and fires neither.
    """

    kind = "audio"

    def __init__(self, on_started: Callable[[str], None], on_stopped: Callable[[str], None]) -> None:
        super().__init__()
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._segments: deque[_Segment] = deque()
        self._cleared: set[str] = set()  # responses cut off: what else of them comes is not played
        self.last_response_id = ""  # the latest response that had audio here
        self._resamplers: dict[int, audio.StreamResampler] = {}
        self._next_at: float | None = None
        self._pts = 0
        self.frames_sent = 0
        self.restarts = 0  # times the clock was re-anchored after a stall (never a burst)

    # --- feeding ---------------------------------------------------------------------

    def push(self, response_id: str, item_id: str, data: bytes, audio_format: str) -> None:
        """Queues reply audio (bytes of a Realtime format) for playout, unless its response was cleared."""
        if response_id in self._cleared:
            return
        self.last_response_id = response_id
        rate = audio.RATES[audio_format]
        resampler = self._resamplers.get(rate)
        if resampler is None:
            resampler = self._resamplers[rate] = audio.StreamResampler(rate, TRACK_RATE)
        pcm = audio.encode(resampler.process(audio.decode(data, audio_format)), audio.PCM)
        segment = self._segments[-1] if self._segments else None
        if segment is None or segment.response_id != response_id or segment.done:
            segment = _Segment(response_id, item_id, bytearray())
            self._segments.append(segment)
        segment.data += pcm

    def finish(self, response_id: str) -> None:
        """No more audio of ``response_id`` will come: it stops once what is queued has played."""
        for segment in self._segments:
            if segment.response_id == response_id and not segment.done:
                for resampler in self._resamplers.values():  # what the filter holds: the reply's last ms
                    segment.data += audio.encode(resampler.flush(), audio.PCM)
                segment.done = True

    def clear(self) -> tuple[str, str, int] | None:
        """Drops all queued audio now; returns (response id, item id, ms played) of the one that was playing."""
        playing = self._segments[0] if self._segments and self._segments[0].started else None
        self._cleared.update(segment.response_id for segment in self._segments if not segment.done)
        self._segments.clear()
        for resampler in self._resamplers.values():
            resampler.flush()  # dropped with the rest
        if playing is None:
            return None
        return playing.response_id, playing.item_id, playing.sent_samples * 1000 // TRACK_RATE

    @property
    def playing(self) -> str | None:
        """The response whose audio is going out (or queued to), if any."""
        return self._segments[0].response_id if self._segments else None

    def played_ms(self, response_id: str) -> int:
        for segment in self._segments:
            if segment.response_id == response_id:
                return segment.sent_samples * 1000 // TRACK_RATE
        return 0

    # --- playout ---------------------------------------------------------------------

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        await self._pace()
        frame = AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(self._next_frame_bytes())
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

    def _next_frame_bytes(self) -> bytes:
        """20 ms of the head segment (padded with silence on an underrun), or silence."""
        if not self._segments:
            return _SILENCE
        segment = self._segments[0]
        if not segment.started:
            segment.started = True
            self._on_started(segment.response_id)
        chunk = bytes(segment.data[: FRAME_SAMPLES * 2])
        del segment.data[: FRAME_SAMPLES * 2]
        segment.sent_samples += len(chunk) // 2
        if segment.done and not segment.data:
            self._segments.popleft()
            self._on_stopped(segment.response_id)
        return chunk + _SILENCE[len(chunk) :]
