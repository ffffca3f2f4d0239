"""Turn detection: finds where the user starts and stops speaking, and buffers the turn."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from pipelines import audio
from pipelines.ids import new_id
from pipelines.messages import (
    AudioCleared,
    AudioCommitted,
    AudioIn,
    AudioItem,
    ClearAudio,
    CommitAudio,
    Downstream,
    Message,
    PartialUtterance,
    PipelineError,
    SpeechStarted,
    SpeechStopped,
    TurnAbandoned,
    TurnConfirmed,
    Utterance,
)
from pipelines.stages.base import SessionContext, Stage

FRAME = 512  # samples at 16 kHz, 32 ms: the frame Silero scores
FRAME_MS = FRAME * 1000 // audio.PIPELINE_RATE
MIN_COMMIT_MS = 100
MAX_BUFFER_S = 15 * 60  # an uncommitted buffer longer than this is cut from the front


class VadState(Protocol):
    def prob(self, frame: np.ndarray) -> float: ...
    def reset(self) -> None: ...


class VadModel(Protocol):
    def new_state(self) -> VadState: ...


class VadStage(Stage):
    """Scores 32 ms frames; in ``server_vad`` mode cuts turns, otherwise only buffers."""

    name = "vad"

    def __init__(self, context: SessionContext, model: VadModel, partial_every_ms: int = 0,
                 speculate_after_ms: int = 0) -> None:
        super().__init__(context)
        self.model = model
        self.partial_every_ms = partial_every_ms
        self.speculate_after_ms = speculate_after_ms
        self._state: VadState | None = None
        self._reset_session()

    def setup(self) -> None:
        self._state = self.model.new_state()
        self._state.prob(np.zeros(FRAME, dtype=np.float32))  # first-call costs now, not in a session
        self._state.reset()

    def _reset_session(self) -> None:
        self._resampler: audio.StreamResampler | None = None
        self._pending = np.zeros(0, dtype=np.float32)
        self._buffer: list[np.ndarray] = []  # the current turn, 16 kHz
        self._prefix: collections.deque[np.ndarray] = collections.deque()
        self._processed_ms = 0
        self._speaking = False
        self._speech_frames = 0
        self._silence_ms = 0
        self._item_id = ""
        self._since_partial_ms = 0
        self._speculation = ""  # the turn sent ahead while the silence window is still open
        self._speech_end_at = 0.0
        self._rounds = 0
        if self._state is not None:
            self._state.reset()

    def on_session_end(self) -> None:
        self._reset_session()

    def process(self, msg: Downstream) -> Iterator[Message]:
        if isinstance(msg, AudioIn):
            yield from self._audio(msg)
        elif isinstance(msg, CommitAudio):
            yield from self._commit(msg)
        elif isinstance(msg, AudioItem):
            samples = audio.decode(msg.data, msg.audio_format)
            samples = audio.resample(samples, audio.RATES[msg.audio_format], audio.PIPELINE_RATE)
            yield Utterance(generation=msg.generation, item_id=msg.item_id, samples=samples.tobytes(), create_response=False)
        elif isinstance(msg, ClearAudio):
            self._buffer.clear()
            self._speaking = False
            self._silence_ms = 0
            if self._speculation:
                yield TurnAbandoned(generation=msg.generation, turn=self._speculation)
                self._speculation = ""
            yield AudioCleared(generation=msg.generation)
        else:
            yield msg

    def _audio(self, msg: AudioIn) -> Iterator[Message]:
        rate = audio.RATES[msg.audio_format]
        if self._resampler is None or self._resampler.from_rate != rate:
            self._resampler = audio.StreamResampler(rate, audio.PIPELINE_RATE)
        samples = self._resampler.process(audio.decode(msg.data, msg.audio_format))
        self._pending = np.concatenate([self._pending, samples])
        detection = self.context.settings.turn_detection
        while len(self._pending) >= FRAME:
            frame, self._pending = self._pending[:FRAME], self._pending[FRAME:]
            self._processed_ms += FRAME_MS
            if detection.type is None:
                self._buffer.append(frame)
                self._trim_buffer()
                continue
            yield from self._frame(msg.generation, frame)

    def _frame(self, generation: int, frame: np.ndarray) -> Iterator[Message]:
        detection = self.context.settings.turn_detection
        assert self._state is not None
        prob = self._state.prob(frame)
        if not self._speaking:
            self._prefix.append(frame)
            keep = max(1, detection.prefix_padding_ms // FRAME_MS + 1)
            while len(self._prefix) > keep:
                self._prefix.popleft()
            self._speech_frames = self._speech_frames + 1 if prob >= detection.threshold else 0
            if self._speech_frames >= 2:  # two frames in a row: not a click
                self._speaking = True
                self._silence_ms = 0
                self._speech_end_at = time.monotonic()
                self._since_partial_ms = 0
                self._item_id = new_id("item")
                self._buffer = list(self._prefix)
                self._prefix.clear()
                start_ms = max(0, self._processed_ms - len(self._buffer) * FRAME_MS)
                yield SpeechStarted(generation=generation, item_id=self._item_id, audio_start_ms=start_ms)
            return
        self._buffer.append(frame)
        self._since_partial_ms += FRAME_MS
        if prob >= max(0.0, detection.threshold - 0.15):
            self._silence_ms = 0
            self._speech_end_at = time.monotonic()
            if self._speculation:  # the user goes on: drop the work started ahead
                yield TurnAbandoned(generation=generation, turn=self._speculation)
                self._speculation = ""
        else:
            self._silence_ms += FRAME_MS
        if self._silence_ms >= detection.silence_duration_ms:
            yield from self._end_turn(generation)
        elif (self.speculate_after_ms and not self._speculation
              and self.speculate_after_ms <= self._silence_ms < detection.silence_duration_ms):
            # Start STT, LM and TTS now; their output is held until the window closes.
            self._rounds += 1
            self._speculation = f"{self._item_id}#{self._rounds}"
            yield Utterance(generation=generation, item_id=self._item_id, samples=self._samples(),
                            create_response=detection.create_response, turn=self._speculation)
        elif self.partial_every_ms and self._since_partial_ms >= self.partial_every_ms and not self._silence_ms:
            self._since_partial_ms = 0
            yield PartialUtterance(generation=generation, item_id=self._item_id, samples=self._samples())

    def _end_turn(self, generation: int) -> Iterator[Message]:
        detection = self.context.settings.turn_detection
        end_ms = self._processed_ms - self._silence_ms
        samples = self._samples()
        item_id = self._item_id
        self._speaking = False
        self._speech_frames = 0
        self._buffer = []
        speculation, self._speculation = self._speculation, ""
        yield SpeechStopped(generation=generation, item_id=item_id, audio_end_ms=end_ms, speech_end_at=self._speech_end_at)
        yield AudioCommitted(generation=generation, item_id=item_id, duration_ms=len(samples) // 4 * 1000 // audio.PIPELINE_RATE)
        if speculation:
            yield TurnConfirmed(generation=generation, turn=speculation)
        else:
            yield Utterance(generation=generation, item_id=item_id, samples=samples, create_response=detection.create_response)

    def _commit(self, msg: CommitAudio) -> Iterator[Message]:
        samples = self._samples() + self._pending.tobytes()
        duration = len(samples) // 4 * 1000 // audio.PIPELINE_RATE
        if duration < MIN_COMMIT_MS:
            yield PipelineError(
                generation=msg.generation,
                code="input_audio_buffer_commit_empty",
                message=f"Error committing input audio buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms of audio, but buffer only has {duration}ms of audio.",
            )
            return
        self._buffer = []
        self._pending = np.zeros(0, dtype=np.float32)
        self._speaking = False
        self._speech_frames = 0
        if self._speculation:
            yield TurnAbandoned(generation=msg.generation, turn=self._speculation)
            self._speculation = ""
        yield AudioCommitted(generation=msg.generation, item_id=msg.item_id, duration_ms=duration)
        yield Utterance(generation=msg.generation, item_id=msg.item_id, samples=samples,
                        create_response=msg.create_response, response=msg.response)

    def _samples(self) -> bytes:
        if not self._buffer:
            return b""
        return np.concatenate(self._buffer).astype(np.float32).tobytes()

    def _trim_buffer(self) -> None:
        limit = MAX_BUFFER_S * 1000 // FRAME_MS
        if len(self._buffer) > limit:
            del self._buffer[: len(self._buffer) - limit]
