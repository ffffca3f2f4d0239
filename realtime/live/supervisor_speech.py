"""A supervisor's voice during a take-over (issue 51), as the call's outgoing audio.

The supervisor's microphone comes as PCM16 at 24 kHz (``supervisor.audio.append``). Each stretch of speech (a
frame over :data:`SPEECH_LEVEL` starts one, :data:`HANG_MS` under it ends it) becomes one response of the
assistant, made of the same pipeline messages an answer is made of (``ResponseStarted``, ``AudioOut``,
``SpokenText``, ``ResponseFinished``), so the session turns it into the caller's events exactly as it does an
answer: ``response.output_audio.delta`` framed in a response for a WebSocket client (a stock one plays it),
the outgoing track or RTP for a WebRTC or SIP call. When a stretch ends its words are transcribed (the unit's
own speech-to-text engine) and kept as the assistant's item, so the agent knows what was said. Silence between
stretches is not sent: the caller hears silence anyway.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from pipelines import audio, messages as m
from pipelines.ids import new_id
from realtime.protocol.session.config import SessionConfig
from realtime.protocol.wire import EventError

SPEECH_LEVEL = 0.01  # RMS (full scale 1.0, about -40 dBFS) over which a frame of the supervisor's audio is speech
HANG_MS = 800  # this much quiet ends a stretch of speech (one response)
PREROLL_MS = 200  # quiet audio kept before a stretch starts, so that its first sound is not clipped
MAX_STRETCH_MS = 15_000  # a stretch that never falls quiet (a loud room) is closed and a new one opened
MAX_QUEUED = 500  # chunks waiting while a stretch's words are transcribed (at 20 ms each, 10 s)
PCM_BYTES_PER_MS = audio.RATES[audio.PCM] * audio.BYTES_PER_SAMPLE[audio.PCM] // 1000

Speak = Callable[[m.Outbound], Awaitable[None]]
Transcribe = Callable[[bytes], Awaitable[str]]
Heard = Callable[[str, str, int], None]  # (item id, transcript, audio ms)


def level(pcm: bytes) -> float:
    """The RMS level of PCM16 audio, full scale 1.0."""
    samples = audio.decode(pcm, audio.PCM)
    return float(np.sqrt(np.mean(np.square(samples)))) if len(samples) else 0.0


@dataclass
class Stretch:
    """One stretch of the supervisor's speech: one response, one assistant item."""

    response_id: str = field(default_factory=lambda: new_id("resp"))
    item_id: str = field(default_factory=lambda: new_id("item"))
    pcm: list[bytes] = field(default_factory=list)
    ms: int = 0
    quiet_ms: int = 0


class SupervisorSpeech:
    """The take-over's voice: fed chunks (:meth:`feed`), spoken by :meth:`run` (a task of the session), ended
    by :meth:`finish` (the hand-back), which closes the stretch in progress."""

    def __init__(self, speak: Speak, transcribe: Transcribe, heard: Heard, session: SessionConfig) -> None:
        self._speak, self._transcribe, self._heard = speak, transcribe, heard
        self._session = session
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=MAX_QUEUED)
        self._done = asyncio.Event()
        self._preroll: deque[bytes] = deque()
        self._stretch: Stretch | None = None
        self.finishing = False

    def feed(self, pcm: bytes) -> None:
        """One chunk of the supervisor's microphone (PCM16, 24 kHz); raises :class:`EventError` when too much is
        waiting (the supervisor sends faster than real time)."""
        if self.finishing:
            return
        try:
            self._queue.put_nowait(pcm)
        except asyncio.QueueFull:
            raise EventError(
                "input_audio_buffer_full",
                f"Too much of the supervisor's audio is waiting ({MAX_QUEUED} chunks): send it in real time.",
                "audio",
            ) from None

    async def finish(self) -> None:
        """Closes the stretch in progress (its words transcribed and kept) and returns once :meth:`run` did."""
        if not self.finishing:
            self.finishing = True
            await self._queue.put(None)
        await self._done.wait()

    async def run(self) -> None:
        try:
            while (pcm := await self._queue.get()) is not None:
                await self._take(pcm)
            await self._close()
        finally:
            self._done.set()

    async def _take(self, pcm: bytes) -> None:
        ms = len(pcm) // PCM_BYTES_PER_MS
        loud = level(pcm) >= SPEECH_LEVEL
        stretch = self._stretch
        if stretch is None:
            self._preroll.append(pcm)
            while len(self._preroll) > 1 and sum(map(len, self._preroll)) // PCM_BYTES_PER_MS > PREROLL_MS:
                self._preroll.popleft()
            if not loud:
                return
            stretch = self._stretch = Stretch()
            await self._speak(
                m.ResponseStarted(
                    generation=0,
                    response_id=stretch.response_id,
                    item_id=stretch.item_id,
                    output_modalities=("audio",),
                    output_format=self._session.output_format,
                    voice=self._session.voice,
                    out_of_band=False,
                )
            )
            held, self._preroll = list(self._preroll), deque()
        else:
            held = [pcm]
        for chunk in held:
            await self._send_audio(stretch, chunk)
        stretch.quiet_ms = 0 if loud else stretch.quiet_ms + ms
        if stretch.quiet_ms >= HANG_MS or stretch.ms >= MAX_STRETCH_MS:
            await self._close()

    async def _send_audio(self, stretch: Stretch, pcm: bytes) -> None:
        stretch.pcm.append(pcm)
        stretch.ms += len(pcm) // PCM_BYTES_PER_MS
        out_format = self._session.output_format
        data = pcm
        if out_format != audio.PCM:
            samples = audio.resample(audio.decode(pcm, audio.PCM), audio.RATES[audio.PCM], audio.RATES[out_format])
            data = audio.encode(samples, out_format)
        await self._speak(m.AudioOut(generation=0, response_id=stretch.response_id, data=data))

    async def _close(self) -> None:
        """The stretch ends: its words, then the end of its response, and the assistant's item kept."""
        stretch, self._stretch = self._stretch, None
        if stretch is None:
            return
        transcript = await self._transcribe(b"".join(stretch.pcm))
        if transcript:
            await self._speak(m.SpokenText(generation=0, response_id=stretch.response_id, text=transcript))
        await self._speak(m.ResponseFinished(generation=0, response_id=stretch.response_id, status="completed"))
        self._heard(stretch.item_id, transcript, stretch.ms)
