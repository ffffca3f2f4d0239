"""The reply's audio as a transport that plays it itself holds it (WebRTC's track, a SIP call's RTP): queued per
response, handed out one frame at a time, cleared at once on barge-in.

It keeps no clock: the transport asks for the next frame on its own (aiortc's ``recv``, an RTP media clock),
and gets silence when there is nothing to say. :class:`PlaysFromQueue` is the ``PlaysAudio`` half of such a
transport, written once for both.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pipelines import audio, messages as m
from realtime.live.transport import ClearedReply


class HearsPlayout(Protocol):
    """The session behind such a transport (a voice agent's, a translation's): told as each reply starts and stops
    going out."""

    def output_audio_started(self, response_id: str) -> None: ...

    def output_audio_stopped(self, response_id: str) -> None: ...


@dataclass
class _Segment:
    """The queued audio of one response (PCM16 at the queue's rate), and how much of it went out."""

    response_id: str
    item_id: str
    data: bytearray
    done: bool = False
    sent_samples: int = 0
    started: bool = False


class ReplyQueue:
    """The replies, in order, as PCM16 frames of ``frame_samples`` at ``rate``.

    ``on_started(response_id)`` fires when a response's first frame goes out, ``on_stopped(response_id)``
    when its last one has (after :meth:`finish`); :meth:`clear` drops everything queued and fires neither.
    """

    def __init__(
        self, rate: int, frame_samples: int, on_started: Callable[[str], None], on_stopped: Callable[[str], None]
    ) -> None:
        self.rate = rate
        self.frame_bytes = frame_samples * 2
        self._silence = bytes(self.frame_bytes)
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._segments: deque[_Segment] = deque()
        self._cleared: set[str] = set()  # responses cut off: what else of them comes is not played
        self._resamplers: dict[int, audio.StreamResampler] = {}
        self.last_response_id = ""  # the latest response that had audio here

    def push(self, response_id: str, item_id: str, data: bytes, audio_format: str) -> None:
        """Queues reply audio (bytes of a Realtime format) for playout, unless its response was cleared."""
        if response_id in self._cleared:
            return
        self.last_response_id = response_id
        rate = audio.RATES[audio_format]
        resampler = self._resamplers.get(rate)
        if resampler is None:
            resampler = self._resamplers[rate] = audio.StreamResampler(rate, self.rate)
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
        return playing.response_id, playing.item_id, playing.sent_samples * 1000 // self.rate

    @property
    def playing(self) -> str | None:
        """The response whose audio is going out (or queued to), if any."""
        return self._segments[0].response_id if self._segments else None

    def played_ms(self, response_id: str) -> int:
        for segment in self._segments:
            if segment.response_id == response_id:
                return segment.sent_samples * 1000 // self.rate
        return 0

    def next_frame(self) -> bytes:
        """One frame of the head segment (padded with silence on an underrun), or silence."""
        if not self._segments:
            return self._silence
        segment = self._segments[0]
        if not segment.started:
            segment.started = True
            self._on_started(segment.response_id)
        chunk = bytes(segment.data[: self.frame_bytes])
        del segment.data[: self.frame_bytes]
        segment.sent_samples += len(chunk) // 2
        if segment.done and not segment.data:
            self._segments.popleft()
            self._on_stopped(segment.response_id)
        return chunk + self._silence[len(chunk) :]


class PlaysFromQueue:
    """``realtime.live.transport.PlaysAudio`` for a transport that holds its reply in a :class:`ReplyQueue`
    (``self.playout``), and the queue's callbacks (:meth:`_playout_started`, :meth:`_playout_stopped`), which
    tell the transport's session (``self.core``) as each reply starts and stops going out."""

    playout: ReplyQueue
    core: HearsPlayout | None

    @property
    def playing(self) -> str | None:
        return self.playout.playing

    def play_audio(self, item_id: str, audio: m.AudioOut, audio_format: str) -> None:
        self.playout.push(audio.response_id, item_id, audio.data, audio_format)

    def end_reply(self, response_id: str) -> None:
        self.playout.finish(response_id)

    def clear_reply(self) -> ClearedReply:
        cleared = self.playout.clear()
        return ClearedReply(self.playout.last_response_id) if cleared is None else ClearedReply(*cleared)

    def _playout_started(self, response_id: str) -> None:
        if self.core is not None:
            self.core.output_audio_started(response_id)

    def _playout_stopped(self, response_id: str) -> None:
        if self.core is not None:
            self.core.output_audio_stopped(response_id)
