"""Opt-in turn recordings (``S2S_RECORD_AUDIO=1``): each turn's user and assistant audio as WAV files.

The session recorder feeds a ``TurnAudio`` what the client appended and what the pipeline
sent out, on the event loop; it only keeps samples in memory and cuts them at the turn
boundaries the VAD reports. Encoding the WAV, the storage write and the row go through the
record writer's thread (``submit``), never the audio path. Files live in Django's default
storage under ``recordings/<session>/`` and are deleted with their row (``recording_models``).
"""

from __future__ import annotations

import io
import logging
import wave
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from django.conf import settings
from django.core.files.base import ContentFile

from pipelines import audio, messages as m
from realtime.models import Recording
from realtime.protocol import client_events as ce

if TYPE_CHECKING:
    from realtime.protocol.conversation import Conversation

logger = logging.getLogger(__name__)

Submit = Callable[[Callable[[], None]], None]
RATE = audio.PIPELINE_RATE  # the user's audio is kept as the VAD hears it, so its positions match
KEEP_S = 120  # the user's audio kept in memory: longer than any turn
MAX_TURN_S = 300  # an assistant answer longer than this is recorded up to here


def for_session(session_id: str, submit: Submit) -> TurnAudio | None:
    """A recorder of the session's turns, or None when recording is off."""
    return TurnAudio(session_id, submit) if settings.S2S_RECORD_AUDIO else None


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """float32 mono samples -> a 16-bit PCM WAV file."""
    pcm = np.clip(np.round(samples * 32767.0), -32768, 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(pcm.tobytes())
    return out.getvalue()


class TurnAudio:
    """One session's audio, cut into turns: the user's by the VAD's positions, the assistant's by response."""

    def __init__(self, session_id: str, submit: Submit) -> None:
        self.session_id = session_id
        self._submit = submit
        self._chunks: deque[tuple[int, np.ndarray]] = deque()  # (first sample's position, int16 samples)
        self._received = 0  # samples of user audio so far, at RATE
        self._resampler: audio.StreamResampler | None = None
        self._speech: dict[str, int] = {}  # item id -> start position (ms) while the user speaks
        self._spans: dict[str, tuple[int, int]] = {}  # item id -> (start ms, end ms) once speech stopped
        self._manual_end_ms: int | None = None  # where the client's last input_audio_buffer.commit ended
        self._answers: dict[str, list[bytes]] = {}  # response id -> audio sent so far
        self._answer_bytes: dict[str, int] = {}

    # --- what the client sent ---------------------------------------------------------------

    def client_event(self, event: ce.ClientEvent, conversation: Conversation) -> None:
        if isinstance(event, ce.InputAudioAppend):
            self._append(event.audio, conversation.session.input_format)
        elif isinstance(event, ce.InputAudioCommit):
            self._manual_end_ms = self._received * 1000 // RATE

    def _append(self, data: bytes, audio_format: str) -> None:
        rate = audio.RATES[audio_format]
        if self._resampler is None or self._resampler.from_rate != rate:
            self._resampler = audio.StreamResampler(rate, RATE)
        samples = self._resampler.process(audio.decode(data, audio_format))
        if not len(samples):
            return
        pcm = np.clip(np.round(samples * 32767.0), -32768, 32767).astype(np.int16)
        self._chunks.append((self._received, pcm))
        self._received += len(samples)
        while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) < self._received - KEEP_S * RATE:
            self._chunks.popleft()

    def _cut(self, start_ms: int, end_ms: int) -> np.ndarray:
        start, end = start_ms * RATE // 1000, end_ms * RATE // 1000
        parts = [
            chunk[max(0, start - first) : max(0, end - first)]
            for first, chunk in self._chunks
            if first < end and first + len(chunk) > start
        ]
        return np.concatenate(parts).astype(np.float32) / 32768.0 if parts else np.zeros(0, dtype=np.float32)

    # --- what the pipeline sent ---------------------------------------------------------------

    def output(self, msg: m.Outbound, conversation: Conversation) -> None:
        if isinstance(msg, m.SpeechStarted):
            self._speech[msg.item_id] = msg.audio_start_ms
        elif isinstance(msg, m.SpeechStopped):
            start = self._speech.pop(msg.item_id, None)
            if start is not None:
                self._spans[msg.item_id] = (start, msg.audio_end_ms)
        elif isinstance(msg, m.AudioCommitted):
            self._user_turn(msg)
        elif isinstance(msg, m.AudioCleared):
            self._speech.clear()
        elif isinstance(msg, m.AudioOut):
            self._answer_audio(msg, conversation)
        elif isinstance(msg, m.ResponseFinished):
            self._assistant_turn(msg, conversation)

    def _user_turn(self, msg: m.AudioCommitted) -> None:
        span = self._spans.pop(msg.item_id, None)
        if span is None and self._manual_end_ms is not None:  # a commit by the client: the buffer's last audio
            span = (max(0, self._manual_end_ms - msg.duration_ms), self._manual_end_ms)
            self._manual_end_ms = None
        if span is None:
            return
        samples = self._cut(*span)
        if len(samples):
            self._save(msg.item_id, "user", samples, RATE)

    def _answer_audio(self, msg: m.AudioOut, conversation: Conversation) -> None:
        state = conversation.responses.find(msg.response_id)
        if state is None or state.out_of_band:
            return
        kept = self._answer_bytes.get(msg.response_id, 0)
        limit = MAX_TURN_S * audio.RATES[state.output_format] * audio.BYTES_PER_SAMPLE[state.output_format]
        if kept < limit:
            self._answers.setdefault(msg.response_id, []).append(msg.data[: limit - kept])
            self._answer_bytes[msg.response_id] = kept + len(msg.data)

    def _assistant_turn(self, msg: m.ResponseFinished, conversation: Conversation) -> None:
        chunks = self._answers.pop(msg.response_id, None)
        self._answer_bytes.pop(msg.response_id, None)
        state = conversation.responses.find(msg.response_id)
        if not chunks or state is None:
            return
        rate = audio.RATES[state.output_format]
        self._save(state.item_id, "assistant", audio.decode(b"".join(chunks), state.output_format), rate)

    def _save(self, item_id: str, role: str, samples: np.ndarray, rate: int) -> None:
        session_id = self.session_id
        duration_ms = len(samples) * 1000 // rate

        def write() -> None:
            if Recording.objects.filter(session_id=session_id, item_id=item_id).exists():
                return  # a retried write: the file is there already
            recording = Recording(session_id=session_id, item_id=item_id, role=role, duration_ms=duration_ms)
            content = ContentFile(wav_bytes(samples, rate))
            recording.audio.save(f"{session_id}/{item_id}-{role}.wav", content, save=False)
            recording.save()

        self._submit(write)
